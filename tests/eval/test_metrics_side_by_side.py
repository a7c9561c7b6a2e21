"""PAC-S, Long-CLIP-S, CycleReward and FLEUR beside the registry's other metrics: listed with their sources, added
to a run on the CPU by `metrics add` and correlated by `correlate`, all through the one registry (smoke preset:
tiny random models built offline, so the numbers are meaningless and only the plumbing is checked)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from eval.cli import main
from tests.eval.metric_helpers import REPO
from tests.smoke_cli import correlate_ranking

NEW = ["pacscore", "refpacscore", "longclipscore", "reflongclipscore", "cyclereward", "fleur", "reffleur"]


def test_metrics_list_shows_every_new_metric_with_its_source(capsys):
    assert main(["metrics", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(NEW) <= set(rows)
    assert (
        "clip_ViT-B-32.pth" in rows["pacscore"]["backend"]
        and "LongCLIP-B" in rows["longclipscore"]["backend"]
    )
    assert (
        "CycleReward-*.pth" in rows["cyclereward"]["backend"] and "transformers" in rows["fleur"]["backend"]
    )
    assert all(rows[n]["needs_images"] for n in NEW)
    assert [n for n in NEW if rows[n]["needs_references"]] == ["refpacscore", "reflongclipscore", "reffleur"]
    assert main(["metrics", "list"]) == 0
    printed = capsys.readouterr().out
    assert all(n in printed for n in NEW) and "Sarto" in printed and "Bahng" in printed
    for source in ("aimagelab/pacscore", "BeichenZhang/LongCLIP-B", "hjbahng/cyclereward", "Yebin46/FLEUR"):
        assert source in printed


def test_metrics_add_scores_the_bundled_sample_with_every_new_metric(tmp_path, capsys):
    sample = REPO / "recon_score" / "sample"
    rows = [json.loads(line) for line in (sample / "captions.jsonl").read_text().splitlines()][:3]
    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(json.dumps({"images_root": str(sample), "meaningless": True}))
    argv = ["metrics", "add", str(run), "--references", str(sample / "references.json"), "--preset", "smoke"]
    assert main([*argv, "--metrics", ",".join(NEW), "--device", "cpu"]) == 0
    assert "(3 rows)" in capsys.readouterr().out
    out = pd.read_json(run / "scores.metrics.jsonl", lines=True)
    # the tiny random judge is held to "0.dd" answers, so FLEUR's scoring path runs too
    for name in NEW:
        assert np.isfinite(out[name].astype(float)).all(), name
    meta = json.loads((run / "scores.metrics.json").read_text())
    reports = json.dumps(meta)
    assert "smoke:open-clip/pacs-ViT-B-32" in reports and "smoke:open-clip/longclip-B" in reports


def test_correlate_prints_one_table_for_all_of_them(tmp_path, capsys):
    example = REPO / "preference_data" / "examples" / "ranking_example.jsonl"
    metrics = "clipscore,pacscore,longclipscore,cyclereward,refpacscore,reflongclipscore"
    assert main(correlate_ranking(example, metrics, tmp_path / "c", "--bootstrap", "20")) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "c" / "correlations.csv")
    assert table["metric"].tolist() == metrics.split(",")
    assert {"tau_b_low", "tau_c_high", "pairwise_acc_low", "pairwise_acc_high"} <= set(table.columns)
    assert printed.count("pairwise_acc") == 1 and all(m in printed for m in metrics.split(","))
