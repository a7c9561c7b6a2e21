"""`reconscore study encoders` with an unreadable image: the row is skipped, counted and named in run.json,
with one warning line, and the study still runs on the rest."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from eval.cli import main
from tests.smoke_cli import two_systems


def test_encoders_study_skips_unreadable_images(tmp_path, sample_dir, capsys):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    for i in (1, 2, 3):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", data / "images")
    runs = two_systems(tmp_path, data)
    original = data / "images" / "UCM_2.tif"  # shared by both systems
    original.write_bytes(original.read_bytes()[:300])
    rows = [json.loads(line) for line in (tmp_path / "rich" / "scores.jsonl").read_text().splitlines()]
    recon = tmp_path / "rich" / rows[2]["reconstruction"]
    recon.write_bytes(recon.read_bytes()[:100])
    capsys.readouterr()
    out = tmp_path / "enc"
    assert (
        main(["study", "encoders", *runs, "--encoders", "smoke:dreamsim,lpips:alex", "--out", str(out)]) == 3
    )
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "skipped 3 row(s)" in line]) == 1
    skipped = json.loads((out / "run.json").read_text())["skipped_images"]
    assert skipped["count"] == 3
    named = {(i["system"], i["id"]) for i in skipped["items"]}
    assert named == {("terse", "r2"), ("rich", "r2"), ("rich", "r3")}
    assert all(("UCM_2.tif" in i["error"]) or (recon.name in i["error"]) for i in skipped["items"])
    table = pd.read_csv(out / "table.csv", index_col=0)
    assert table.shape == (2, 2)
    kept = {"terse": {"r1", "r3"}, "rich": {"r1"}}
    for sys_name, ids in kept.items():  # the run's own encoder reproduces the run's scores on the rows kept
        scores = [
            json.loads(line) for line in (tmp_path / sys_name / "scores.jsonl").read_text().splitlines()
        ]
        mean = np.mean([r["recon_score"] for r in scores if r["id"] in ids])
        assert table.loc[sys_name, "smoke:dreamsim"] == pytest.approx(mean, abs=1e-4)
