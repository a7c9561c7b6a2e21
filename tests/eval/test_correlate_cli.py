"""`reconscore correlate` and `reconscore metrics` end to end, in-process: the ranking example with the smoke
preset's reference-free metrics, the Flickr8K excerpts with the text metrics (checked against pycocoevalcap +
scipy directly), and the errors a user can make."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from eval.cli import main
from eval.metrics.meteor import Meteor
from preference_data import load_flickr8k_expert
from recon_score.presets import SMOKE_NOTE
from tests.eval.metric_helpers import DATA, REPO, shared_meteor
from tests.eval.test_metrics_registry import EXPECTED
from tests.smoke_cli import correlate_ranking

EXAMPLE = REPO / "preference_data" / "examples" / "ranking_example.jsonl"
F8K = DATA / "flickr8k"


@pytest.fixture
def share_meteor(monkeypatch):
    """correlate builds its own metrics; hand it the session's METEOR instead of starting another JVM."""
    import eval.correlate as correlate_mod

    real = correlate_mod.compute_metrics

    def with_shared(names, batch, *, options=None, metrics=None):
        return real(names, batch, options=options, metrics={"meteor": Meteor(process=shared_meteor())})

    monkeypatch.setattr(correlate_mod, "compute_metrics", with_shared)


def test_ranking_example_end_to_end_with_reference_free_smoke_metrics(tmp_path, capsys):
    out = tmp_path / "rank"
    assert main(correlate_ranking(EXAMPLE, "clipscore,recon_score", out, "--bootstrap", "50")) == 0
    printed = capsys.readouterr()
    assert "clipscore" in printed.out and "recon_score" in printed.out and "tau-b *" in printed.out
    assert f"{SMOKE_NOTE}." in printed.err.splitlines()  # the one banner, on a line of its own
    corr = pd.read_csv(out / "correlations.csv")
    assert list(corr.columns) == [
        "metric",
        "tau_b",
        "tau_b_low",
        "tau_b_high",
        "tau_c",
        "tau_c_low",
        "tau_c_high",
        "pairwise_acc",
        "pairwise_acc_low",
        "pairwise_acc_high",
        "n",
        "note",
    ]
    assert corr["metric"].tolist() == ["clipscore", "recon_score"] and (corr["n"] == 9).all()
    items = pd.read_parquet(out / "per_item.parquet")
    assert len(items) == 9 and items["judgment"].tolist() == [1.0, 2.0, 3.0] * 3
    assert items["recon_score"].between(0, 100).all() and items["clipscore"].between(0, 2.5).all()
    assert items["clipscore_truncated"].eq(False).all() and items["recon_score_cosine"].notna().all()
    assert items["references"].iloc[0][0] == "There is a piece of farmland ."
    run = json.loads((out / "run.json").read_text())
    assert run["protocol"]["headline"] == "tau_b" and run["meaningless"] is True
    assert run["metric_reports"]["clipscore"]["config"]["prefix"] == "A photo depicts"
    assert run["metric_reports"]["clipscore"]["long_text"] == "truncate"
    assert run["metric_reports"]["recon_score"]["config"]["preset"]["name"] == "smoke"
    assert run["job"]["encoder"] == "smoke:open-clip" and "versions" in run["provenance"]


def test_csv_ranking_gives_the_same_correlations_as_jsonl(tmp_path):
    common = ["--format", "ranking", "--metrics", "bleu1,rouge", "--bootstrap", "20"]
    assert main(["correlate", "--preferences", str(EXAMPLE), *common, "--out", str(tmp_path / "a")]) == 0
    csv = EXAMPLE.with_suffix(".csv")
    assert main(["correlate", "--preferences", str(csv), *common, "--out", str(tmp_path / "b")]) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "a" / "correlations.csv"), pd.read_csv(tmp_path / "b" / "correlations.csv")
    )


def test_flickr8k_expert_excerpt_matches_pycocoevalcap_and_scipy(tmp_path, capsys, share_meteor):
    out = tmp_path / "expert"
    metrics = "bleu1,bleu4,rouge,meteor,cider"
    argv = ["correlate", "--preferences", str(F8K / "ExpertAnnotations.txt"), "--format", "flickr8k-expert"]
    assert main([*argv, "--metrics", metrics, "--bootstrap", "30", "--out", str(out)]) == 0
    assert "headline tau-c" in capsys.readouterr().out
    corr = pd.read_csv(out / "correlations.csv").set_index("metric")
    assert (corr["n"] == 42).all()
    # the same protocol written out by hand: Hessel et al.'s compute_metrics.py on these rows
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    df = load_flickr8k_expert(F8K / "ExpertAnnotations.txt")
    tok = PTBTokenizer()
    gts = tok.tokenize({i: [{"caption": r} for r in rs] for i, rs in enumerate(df["references"])})
    res = tok.tokenize({i: [{"caption": c}] for i, c in enumerate(df["candidate"])})
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[1]
    cider = Cider().compute_score(gts, res)[1]
    human = df["judgment"].to_numpy()
    for name, values in (("bleu1", bleu[0]), ("bleu4", bleu[3]), ("cider", cider)):
        for v in "bc":
            expected = 100 * kendalltau(values, human, variant=v).statistic
            assert corr.loc[name, f"tau_{v}"] == pytest.approx(expected, abs=1e-3), (name, v)
    run = json.loads((out / "run.json").read_text())
    assert run["protocol"]["headline"] == "tau_c" and run["counts"] == {"rows": 42, "images": 3}
    assert "skipped 3 candidates" in run["protocol"]["dataset_notes"][0]


