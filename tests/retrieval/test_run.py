"""`reconscore retrieve` end to end on synthetic benchmarks with the smoke open_clip encoder (random weights:
the numbers are meaningless; what is checked is that every training-free method runs, the outputs are complete
and consistent, and resuming, refusing and bundling work)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from retrieval.data import EvalData
from retrieval.report import run_notes
from retrieval.run import RetrieveConfig, run_retrieve
from tests.retrieval import layouts

ENCODER = "smoke:open-clip"


@pytest.fixture(scope="module")
def word_lists(tmp_path_factory):
    d = tmp_path_factory.mktemp("words")
    (d / "vocab.csv").write_text(
        "label,class\n/m/1,Airplane\n/m/2,Building\n/m/3,Tree\n/m/4,Water\n/m/5,Road\n/m/6,Car\n"
    )
    (d / "subjects.csv").write_text(
        "object_name\n" + "\n".join(["house", "bridge", "ship", "tower", "field", "river"]) + "\n"
    )
    (d / "styles.csv").write_text(
        "\n".join(["watercolor painting", "pencil sketch", "at night", "aerial view"]) + "\n"
    )
    return d


@pytest.fixture(scope="module")
def xview2_run(tmp_path_factory, word_lists):
    root = layouts.xview2(tmp_path_factory.mktemp("xview2"))
    out = tmp_path_factory.mktemp("run") / "xview2"
    argv = [
        "retrieve", "--benchmark", "xview2-cir", "--root", str(root), "--encoder", ENCODER, "--out", str(out),
        "--methods", "text,image,sum,product,weicom,basic,freedom,cirevl,compodiff,magiclens",
        "--vocabulary", str(word_lists / "vocab.csv"),
        "--corpus-pos", str(word_lists / "subjects.csv"), "--corpus-neg", str(word_lists / "styles.csv"),
        "--set", "freedom.k=3", "--set", "basic.qe_k=3", "--save-bundle", "--device", "cpu",
    ]  # fmt: skip
    code = main(argv)
    return root, out, argv, code


def test_retrieve_writes_every_output(xview2_run):
    _, out, _, code = xview2_run
    assert code == 3  # cirevl had no captioner/rewriter: reported, not faked
    record = json.loads((out / "run.json").read_text())
    status = {m: r["status"] for m, r in record["methods"].items()}
    assert status == {
        **{m: "ok" for m in ("text", "image", "sum", "product", "weicom", "basic", "freedom")},
        **{m: "unavailable" for m in ("cirevl", "compodiff", "magiclens")},
    }
    assert "a captioner" in record["methods"]["cirevl"]["reason"]
    assert "navervision/CompoDiff-Aesthetic" in record["methods"]["compodiff"]["reason"]
    assert "--checkpoint magiclens=PATH" in record["methods"]["magiclens"]["reason"]
    assert record["encoder"]["spec"] == ENCODER and record["provenance"]["versions"]["torch"]
    assert record["metrics"]["ap"] == "non-interpolated" and record["benchmark"]["queries"] == 6
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert len(per_query) == 7 * 6 and set(per_query["group"]) == {"hurricane", "wildfire", "flood"}
    assert per_query["ap"].between(0, 1).all() and (per_query["n_positives"] == 1).all()
    words = {"Airplane", "Building", "Tree", "Water", "Road", "Car"}
    freedom = per_query[per_query["method"] == "freedom"]
    assert all(d.split(" (")[0] in words for d in freedom["detail"])
    table = (out / "table.md").read_text()
    assert "| Method | hurricane | wildfire | flood | Avg. | Total |" in table and "| weicom |" in table
    csv_table = pd.read_csv(out / "table_ap.csv", index_col="Method")
    summary = record["methods"]["weicom"]["summary"]["ap"]
    assert csv_table.loc["weicom", "Total"] == pytest.approx(round(100 * summary["overall"], 2))
    assert csv_table.loc["weicom", "Avg."] == pytest.approx(round(100 * summary["macro"], 2))
    assert any("min-normalisation" in n for n in record["methods"]["basic"]["notes"])
    # the smoke CLIP has no bundled LAION-1M mean: the database-mean fallback is recorded
    assert any("image mean = the database mean" in n for n in record["methods"]["basic"]["notes"])
    assert record["vocabulary"]["entries"] == 6 and len(record["vocabulary"]["sha256"]) == 64


def test_bundle_reproduces_the_run(xview2_run, capsys):
    _, out, _, _ = xview2_run
    capsys.readouterr()
    assert main(["retrieve-eval", "--bundle", str(out / "bundle.npz"), "--method", "weicom", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    summary = json.loads((out / "run.json").read_text())["methods"]["weicom"]["summary"]["ap"]
    assert got["map_overall"] == pytest.approx(summary["overall"]) and got["map_macro"] == pytest.approx(
        summary["macro"]
    )


def test_rerun_resumes_and_a_changed_setup_is_refused(xview2_run, capsys):
    _, out, argv, _ = xview2_run
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(argv) == 3  # a finished run's rerun: every method journaled, nothing recomputed or rewritten
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    changed = [*argv, "--option", "phrasing=alt1"]
    assert main(changed) == 1
    err = capsys.readouterr().err
    assert "different configuration" in err and "phrasing" in err and " -> " in err  # names what changed


def test_a_finished_rerun_builds_no_encoder_and_reads_no_feature(xview2_run, monkeypatch, capsys):
    """A finished run's rerun costs what its records cost: its settings come from the memo of the encoder's
    identity (its weights' location unchanged), so neither the encoder nor a cached feature is touched."""
    from recon_score import encoders
    from retrieval.features import FeatureStore

    _, out, argv, code = xview2_run

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run's rerun built a model or read a feature")

    monkeypatch.setattr(encoders, "build_encoder", refuse)
    monkeypatch.setattr(FeatureStore, "_features", refuse)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    capsys.readouterr()
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "loading encoder" not in err and "cirevl: not run, it needs a captioner" in err  # as the run said
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_patterncom_freedom_and_basic_end_to_end(tmp_path, word_lists):
    root = layouts.patterncom(tmp_path / "PatternNet")
    cfg = RetrieveConfig(
        benchmark="patterncom", root=root, encoder=ENCODER, methods=["freedom", "basic", "weicom"], out=tmp_path / "out",
        vocabulary=word_lists / "vocab.csv", corpus_pos=word_lists / "subjects.csv", corpus_neg=word_lists / "styles.csv",
        overrides={"freedom": {"k": "4"}, "basic": {"qe_k": "4"}}, device="cpu",
    )  # fmt: skip
    outcome = run_retrieve(cfg, progress=False)
    assert outcome.exit_code == 0
    summary = outcome.record["methods"]["freedom"]["summary"]["ap"]
    assert list(summary["per_group"]) == ["color", "context", "density", "existence", "quantity", "shape"]
    assert summary["macro"] == pytest.approx(sum(summary["per_group"].values()) / 6)
    assert outcome.record["methods"]["basic"]["config"]["harris_lambda"] == 0.1


def test_icir_basic_per_instance_trapezoidal(tmp_path, word_lists):
    root = layouts.icir(tmp_path / "icir")
    cfg = RetrieveConfig(
        benchmark="icir", root=root, encoder=ENCODER, methods=["basic", "product"], out=tmp_path / "out",
        corpus_pos=word_lists / "subjects.csv", corpus_neg=word_lists / "styles.csv",
        overrides={"basic": {"qe_k": "2", "context_words": "3"}}, device="cpu",
    )  # fmt: skip
    outcome = run_retrieve(cfg, progress=False)
    assert outcome.exit_code == 0 and outcome.record["metrics"]["ap"] == "trapezoidal-eps"
    basic = outcome.record["methods"]["basic"]["summary"]["ap"]
    assert set(basic["per_group"]) == {"temple", "plushie"}
    assert basic["min_macro"] <= basic["macro"]
    # i-CIR's product baseline clamps at 0 (its calculate_rankings); --set still wins over the protocol
    assert outcome.record["methods"]["product"]["config"] == {"rectify": True}


@pytest.mark.parametrize(
    ("benchmark", "builder", "headline"),
    [
        ("edir", layouts.edir, "hit@1"),
        ("circo", layouts.circo, "map@5"),
        ("cirr", layouts.cirr, "hit@1"),
        ("fashioniq", layouts.fashioniq, "hit@10"),
    ],
)
def test_general_benchmarks_run(tmp_path, benchmark, builder, headline):
    root = builder(tmp_path / benchmark)
    cfg = RetrieveConfig(
        benchmark=benchmark, root=root, encoder=ENCODER, methods=["sum"], out=tmp_path / "out", device="cpu"
    )
    outcome = run_retrieve(cfg, progress=False)
    assert outcome.exit_code == 0
    assert headline in outcome.record["methods"]["sum"]["summary"]
    if benchmark == "edir":
        assert (tmp_path / "out" / "table_hit_at_1_by_subgroup.csv").is_file()
    if benchmark == "cirr":  # the reference image is never retrieved
        per_query = pd.read_parquet(tmp_path / "out" / "per_query.parquet")
        assert per_query["n_positives"].tolist() == [1.0, 1.0]


def test_cli_errors_before_any_work(tmp_path, capsys):
    root = layouts.xview2(tmp_path / "x")
    base = [
        "retrieve",
        "--benchmark",
        "xview2-cir",
        "--root",
        str(root),
        "--encoder",
        ENCODER,
        "--out",
        str(tmp_path / "o"),
    ]
    assert main([*base, "--methods", "wiecom"]) == 1
    assert "did you mean 'weicom'" in capsys.readouterr().err
    assert main([*base, "--methods", "text", "--set", "basic.qe_k=3"]) == 1
    assert "not in --methods" in capsys.readouterr().err
    assert main([*base, "--methods", "text", "--encoder", "lpips:alex"]) == 1
    assert "image+text embedding space" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # a failed start leaves no folder, lock or journal (the run engine)


def test_retrieve_folder_kind_and_invocations(xview2_run, capsys):
    """The run engine's folder: run.json names the kind and the invocations; another kind is refused."""
    out = xview2_run[1]
    record = json.loads((out / "run.json").read_text())
    assert record["command"] == "retrieve" and record["invocations"][0]["rows_done"] >= 1
    assert main(["score", "--preset", "smoke", "--limit", "1", "--out", str(out)]) == 1
    assert "is a `retrieve` run folder; `score` will not write into it" in capsys.readouterr().err


def test_cirevl_through_the_cli_with_injected_models(tmp_path, monkeypatch, capsys):
    """The CLI's captioner adapter drives a describer backend (a fake here) and CIReVL runs end to end."""
    import eval.cirevl as cirevl_models
    from describer.backends import Candidate

    class FakeCaptioner:
        def generate(self, requests, prompt, sampling):
            assert sampling.n == 1 and sampling.temperature == 0.0 and "one short sentence" in prompt
            return [[Candidate(f"an aerial image {r.key}")] for r in requests]

    import describer.backends

    monkeypatch.setattr(describer.backends, "build_captioner", lambda backend, model, **kw: FakeCaptioner())
    monkeypatch.setattr(
        cirevl_models,
        "build_rewriter",
        lambda name, **kw: lambda caps, texts: [f"{c}, {t}" for c, t in zip(caps, texts)],
    )
    root = layouts.xview2(tmp_path / "x")
    argv = ["retrieve", "--benchmark", "xview2-cir", "--root", str(root), "--encoder", ENCODER, "--methods", "cirevl",
            "--captioner", "transformers:fake", "--rewriter", "fake-llm", "--out", str(tmp_path / "o"), "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    per_query = pd.read_csv(tmp_path / "o" / "per_query.csv")
    assert per_query["detail"].str.contains(r"an aerial image \d+ -> an aerial image \d+, post").all()
    record = json.loads((tmp_path / "o" / "run.json").read_text())
    assert record["config"]["captioner"] == "transformers:fake"


@pytest.mark.parametrize("index", ["exact", "faiss-flat"])
def test_topk_lists_agree_with_the_metrics(tmp_path, index):
    """topk.parquet: best first, the reference image never listed (CIRR excludes it), rank 1 relevant exactly
    when hit@1 says so; a FAISS flat index returns the exact lists for linear methods."""
    root = layouts.cirr(tmp_path / "cirr")
    cfg = RetrieveConfig(
        benchmark="cirr", root=root, encoder=ENCODER, methods=["sum", "product"], out=tmp_path / index,
        topk=3, index=index, device="cpu",
    )  # fmt: skip
    outcome = run_retrieve(cfg, progress=False)
    assert outcome.exit_code == 0 and "topk.parquet" in outcome.record["outputs"]
    top = pd.read_parquet(tmp_path / index / "topk.parquet")
    per_query = pd.read_parquet(tmp_path / index / "per_query.parquet")
    assert set(top["method"]) == {"sum", "product"}
    for (method, q), rows in top.groupby(["method", "query_index"]):
        assert rows["rank"].tolist() == list(range(1, len(rows) + 1))
        assert rows["score"].is_monotonic_decreasing
        reference = per_query.loc[
            (per_query["method"] == method) & (per_query["query_index"] == q), "reference"
        ]
        assert reference.iloc[0] not in rows["item"].tolist()
        hit = per_query.loc[(per_query["method"] == method) & (per_query["query_index"] == q), "hit@1"].iloc[
            0
        ]
        assert bool(rows["relevant"].iloc[0]) == bool(hit)
    notes = outcome.record["methods"]["product"]["notes"]
    assert any("not linear" in n for n in notes) == (index != "exact")
    if index != "exact":
        exact = RetrieveConfig(**{**cfg.__dict__, "index": "exact", "out": tmp_path / "exact-check"})
        run_retrieve(exact, progress=False)
        want = pd.read_parquet(tmp_path / "exact-check" / "topk.parquet")
        pd.testing.assert_frame_equal(
            top[["method", "query_index", "rank", "item"]], want[["method", "query_index", "rank", "item"]]
        )
        np.testing.assert_allclose(top["score"], want["score"], atol=1e-5)


def test_icir_retrieve_and_retrieve_eval_agree_on_the_same_features(tmp_path, capsys):
    """The bundle carries i-CIR's protocol (trapezoidal-eps AP, rectified product): retrieve-eval on it gives
    retrieve's numbers, and every table title names the AP variant and the averaging."""
    root, out = layouts.icir(tmp_path / "icir"), tmp_path / "out"
    argv = ["retrieve", "--benchmark", "icir", "--root", str(root), "--encoder", ENCODER, "--out", str(out),
            "--methods", "product,sum", "--save-bundle", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    table = (out / "table.md").read_text()
    assert "mAP, AP trapezoidal, recall step 1/(n+1e-5) (i-CIR) (%) by group" in table
    assert "Avg. = mean over groups; Total = mean over queries" in table
    capsys.readouterr()
    for method in ("product", "sum"):
        assert main(["retrieve-eval", "--bundle", str(out / "bundle.npz"), "--method", method, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        summary = record["methods"][method]["summary"]["ap"]
        assert got["ap"] == "trapezoidal-eps" and got["config"] == record["methods"][method]["config"]
        assert got["map_overall"] == pytest.approx(summary["overall"], abs=1e-12)
        assert got["map_macro"] == pytest.approx(summary["macro"], abs=1e-12)
    assert record["methods"]["product"]["config"] == {"rectify": True}


def test_per_group_csv_follows_group_mean(tmp_path):
    """With group_mean="subgroups", per_group.csv's group rows equal table_ap.csv's columns."""
    root = layouts.patterncom(tmp_path / "PatternNet")
    cfg = RetrieveConfig(
        benchmark="patterncom", root=root, encoder=ENCODER, methods=["sum", "text"], out=tmp_path / "out",
        group_mean="subgroups", device="cpu",
    )  # fmt: skip
    assert run_retrieve(cfg, progress=False).exit_code == 0
    table = pd.read_csv(tmp_path / "out" / "table_ap.csv", index_col="Method")
    long = pd.read_csv(tmp_path / "out" / "per_group.csv")
    rows = long[(long["level"] == "group") & (long["metric"] == "ap")]
    for _, row in rows.iterrows():
        assert table.loc[row["method"], row["name"]] == pytest.approx(round(100 * row["value"], 2))
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "group = mean over its subgroups' means" in (tmp_path / "out" / "table.md").read_text()
    assert "tie_range" in record["methods"]["sum"]


def test_retrieve_prints_the_benchmark_notes_and_queries_without_positives(tmp_path, capsys):
    root = layouts.edir(tmp_path / "edir")
    out = tmp_path / "out"
    argv = ["retrieve", "--benchmark", "edir", "--root", str(root), "--encoder", ENCODER, "--out", str(out),
            "--methods", "image", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "note: 3 of 3 reference images are in the gallery: ranked as negatives" in err
    # a query without any positive is counted before any method runs
    data = EvalData(
        query_image=torch.eye(2), query_text=torch.eye(2), database=torch.eye(2),
        positives=torch.tensor([[0, 1]]), query_group=["a", "a"],
    )  # fmt: skip
    assert run_notes(["x"], data) == [
        "note: x",
        "note: 1 of 2 queries have no positive (their metrics are undefined; --empty-positives decides what "
        "they add)",
    ]


def test_retrieve_and_retrieve_eval_agree_when_the_database_holds_copies(tmp_path, capsys):
    """Byte-identical database images (each EDIR negative a copy of its target) have one feature row: in both
    commands they tie exactly and the tie rule (database index) orders them, never the last bit of a product.
    A run hands its numpy methods numpy arrays, as a bundle does, so the numbers are the same."""
    root, out = layouts.edir(tmp_path / "edir"), tmp_path / "out"
    for i in range(3):
        (root / "images" / f"neg_{i}.png").write_bytes((root / "images" / f"tgt_{i}.png").read_bytes())
    methods = ["product", "sum", "weicom", "text", "image"]
    argv = ["retrieve", "--benchmark", "edir", "--root", str(root), "--encoder", ENCODER, "--out", str(out),
            "--methods", ",".join(methods), "--save-bundle", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    per_query = pd.read_csv(out / "per_query.csv")
    capsys.readouterr()
    for method in methods:
        assert main(["retrieve-eval", "--bundle", str(out / "bundle.npz"), "--method", method, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        rows = per_query[per_query["method"] == method]
        assert got["map_overall"] == pytest.approx(rows["ap"].mean(), abs=1e-12), method
        assert got["tie_range"] == record["methods"][method]["tie_range"], method
        assert got["tie_range"]["tied_positives"] == rows["tied_positives"].sum() > 0  # the copies tie
