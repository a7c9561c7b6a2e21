"""The meta-evaluation suite: every loader on files in its published layout (hub parquet shards written with
`datasets` and the card's features, CSV, JSON, `.mat` written with scipy.io.savemat in the layout of the real
PASCAL-50S files), a malformed row and a missing file for each; the statistics against scipy and hand counts;
PASCAL-50S's real files; the CLI table against `evaluate_metric`."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest
import scipy.io
from scipy.stats import kendalltau

from eval.meta_eval import loaders as L
from eval.meta_eval.benchmarks import BENCHMARKS, parse_benchmarks
from eval.meta_eval.suite import MATCH, MISMATCH, load, verify_status
from recon_score.errors import ReconScoreError
from tests.conftest import SHARED_DATA
from tests.eval.metric_helpers import DATA

PASCAL = SHARED_DATA / "pascal50s"


# -- registry ------------------------------------------------------------------------------------------------------
def test_every_benchmark_names_a_loader_and_a_default_variant():
    for b in BENCHMARKS.values():
        assert callable(b.load()) and b.default_variant == b.variants[0].name and b.files and b.source
    assert parse_benchmarks("all") == list(BENCHMARKS)
    assert BENCHMARKS["pascal50s"].default_variant == "5-refs"
    assert BENCHMARKS["polaris"].default_variant == "parquet"
    with pytest.raises(ReconScoreError, match="did you mean 'pascal50s'"):
        parse_benchmarks("pascal50")
    with pytest.raises(ReconScoreError, match="known: 4-refs, 1-ref"):
        BENCHMARKS["foil"].variant("2-refs")


def test_every_declared_variant_is_read_by_the_loaders():
    """A variant the registry offers but no loader branches on would label the default's numbers with its name."""
    source = inspect.getsource(L)
    for b in BENCHMARKS.values():
        for v in b.variants[1:]:
            assert f'"{v.name}"' in source, f"{b.name}: variant {v.name} is never read"
    with pytest.raises(ReconScoreError, match="unknown composite variant 'amt'"):
        BENCHMARKS["composite"].variant("amt")  # the AMT files have no reader: refused, not read as processed


def test_verify_status_is_the_published_rounding():
    assert verify_status(30.78, "30.8")[1] == MATCH
    assert verify_status(30.74, "30.8")[1] == MISMATCH
    assert verify_status(16.86, "16.9") == pytest.approx((-0.04, MATCH))
    assert verify_status(float("nan"), "16.9")[1] == MISMATCH


