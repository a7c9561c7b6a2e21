"""`reconscore score` and `reconscore describe` take a dataset split as input."""

import json
import shutil

import pytest

from eval.cli import main
from tests.smoke_cli import smoke


@pytest.fixture(scope="module")
def precomp_split(tmp_path_factory, sample_dir):
    root = tmp_path_factory.mktemp("ucm")
    (root / "images").mkdir()
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
    caps, names = [], []
    for i in (1, 2, 3):  # 3.tif is listed but missing
        caps += [f"image {i} caption {k}" for k in range(5)]
        names += [f"{i}.tif"] * 5
    (root / "test_caps.txt").write_text("\n".join(caps) + "\n")
    (root / "test_filename.txt").write_text("\n".join(names) + "\n")
    return root


def test_score_a_split_references(precomp_split, tmp_path):
    out = tmp_path / "run"
    rc = main(smoke("score", out, "--dataset", "ucm-precomp", "--root", str(precomp_split)))
    rows = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert rc == 3 and len(rows) == 15
    assert [r["id"] for r in rows[:6]] == ["1.tif#0", "1.tif#1", "1.tif#2", "1.tif#3", "1.tif#4", "2.tif#0"]
    assert all(r["error"] is None for r in rows[:10])
    assert all("not found" in r["error"] for r in rows[10:])
    run = json.loads((out / "run.json").read_text())
    assert run["source"]["dataset"] == "ucm-precomp" and run["source"]["missing_images"] == ["3.tif"]
    assert main(["score", "--preset", "smoke", "--dataset", "ucm-precomp", "--out", str(tmp_path / "x")]) == 2


def test_describe_a_split(precomp_split, tmp_path):
    out = tmp_path / "run"
    rc = main(smoke("describe", out, "--n", "2", "--dataset", "ucm-precomp", "--root", str(precomp_split)))
    caps = [json.loads(x) for x in (out / "captions.jsonl").read_text().splitlines()]
    assert rc == 3 and [c["image_id"] for c in caps] == ["1.tif", "2.tif", "3.tif"]
    assert caps[0]["caption"] and caps[2]["caption"] is None and "not found" in caps[2]["error"]
