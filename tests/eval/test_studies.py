"""Each study on the smoke preset with tiny inputs: the table's shape, and values that agree with the runs."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eval.cli import main


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """One describe run with a pool of 10 candidates for 3 images (with the sample's references)."""
    out = tmp_path_factory.mktemp("pool") / "d"
    assert (
        main(
            [
                "describe",
                "--preset",
                "smoke",
                "--n",
                "10",
                "--limit",
                "3",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--t2i-batch-size",
                "10",
                "--eval-candidates",
                "all",
            ]
        )
        == 0
    )
    return out


def test_n_sweep_reuses_one_pool(pool, tmp_path):
    out = tmp_path / "n"
    assert (
        main(["study", "n-sweep", "--run", f"ucm={pool}", "--run", f"again={pool}", "--out", str(out)]) == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)  # held-out
    ins = pd.read_csv(out / "in_sample.csv", index_col=0)
    assert list(df.index) == [1, 2, 4, 6, 8, 10] and list(df.columns) == ["ucm", "again", "Total"]
    cands = _jsonl(pool / "candidates.jsonl")
    for n in (1, 4, 10):
        picks = []
        for i in ("UCM_1", "UCM_2", "UCM_3"):
            mine = [c for c in cands if c["image_id"] == i and c["index"] < n]
            picks.append(max(mine, key=lambda c: (c["selection_score"], -c["index"])))
        assert ins.loc[n, "ucm"] == pytest.approx(np.mean([p["selection_score"] for p in picks]))
        assert df.loc[n, "ucm"] == pytest.approx(np.mean([p["recon_score"] for p in picks]))
    assert (ins["ucm"].diff().dropna() >= -1e-9).all()  # more candidates never lower the in-sample max
    caps = _jsonl(pool / "captions.jsonl")
    assert df.loc[10, "ucm"] == pytest.approx(np.mean([c["recon_score"] for c in caps]))
    assert ins.loc[10, "ucm"] == pytest.approx(np.mean([c["selection_score"] for c in caps]))
    run = json.loads((out / "run.json").read_text())
    assert run["study"] == "n-sweep" and run["curve"]["x"] == [1, 2, 4, 6, 8, 10]
    assert main(["study", "n-sweep", "--run", f"x={pool}", "--ns", "1,20", "--out", str(tmp_path / "m")]) == 1


def test_selection_study(pool, tmp_path):
    human = tmp_path / "human.jsonl"
    caps = _jsonl(pool / "captions.jsonl")
    human.write_text(
        "".join(json.dumps({"image_id": c["image_id"], "index": c["index"]}) + "\n" for c in caps)
    )
    out = tmp_path / "sel"
    assert (
        main(
            [
                "study",
                "selection",
                "--run",
                str(pool),
                "--selectors",
                "recon_score,bleu4",
                "--metrics",
                "recon_score,bleu1",
                "--preset",
                "smoke",
                "--human",
                str(human),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)
    assert list(df.index) == ["ReconScore", "BLEU-4"]
    # ReconScore picks what describe picked (by its selection render) and is rated by the held-out render
    assert df.loc["ReconScore", "ReconScore"] == pytest.approx(np.mean([c["recon_score"] for c in caps]))
    assert json.loads((out / "run.json").read_text())["details"]["selected_by_the_run"] == "recon_score"
    assert df.loc["ReconScore", "Preference rate (%)"] == 100.0  # humans chose what ReconScore chose
    # BLEU over the picks is corpus-level, as pycocoevalcap reports it (and as `evaluate` summarises)
    from pycocoevalcap.bleu.bleu import Bleu

    from eval.metrics.ptb import ptb_tokenize

    hyps = ptb_tokenize([c["caption"] for c in caps])
    refs = [ptb_tokenize(c["references"]) for c in caps]
    corpus, _ = Bleu(4).compute_score(
        {i: r for i, r in enumerate(refs)}, {i: [h] for i, h in enumerate(hyps)}, verbose=0
    )
    assert df.loc["ReconScore", "BLEU-1"] == pytest.approx(100 * corpus[0])
    assert json.loads((out / "run.json").read_text())["details"]["corpus_level"] == ["bleu1"]


def test_encoders_study(tmp_path, sample_dir):
    caps = tmp_path / "c.jsonl"
    runs = []
    for sys_name, text in (
        ("terse", "farm"),
        ("rich", "a wide farmland with rows of green crops and a road"),
    ):
        caps.write_text(
            "".join(json.dumps({"image": f"images/UCM_{i}.tif", "caption": text}) + "\n" for i in (1, 2, 3))
        )
        out = tmp_path / sys_name
        assert (
            main(
                [
                    "score",
                    "--preset",
                    "smoke",
                    "--captions",
                    str(caps),
                    "--images",
                    str(sample_dir),
                    "--out",
                    str(out),
                    "--device",
                    "cpu",
                ]
            )
            == 0
        )
        runs += ["--run", f"{sys_name}={out}"]
    out = tmp_path / "enc"
    assert (
        main(["study", "encoders", *runs, "--encoders", "smoke:dreamsim,lpips:alex", "--out", str(out)]) == 0
    )
    table = pd.read_csv(out / "table.csv", index_col=0)
    tau = pd.read_csv(out / "rank_consistency.csv", index_col=0)
    assert table.shape == (2, 2) and tau.shape == (2, 2)
    for sys_name in ("terse", "rich"):  # the run's own encoder reproduces the run's scores
        mean = np.mean([r["recon_score"] for r in _jsonl(tmp_path / sys_name / "scores.jsonl")])
        assert table.loc[sys_name, "smoke:dreamsim"] == pytest.approx(mean, abs=1e-4)
    assert np.allclose(np.diag(tau.to_numpy()), 1.0) and abs(tau.iloc[0, 1]) == pytest.approx(1.0)


def test_t2i_study(tmp_path, sample_dir):
    caps = tmp_path / "c.jsonl"
    caps.write_text(
        "".join(
            json.dumps({"image": f"images/UCM_{i}.tif", "caption": f"farmland {i}"}) + "\n" for i in (1, 2)
        )
    )
    out = tmp_path / "t2i"
    assert (
        main(
            [
                "study",
                "t2i",
                "--captions",
                str(caps),
                "--images",
                str(sample_dir),
                "--presets",
                "smoke",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)
    row = df.loc["smoke (smoke:z-image)"]
    assert row["M. T."] == 512 and row["truncated"] == 0
    # the table's ReconScore is the mean over the captions of a plain ReconScorer run of the same preset
    from recon_score.cache import ArtifactCache
    from recon_score.scorer import ReconScorer

    direct = ReconScorer.from_preset("smoke", device="cpu", batch_size=1, cache=ArtifactCache(enabled=False))
    res = direct.score([sample_dir / "images" / f"UCM_{i}.tif" for i in (1, 2)], ["farmland 1", "farmland 2"])
    assert row["ReconScore"] == pytest.approx(sum(r.recon_score for r in res) / 2, abs=1e-9)
    assert "meaningless" in json.loads((out / "run.json").read_text())["note"]


def test_models_study(tmp_path, sample_dir):
    root = tmp_path / "ucm"
    (root / "images").mkdir(parents=True)
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
    (root / "test_caps.txt").write_text(
        "".join(f"a piece of farmland {k} .\n" for _ in (1, 2) for k in range(5))
    )
    (root / "test_filename.txt").write_text("".join(f"{i}.tif\n" for i in (1, 2) for _ in range(5)))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        '{"image_id": "1.tif", "caption": "a piece of farmland 0 ."}\n{"image_id": "2", "caption": "x"}\n'
    )
    b.write_text(
        '{"image": "1.tif", "caption": "roads"}\n{"image": "2.tif", "caption": "a piece of farmland 3 ."}\n'
    )
    out = tmp_path / "m"
    assert (
        main(
            [
                "study",
                "models",
                "--dataset",
                f"ucm=ucm-precomp:{root}",
                "--captions",
                f"A@ucm={a}",
                "--captions",
                f"B@ucm={b}",
                "--metrics",
                "recon_score,bleu1",
                "--preset",
                "smoke",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)
    assert list(df.index) == ["A", "B"] and list(df.columns) == ["ucm"]
    ev = tmp_path / "ev"
    main(
        [
            "evaluate",
            "--dataset",
            "ucm-precomp",
            "--root",
            str(root),
            "--captions",
            str(a),
            "--metrics",
            "recon_score,bleu1",
            "--preset",
            "smoke",
            "--out",
            str(ev),
        ]
    )
    summary = pd.read_csv(ev / "summary.csv", index_col=0)
    assert df.loc["A", "ucm"] == pytest.approx(summary["ReconScore"].iloc[0])
    wide = pd.read_csv(out / "all_metrics.csv", index_col=0)
    assert wide.loc["A", "ucm BLEU-1"] == pytest.approx(summary["BLEU-1"].iloc[0])


def _gen(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_paraphrase_study(tmp_path, sample_dir):
    src = "There is a piece of farmland ."
    para = _gen(
        tmp_path / "p.jsonl",
        [
            {
                "id": "a",
                "image": "images/UCM_1.tif",
                "source_caption": src,
                "kind": "paraphrase",
                "caption": "A field of crops is shown .",
                "error": None,
            }
        ],
    )
    pert = _gen(
        tmp_path / "q.jsonl",
        [
            {
                "id": "b",
                "image": "images/UCM_1.tif",
                "source_caption": src,
                "kind": "perturbed",
                "perturbation": "object",
                "caption": "There is a piece of forest .",
                "error": None,
            }
        ],
    )
    out = tmp_path / "t4"
    assert (
        main(
            [
                "study",
                "paraphrase",
                "--paraphrased",
                str(para),
                "--perturbed",
                str(pert),
                "--images",
                str(sample_dir),
                "--metrics",
                "bleu1,rouge,recon_score",
                "--preset",
                "smoke",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)
    assert list(df.columns) == ["Paraphrased", "Perturbed GT", "±Δ"] and list(df.index) == [
        "BLEU-1",
        "ROUGE",
        "ReconScore",
    ]
    assert np.allclose(df["±Δ"], df["Paraphrased"] - df["Perturbed GT"])
    assert df.loc["BLEU-1", "±Δ"] < 0  # n-gram overlap rewards the perturbed copy of the reference


def test_length_study(tmp_path, sample_dir):
    refs = ["There is a piece of farmland .", "It is a piece of cropland ."]
    rows = [
        {
            "id": f"x:{k}",
            "image": "images/UCM_1.tif",
            "source_caption": " ".join(refs),
            "kind": k,
            "references": refs,
            "caption": text,
            "error": None,
        }
        for k, text in (
            ("short", "There is a piece of farmland ."),
            ("medium", "There is a piece of farmland with crops planted in straight rows ."),
            ("long", "There is a large piece of farmland " + "with long straight rows " * 10 + "."),
        )
    ]
    out = tmp_path / "t5"
    assert (
        main(
            [
                "study",
                "length",
                "--generated",
                str(_gen(tmp_path / "g.jsonl", rows)),
                "--images",
                str(sample_dir),
                "--metrics",
                "bleu1,recon_score",
                "--preset",
                "smoke",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "table.csv", index_col=0)
    assert list(df.columns) == ["Max Tokens", "S.", "M.", "L.", "σ"]
    b = df.loc["BLEU-1"]
    assert b["S."] > b["M."] > b["L."]  # reference overlap collapses with length
    assert b["σ"] == pytest.approx(np.std([b["S."], b["M."], b["L."]], ddof=1))
    assert str(df.loc["ReconScore", "Max Tokens"]) == "512" and df.loc["(average words)", "S."] == 7