# -- hub parquet: Polaris, Nebula (+ Spica), LongCap-Arena --------------------------------------------------------------
def _png(value: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2, 2), (value, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _hub(folder, split, records, features) -> None:
    from datasets import Dataset, Features

    (folder / "data").mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(records, features=Features(features)).to_parquet(
        str(folder / "data" / f"{split}-00000-of-00001.parquet")
    )


def _polaris_features():
    from datasets import Image, Sequence, Value

    return {
        "refs": Sequence(Value("string")),
        "cand": Value("string"),
        "img": Image(),
        "human_score": Value("float32"),
    }


def _polaris(folder, scores=(0.25, 0.5, 1.0, 0.75)) -> None:
    n = len(scores)
    records = {
        "refs": [["a dog runs", "a dog on grass"]] * n,
        "cand": ["a dog", "a cat", "a dog runs on grass", "two dogs"][:n],
        "img": [{"bytes": _png(i // 2), "path": f"img{i // 2}.png"} for i in range(n)],  # 2 rows per image
        "human_score": list(scores),
    }
    _hub(folder, "test", records, _polaris_features())


def test_polaris_parquet_shards_with_the_card_features(tmp_path):
    _polaris(tmp_path / "polaris")
    t = L.load_polaris(tmp_path / "polaris")
    assert len(t) == 4 and t["image"].tolist() == ["img0.png", "img0.png", "img1.png", "img1.png"]
    assert t["references"][0] == ["a dog runs", "a dog on grass"] and t["judgment"].tolist()[:2] == [
        0.25,
        0.5,
    ]


def test_polaris_malformed_row_and_missing_shards(tmp_path):
    _polaris(tmp_path / "polaris", scores=(0.25, None, 1.0, 0.5))
    with pytest.raises(L.BenchmarkFormatError, match=r"row 1: score None is not a number"):
        L.load_polaris(tmp_path / "polaris")
    with pytest.raises(
        L.MissingBenchmarkFile, match=r"test-\*\.parquet not found .*hf download yuwd/Polaris"
    ):
        L.load_polaris(tmp_path / "none")


def test_polaris_csv_variant(tmp_path):
    folder = tmp_path / "polaris"
    folder.mkdir()
    pd.DataFrame(
        {
            "mt": ["a dog", "a cat"],
            "refs": ["['a dog runs', 'a dog']"] * 2,
            "score": [0.5, 0.25],
            "imgid": ["x.jpg"] * 2,
        }
    ).to_csv(folder / "polaris_test.csv", index=False)
    t = L.load_polaris(folder, "csv")
    assert t["references"][1] == ["a dog runs", "a dog"] and t["judgment"].tolist() == [0.5, 0.25]


def _nebula(folder, file_names=("a.jpg", "a.jpg"), scores=(0.2, 0.8)) -> None:
    from datasets import Image, Sequence, Value

    features = {
        "file_name": Value("string"),
        "image": Image(),
        "refs": Sequence(Value("string")),
        "mt": Value("string"),
        "human_score": Value("float32"),
    }
    records = {
        "file_name": list(file_names),
        "image": [{"bytes": _png(1), "path": None}] * len(scores),
        "refs": [["a red square"]] * len(scores),
        "mt": ["a square", "a red square"][: len(scores)],
        "human_score": list(scores),
    }
    _hub(folder, "test", records, features)


def test_nebula_with_and_without_spica_corrections(tmp_path):
    from datasets import Value

    folder = tmp_path / "nebula"
    _nebula(folder)
    assert L.load_nebula(folder)["judgment"].round(6).tolist() == [0.2, 0.8]
    fix = {"file_name": Value("string"), "mt": Value("string"), "human_score": Value("float32")}
    _hub(folder / "spica", "test", {"file_name": ["a.jpg"], "mt": ["a square"], "human_score": [0.5]}, fix)
    t = L.load_nebula(folder, "spica")
    assert (
        t["judgment"].round(6).tolist() == [0.5, 0.8] and "1 of 2 human scores changed" in t.attrs["notes"][1]
    )


def test_nebula_missing_feature_names_the_shard(tmp_path):
    from datasets import Value

    folder = tmp_path / "nebula"
    _hub(
        folder,
        "test",
        {"mt": ["x"], "human_score": [0.1]},
        {"mt": Value("string"), "human_score": Value("float32")},
    )
    with pytest.raises(
        L.BenchmarkFormatError, match=r"test-00000-of-00001.parquet: missing feature\(s\) refs"
    ):
        L.load_nebula(folder)
    _nebula(folder)  # every feature but the one that names the image
    shard = next((folder / "data").glob("*.parquet"))
    pd.read_parquet(shard).drop(columns="file_name").to_parquet(shard)
    with pytest.raises(
        L.BenchmarkFormatError, match=r"parquet: missing feature\(s\) file_name \(the dataset"
    ):
        L.load_nebula(folder)


def test_longcaparena_one_category_per_perspective(tmp_path):
    from datasets import Image, Sequence, Value

    features = {"image": Image(), "refs": Sequence(Value("string")), "mt": Value("string"),
                "human_score": Value("float32")}  # fmt: skip
    folder = tmp_path / "longcaparena"
    for k, short in enumerate(L.LONGCAP_PERSPECTIVES):
        recs = {"image": [{"bytes": _png(k), "path": "p.png"}] * 2, "refs": [["r"]] * 2, "mt": ["a", "b"],
                "human_score": [1.0, 2.0]}  # fmt: skip
        _hub(folder, f"dci_test.{short}", recs, features)
    t = L.load_longcaparena(folder)
    assert t["category"].tolist() == ["descriptiveness"] * 2 + ["relevance"] * 2 + ["fluency"] * 2
    (folder / "data" / "dci_test.flu-00000-of-00001.parquet").unlink()
    with pytest.raises(L.MissingBenchmarkFile, match=r"dci_test\.flu-\*\.parquet not found"):
        L.load_longcaparena(folder)


# -- Composite (processed CSV) -------------------------------------------------------------------------------------
def test_composite_csv_row_and_missing_file(tmp_path):
    folder = tmp_path / "composite"
    folder.mkdir()
    rows = "mt,refs,score,imgid\na dog,\"['a dog runs']\",3,x.jpg\na cat,\"['a cat sits']\",oops,y.jpg\n"
    (folder / "composite.csv").write_text(rows)
    with pytest.raises(L.BenchmarkFormatError, match=r"composite.csv: row 2: score 'oops' is not a number"):
        L.load_composite(folder)
    (folder / "composite.csv").write_text(rows.replace("oops", "4"))
    assert L.load_composite(folder)["judgment"].tolist() == [3.0, 4.0]
    (folder / "composite.csv").write_text("mt,refs,score,imgid\na,__import__('os'),1,x\n")
    with pytest.raises(L.BenchmarkFormatError, match=r"row 1: refs .* is not a list of strings"):
        L.load_composite(folder)
    with pytest.raises(L.MissingBenchmarkFile, match=r"none/composite.csv not found \(get it from"):
        L.load_composite(tmp_path / "none")
    (folder / "composite.csv").write_text("")  # an empty download
    with pytest.raises(
        L.BenchmarkFormatError, match=r"composite.csv: not a readable CSV \(No columns to parse"
    ):
        L.load_composite(folder)


# -- FOIL ----------------------------------------------------------------------------------------------------------
def _foil(folder, foil_flag=True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    anns = [
        {"id": 7, "image_id": 1, "caption": "a dog on a sofa", "foil": False, "target_word": "ORIG", "foil_word": "ORIG"},
        {"id": 7, "image_id": 1, "caption": "a cat on a sofa", "foil": foil_flag, "target_word": "dog",
         "foil_word": "cat"},
    ]  # fmt: skip
    images = [{"id": 1, "file_name": "COCO_val2014_000000000001.jpg"}]
    (folder / "foilv1.0_test_2017.json").write_text(json.dumps({"images": images, "annotations": anns}))
    coco = [{"image_id": 1, "id": k, "caption": c} for k, c in enumerate(
        ["a dog on a sofa", "a dog lying down", "a brown dog", "a dog resting", "a sofa with a dog"])]  # fmt: skip
    (folder / "captions_val2014.json").write_text(json.dumps({"annotations": coco}))


def test_foil_pairs_and_reference_counts(tmp_path):
    _foil(tmp_path / "foil")
    four = L.load_foil(tmp_path / "foil")
    assert four["candidate"].tolist() == ["a dog on a sofa", "a cat on a sofa"] and four[
        "judgment"
    ].tolist() == [1, 0]
    assert four["references"][0] == ["a dog lying down", "a brown dog", "a dog resting", "a sofa with a dog"]
    assert L.load_foil(tmp_path / "foil", "1-ref")["references"][0] == ["a dog lying down"]


def test_foil_malformed_annotation_and_missing_captions(tmp_path):
    _foil(tmp_path / "foil", foil_flag="yes")
    with pytest.raises(L.BenchmarkFormatError, match=r"foilv1.0_test_2017.json: row annotations\[1\]"):
        L.load_foil(tmp_path / "foil")
    (tmp_path / "foil" / "captions_val2014.json").unlink()
    with pytest.raises(L.MissingBenchmarkFile, match=r"captions_val2014\.json not found"):
        L.load_foil(tmp_path / "foil")


# -- PASCAL-50S ----------------------------------------------------------------------------------------------------
def _struct(fields, rows):
    arr = np.empty((1, len(rows)), dtype=[(f, "O") for f in fields])
    for i, r in enumerate(rows):
        arr[0, i] = tuple(r)
    return arr


def _pascal(folder, *, category=(1, 2, 3, 4), votes_a=(30, 10, 24, 40)) -> None:
    """pair_pascal.mat, pascal50S.mat and consensus_pascal.mat with the real files' variables and fields."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = [(f"im{i}.jpg", f" caption a{i} ", f" caption b{i} ") for i in range(4)]
    scipy.io.savemat(
        folder / "pair_pascal.mat",
        {
            "new_input": _struct(("name", "sent1", "sent2"), pairs),
            "new_data": np.array([[6, 6], [6, 7], [6, 1], [1, 2]], dtype=np.uint8),
            "category": np.array([category], dtype=np.uint8),
        },
    )
    sents = np.empty((1, 50), dtype=object)
    for k in range(50):
        sents[0, k] = f"reference {k}"
    scipy.io.savemat(
        folder / "pascal50S.mat",
        {"refs": _struct(("image", "sent"), [(f"im{i}.jpg", sents) for i in range(4)])},
    )
    trip = []
    for i, va in enumerate(votes_a):
        for j in range(48):
            trip.append(
                (f"reference {j}", f"caption a{i}", f"caption b{i}", np.array([[1 if j < va else 2]]))
            )
    scipy.io.savemat(folder / "consensus_pascal.mat", {"triplets": _struct(("A", "B", "C", "winner"), trip)})


def test_pascal50s_labels_from_the_consensus_votes_and_the_reference_variants(tmp_path):
    _pascal(tmp_path / "p")
    t = L.load_pascal50s(tmp_path / "p", "48-refs")
    first = t[t["side"] == "a"] if "side" in t else t.iloc[::2]
    assert first["category"].tolist() == ["HC", "HI", "HM", "MM"]
    assert first["judgment"].tolist() == [1.0, 0.0, 1.0, 1.0]  # 30, 10, 24 (a tie: seed 42 picks a), 40 of 48
    assert first["candidate"].tolist()[0] == "caption a0"
    assert all(len(r) == 48 for r in t["references"])
    five = L.load_pascal50s(tmp_path / "p")
    assert len(five) == 4 * 2 * 5 and set(five["draw"]) == set(range(5))
    assert all(len(r) == 5 and set(r) <= {f"reference {k}" for k in range(48)} for r in five["references"])


def test_pascal50s_malformed_category_and_missing_consensus(tmp_path):
    _pascal(tmp_path / "p", category=(1, 2, 9, 4))
    with pytest.raises(L.BenchmarkFormatError, match=r"pair_pascal.mat: row 3: category 9 is not 1-4"):
        L.load_pascal50s(tmp_path / "p")
    _pascal(tmp_path / "q")
    (tmp_path / "q" / "consensus_pascal.mat").unlink()
    with pytest.raises(
        L.MissingBenchmarkFile, match=r"q/consensus_pascal.mat not found \(get it from vrama91/cider"
    ):
        L.load_pascal50s(tmp_path / "q")


@pytest.mark.skipif(not (PASCAL / "pair_pascal.mat").is_file(), reason="../shared/data/pascal50s not here")
def test_real_pascal50s_files_load_and_the_missing_consensus_is_one_line(tmp_path):
    pairs = L.read_pascal_pairs(PASCAL)
    refs = L.read_pascal_references(PASCAL)
    assert len(pairs) == 4000 and pd.Series([p["category"] for p in pairs]).value_counts().to_dict() == {
        "HC": 1000, "HI": 1000, "HM": 1000, "MM": 1000}  # fmt: skip
    assert len(refs) == 1000 and {len(v) for v in refs.values()} == {50}
    assert all(p["image"] in refs for p in pairs)
    loaded = load("pascal50s", SHARED_DATA)
    assert loaded.table is None and loaded.skipped == (
        f"{PASCAL / 'consensus_pascal.mat'} not found (get it from vrama91/cider, data/consensus_pascal.mat)"
    )


# -- statistics ----------------------------------------------------------------------------------------------------
def test_pairwise_accuracy_per_category_and_mean_by_hand(tmp_path):
    from eval.meta_eval.suite import statistics

    _pascal(tmp_path / "pascal50s")
    loaded = load("pascal50s", tmp_path, "48-refs")
    t = loaded.table
    # the metric prefers caption a everywhere: right where people chose a (HC, HM, MM), wrong for HI
    scores = np.where(t["candidate"].str.contains(" a"), 1.0, 0.0)
    rows = statistics(loaded, "m", scores, higher_is_better=True, n_boot=20, seed=0)
    assert [(r["category"], r["value"]) for r in rows] == [("HC", 100), ("HI", 0), ("HM", 100), ("MM", 100),
                                                           ("mean", 75)]  # fmt: skip
    tied = statistics(loaded, "m", np.zeros(len(t)), higher_is_better=True, n_boot=0, seed=0)
    assert [r["value"] for r in tied] == [0, 0, 0, 0, 0]  # a tie is never correct


def test_kendall_rows_are_scipy_on_every_judgment_row():
    from eval.meta_eval.suite import statistics

    loaded = load("flickr8k-expert", DATA)
    t = loaded.table
    score = t["candidate"].str.len().to_numpy(dtype=float)
    rows = {
        r["statistic"]: r for r in statistics(loaded, "len", score, higher_is_better=True, n_boot=50, seed=0)
    }
    for v in ("b", "c"):
        ref = 100 * kendalltau(score, t["judgment"], variant=v).statistic
        assert rows[f"tau_{v}"]["value"] == pytest.approx(ref, abs=1e-9)
        assert rows[f"tau_{v}"]["ci_low"] <= ref <= rows[f"tau_{v}"]["ci_high"]


# -- the command and the Python API --------------------------------------------------------------------------------
def test_cli_table_equals_evaluate_metric_with_a_callable(tmp_path, capsys):
    from eval import evaluate_metric
    from eval.cli import main
    from eval.metrics import CaptionBatch, build_metric

    out = tmp_path / "run"
    argv = ["correlate", "--benchmarks", "flickr8k-expert,thumb,polaris", "--data-root", str(DATA), "--metrics",
            "rouge", "--bootstrap", "40", "--verify", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert (
        "skipped polaris:" in printed
        and "reproduced 0 of 2 published values (2 not; 2 rows have none)" in printed
    )
    cli = pd.read_csv(out / "meta_eval.csv", keep_default_na=False, na_values=[""])
    rouge = build_metric("rouge")

    def my_metric(*, candidates, references, images):
        assert images is None  # no image folder in the fixture
        return rouge.score(CaptionBatch(candidates=candidates, references=references)).values

    api = evaluate_metric(["flickr8k-expert", "thumb"], my_metric, data_root=DATA, name="rouge", n_boot=40)
    api = pd.read_csv(__import__("io").StringIO(api.to_csv(index=False, float_format="%.4f")), keep_default_na=False,
                      na_values=[""])  # fmt: skip
    pd.testing.assert_frame_equal(cli, api)
    assert (out / "meta_eval.md").read_text().count("| flickr8k-expert |") == 2
    # a finished run is a no-op rerun, read back from the journal
    assert main(argv) == 0 and pd.read_csv(
        out / "meta_eval.csv", keep_default_na=False, na_values=[""]
    ).equals(cli)


def test_cli_table_shows_an_interval_it_could_not_compute(tmp_path, capsys):
    """--bootstrap 0 has no interval: the table says [nan, nan] (rich would take it for markup and drop it)."""
    from eval.cli import main

    argv = ["correlate", "--benchmarks", "flickr8k-expert", "--data-root", str(DATA), "--metrics", "rouge",
            "--bootstrap", "0", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count(" [nan, nan] ") == 2  # tau_b and tau_c
    md = (tmp_path / "run" / "meta_eval.md").read_text()
    assert "[" not in md.split("| flickr8k-expert |", 1)[1]  # the table's cells: a value, no empty interval


def test_cli_usage_errors(tmp_path, capsys):
    from eval.cli import main

    base = ["correlate", "--metrics", "bleu4", "--out", str(tmp_path / "o")]
    assert main([*base, "--benchmarks", "thumb"]) != 0
    assert "--data-root" in capsys.readouterr().err
    assert main([*base, "--benchmarks", "all", "--data-root", str(tmp_path / "typo")]) == 2  # not nine skips
    assert f"'{tmp_path / 'typo'}' does not exist" in capsys.readouterr().err
    assert main([*base, "--benchmarks", "thumb", "--data-root", str(tmp_path), "--format", "thumb"]) != 0
    assert "drop --preferences" in capsys.readouterr().err
    assert main([*base, "--benchmarks", "thumb", "--data-root", str(tmp_path)]) != 0
    assert "no benchmark could be run: thumb:" in capsys.readouterr().err
    assert (
        main([*base, "--benchmarks", "thumb", "--data-root", str(tmp_path), "--variant", "foil=1-ref"]) != 0
    )
    assert "foil is not among --benchmarks" in capsys.readouterr().err
    assert (
        main([*base, "--benchmarks", "foil", "--data-root", str(tmp_path), "--variant", "foil=2-refs"]) != 0
    )
    assert "unknown foil variant '2-refs'" in capsys.readouterr().err


def test_each_distinct_text_is_tokenised_once_across_benchmarks_and_metrics(tmp_path, monkeypatch):
    import eval.metrics.ptb as ptb
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval

    seen: list[str] = []
    real = ptb.ptb_tokenize

    def counting(texts):
        seen.extend(texts)
        return real(texts)

    monkeypatch.setattr(ptb, "ptb_tokenize", counting)
    job = MetaEvalJob(
        ["flickr8k-expert", "flickr8k-cf"], DATA, "bleu4,rouge,cider", tmp_path / "run", n_boot=0
    )
    result = run_meta_eval(job)
    assert len(result.table) == 2 * 3 * 2  # benchmarks x metrics x (tau_b, tau_c)
    tables = [load(b, DATA).table for b in ("flickr8k-expert", "flickr8k-cf")]
    distinct = {
        t for tab in tables for t in [*tab["candidate"], *(r for refs in tab["references"] for r in refs)]
    }
    rows = sum(len(tab) for tab in tables)
    assert len(seen) == len(set(seen)) == len(distinct) < rows  # once each, fewer than the rows scored


def test_verify_table_in_the_papers_layout():
    from eval.meta_eval.suite import attach_published, paper_layout

    rows = [
        {"benchmark": "flickr8k-expert", "variant": "default", "category": "", "metric": m, "statistic": s,
         "value": v, "ci_low": v - 1, "ci_high": v + 1, "n": 10, "note": ""}
        for m, s, v in (("bleu4", "tau_c", 30.78), ("bleu4", "tau_b", 30.1), ("bleu1", "tau_c", 32.3),
                        ("bleu1", "tau_b", 32.1))
    ]  # fmt: skip
    df = pd.DataFrame(attach_published(rows))
    grid = paper_layout(df)
    assert list(grid.columns) == ["flickr8k-expert tau-c", "flickr8k-expert tau-b"]  # bleu1 tau-b: no column
    assert grid.loc["bleu4"].tolist() == ["30.78 ✓ (30.8)", "30.10 ✗ (30.6)"]
    assert grid.loc["bleu1", "flickr8k-expert tau-c"] == "32.30 —"


def test_image_metrics_read_the_hub_sets_own_images_each_decoded_once(tmp_path, monkeypatch):
    """A hub parquet set needs no image folder: CLIP-S scores its Image feature; rows of one image share it."""
    import recon_score.images as images_mod
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval

    _polaris(tmp_path / "polaris")
    loads: list = []
    real = images_mod.load_image

    def counting(source, **kw):
        loads.append(source)
        return real(source, **kw)

    monkeypatch.setattr(images_mod, "load_image", counting)
    job = MetaEvalJob(["polaris"], tmp_path, "clipscore", tmp_path / "run", preset="smoke",
                      encoder="smoke:open-clip", n_boot=0)  # fmt: skip
    result = run_meta_eval(job)
    assert result.table["n"].tolist() == [4, 4]  # every row scored: its image was read from the parquet shard
    assert len(loads) == 2  # 4 rows, 2 distinct images: each read once


def test_evaluate_metric_gives_a_callable_the_hub_sets_own_images(tmp_path):
    """The Python API scores with the images the command uses: each row's own pixels from the parquet shard."""
    from eval import evaluate_metric

    _polaris(tmp_path / "polaris")
    seen: list = []

    def red(*, candidates, references, images):  # the image's red value: 0 or 1, as _png wrote it
        seen.extend(images)
        return [im.convert("RGB").getpixel((0, 0))[0] for im in images]

    table = evaluate_metric("polaris", red, data_root=tmp_path, n_boot=0)
    assert len(seen) == 4 and all(im is not None for im in seen)  # 4 distinct (caption, image) inputs
    judged = [0.25, 0.5, 1.0, 0.75]  # rows 0-1 show image 0 (red 0), rows 2-3 image 1 (red 1)
    tau_b = table.set_index("statistic").loc["tau_b", "value"]
    assert tau_b == pytest.approx(100 * kendalltau([0, 0, 1, 1], judged, variant="b").statistic)


def _polaris_and_nebula(root) -> None:
    """Polaris (images _png(0), _png(1); texts about a dog) and a Nebula sharing _png(1) and two texts with it."""
    from datasets import Image, Sequence, Value

    _polaris(root / "polaris")
    nebula = {"file_name": Value("string"), "image": Image(), "refs": Sequence(Value("string")),
              "mt": Value("string"), "human_score": Value("float32")}  # fmt: skip
    _hub(root / "nebula", "test", {
        "file_name": ["b.png", "c.png", "c.png"],
        "image": [{"bytes": _png(1), "path": None}, {"bytes": _png(7), "path": None}, {"bytes": _png(7), "path": None}],
        "refs": [["a dog runs"], ["a red square"], ["a red square"]],
        "mt": ["a dog", "a square", "a dog runs on grass"],
        "human_score": [0.2, 0.8, 0.5],
    }, nebula)  # fmt: skip


def test_each_distinct_image_and_text_is_encoded_once_per_encoder_across_benchmarks(tmp_path, monkeypatch):
    """Polaris and Nebula fixtures sharing an image and two texts, scored by CLIP-S, RefCLIP-S, PAC-S and
    RefPAC-S: every distinct image and every distinct (prefixed) text reaches each encoder exactly once."""
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval
    from recon_score.encoders.base import Encoder

    _polaris_and_nebula(tmp_path)
    calls: dict[str, dict[str, list]] = {}
    real_texts, real_images = Encoder.encode_texts, Encoder.encode_images

    def texts(self, items, **kw):
        calls.setdefault(self.info.spec, {"texts": [], "images": []})["texts"].extend(items)
        return real_texts(self, items, **kw)

    def images(self, items, **kw):
        calls.setdefault(self.info.spec, {"texts": [], "images": []})["images"].extend(items)
        return real_images(self, items, **kw)

    monkeypatch.setattr(Encoder, "encode_texts", texts)
    monkeypatch.setattr(Encoder, "encode_images", images)
    job = MetaEvalJob(["polaris", "nebula"], tmp_path, "clipscore,refclipscore,pacscore,refpacscore", tmp_path / "run",
                      preset="smoke", encoder="smoke:open-clip", n_boot=0)  # fmt: skip
    result = run_meta_eval(job)
    assert set(result.table["n"]) == {3, 4}  # every row of both benchmarks scored
    words = {"a dog", "a cat", "a dog runs on grass", "two dogs", "a dog runs", "a dog on grass", "a square",
             "a red square"}  # fmt: skip
    assert len(calls) == 2  # CLIP-S's encoder, and PAC-S's released one
    for spec, seen in calls.items():
        assert sorted(seen["texts"]) == sorted(f"A photo depicts {w}" for w in words), spec
        pixels = [tuple(i.convert("RGB").getpixel((0, 0))) for i in seen["images"]]
        assert sorted(pixels) == [(0, 0, 0), (1, 0, 0), (7, 0, 0)], spec  # 7 rows, 3 distinct images


def test_each_encoder_and_metric_model_is_built_once_per_run(tmp_path, monkeypatch):
    """Two benchmarks x {CLIP-S, RefCLIP-S, CycleReward}: the encoder registry builds the one encoder CLIP-S and
    RefCLIP-S share once, each metric (and so CycleReward's model) is built once, and each is closed after its
    last item, before the next metric runs; the table still lists benchmark by benchmark."""
    import functools

    import recon_score.encoders as encoders
    import recon_score.encoders.open_clip as open_clip_family
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval
    from eval.metrics.base import Metric
    from eval.metrics.clip import CLIPScore, RefCLIPScore, _ClipMetric
    from eval.metrics.cyclereward import CycleReward

    _polaris_and_nebula(tmp_path)
    monkeypatch.setattr(encoders, "_CACHE", {})  # a fresh process's registry: nothing built yet
    events: list[str] = []

    def spy(cls, name: str, what: str):
        real = getattr(cls, name)

        @functools.wraps(real)  # the constructor's signature is what build_metric checks options against
        def counted(self, *args, **kw):
            events.append(f"{what} {type(self).__name__}")
            return real(self, *args, **kw)

        monkeypatch.setattr(cls, name, counted)

    real_load = open_clip_family.load

    def load(model, **kw):
        events.append(f"encoder {model.name}")
        return real_load(model, **kw)

    monkeypatch.setattr(open_clip_family, "load", load)
    spy(_ClipMetric, "__init__", "build")
    spy(CycleReward, "__init__", "build")
    spy(CycleReward, "_load", "model")
    spy(Metric, "close", "close")
    for cls in (CLIPScore, RefCLIPScore, CycleReward):
        spy(cls, "score", "score")
    job = MetaEvalJob(["polaris", "nebula"], tmp_path, "clipscore,refclipscore,cyclereward", tmp_path / "run",
                      preset="smoke", encoder="smoke:open-clip", n_boot=0)  # fmt: skip
    result = run_meta_eval(job)
    one_per_benchmark = [  # each score call is one benchmark's batch; nothing is built a second time
        (
            "build CLIPScore",
            "score CLIPScore",
            "encoder smoke:open-clip",
            "score CLIPScore",
            "close CLIPScore",
        ),
        ("build RefCLIPScore", "score RefCLIPScore", "score RefCLIPScore", "close RefCLIPScore"),
        (
            "build CycleReward",
            "score CycleReward",
            "model CycleReward",
            "score CycleReward",
            "close CycleReward",
        ),
    ]
    assert events == [e for metric in one_per_benchmark for e in metric]
    order = list(dict.fromkeys(zip(result.table["benchmark"], result.table["metric"])))
    assert order == [
        (b, m) for b in ("polaris", "nebula") for m in ("clipscore", "refclipscore", "cyclereward")
    ]