def test_flickr8k_crowdflower_excerpt_headline_tau_b(tmp_path, capsys):
    out = tmp_path / "cf"
    argv = [
        "correlate",
        "--preferences",
        str(F8K / "CrowdFlowerAnnotations.txt"),
        "--format",
        "flickr8k-crowdflower",
    ]
    assert main([*argv, "--metrics", "bleu4,cider", "--bootstrap", "30", "--out", str(out)]) == 0
    assert "headline tau-b" in capsys.readouterr().out
    items = pd.read_parquet(out / "per_item.parquet")
    assert len(items) == 30 and items["references"].map(len).tolist().count(4) == 20


def test_thumb_excerpt(tmp_path):
    argv = ["correlate", "--preferences", str(DATA / "thumb" / "mscoco_THumB-1.0.jsonl"), "--format", "thumb"]
    assert main([*argv, "--metrics", "rouge", "--bootstrap", "10", "--out", str(tmp_path / "t")]) == 0
    assert pd.read_csv(tmp_path / "t" / "correlations.csv")["n"].tolist() == [25]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "flickr8k-expert", "--metrics", "clipscore"], "clipscore needs images"),
        (["--format", "flickr8k-expert", "--metrics", "bleu5"], "did you mean 'bleu4'"),
        (["--format", "flickr8k-expert", "--metrics", "spice"], "stanford-corenlp-3.6.0"),
        (["--format", "flickr8k-crowdflower", "--metrics", "bleu1"], "ExpertAnnotations.txt:1: share of yes"),
    ],
)
def test_user_errors_exit_1_with_a_message(tmp_path, capsys, monkeypatch, argv, message):
    if "spice" in argv:
        from eval.metrics import spice

        monkeypatch.setattr(spice, "corenlp_dirs", lambda: [tmp_path])
    out = tmp_path / "out"
    assert (
        main(["correlate", "--preferences", str(F8K / "ExpertAnnotations.txt"), *argv, "--out", str(out)])
        == 1
    )
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_metrics_list(capsys):
    assert main(["metrics", "list"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED:  # every registered metric (tests/eval/test_metrics_registry.py)
        assert name in out
    assert main(["metrics", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["clipscore"]["needs_images"] and not rows["clipscore"]["needs_references"]
    assert rows["cider"]["needs_references"] and rows["cider"]["higher_is_better"]


def test_metrics_add_puts_reference_metrics_next_to_recon_score(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    sample = REPO / "recon_score" / "sample"
    rows = [json.loads(line) for line in (sample / "captions.jsonl").read_text().splitlines()][:4]
    rows = [{**r, "recon_score": 50.0 + i, "cosine": 0.0, "error": None} for i, r in enumerate(rows)]
    rows.append(
        {"id": "bad", "image": "images/missing.tif", "caption": None, "recon_score": None, "error": "x"}
    )
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(
        json.dumps({"command": "score", "images_root": str(sample), "meaningless": False})
    )
    before = (run / "scores.jsonl").read_bytes()
    argv = ["metrics", "add", str(run), "--references", str(sample / "references.json")]
    argv += ["--metrics", "bleu4,cider,clipscore", "--encoder", "smoke:open-clip", "--device", "cpu"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "scores.metrics.jsonl (5 rows)" in printed.out and "meaningless" in printed.err  # smoke:open-clip
    assert (run / "scores.jsonl").read_bytes() == before  # the original is never touched
    out = [json.loads(line) for line in (run / "scores.metrics.jsonl").read_text().splitlines()]
    assert [r["recon_score"] for r in out[:4]] == [50.0, 51.0, 52.0, 53.0]
    # each sample caption is one of its image's references: BLEU-4 = 1
    assert all(r["bleu4"] == pytest.approx(1.0) for r in out[:4]) and out[4]["bleu4"] is None
    assert all(0 <= r["clipscore"] <= 2.5 for r in out[:4]) and out[4]["clipscore"] is None
    meta = json.loads((run / "scores.metrics.json").read_text())
    assert meta["scored_rows"] == {"bleu4": 4, "cider": 4, "clipscore": 4} and "provenance" in meta
    assert np.isfinite(meta["means"]["cider"])


def test_metrics_add_never_overwrites_a_column_of_the_run(tmp_path, capsys):
    (tmp_path / "scores.jsonl").write_text(
        '{"id": "a", "image": "x.png", "caption": "a", "recon_score": 50}\n'
    )
    assert main(["metrics", "add", str(tmp_path), "--metrics", "bleu4,recon_score"]) == 1
    err = capsys.readouterr().err
    assert "already has a recon_score column" in err and not (tmp_path / "scores.metrics.jsonl").exists()


def test_metrics_add_errors(tmp_path, capsys):
    (tmp_path / "scores.jsonl").write_text('{"id": "a", "image": "x.png", "caption": "a farm"}\n')
    assert main(["metrics", "add", str(tmp_path), "--metrics", "bleu4"]) == 1
    assert capsys.readouterr().err == "error: bleu4 needs reference captions: pass --references FILE\n"
    assert main(["metrics", "add", str(tmp_path), "--metrics", "bleu4,cider"]) == 1
    assert capsys.readouterr().err == "error: bleu4, cider need reference captions: pass --references FILE\n"
    (tmp_path / "refs.json").write_text('{"y.png": ["a farm"]}')
    assert (
        main(
            [
                "metrics",
                "add",
                str(tmp_path),
                "--metrics",
                "bleu4",
                "--references",
                str(tmp_path / "refs.json"),
            ]
        )
        == 1
    )
    assert "matched on the `image` value" in capsys.readouterr().err
