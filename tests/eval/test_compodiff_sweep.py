"""`reconscore study compodiff-sweep`: the RS-CIR benchmark paper's Fig. 12 grid as one command, each point a
`retrieve` run of CompoDiff on a synthetic PatternCom with a tiny random release."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from eval.cli import main
from tests.retrieval import layouts
from tests.retrieval.test_compodiff import _release_for_smoke
from tests.smoke_cli import assert_restored


def _argv(root, release, out, *extra):
    return ["study", "compodiff-sweep", "--root", str(root), "--encoder", "smoke:open-clip", "--checkpoint",
            str(release), "--set", "text_encoder=smoke:hf-clip", "--device", "cpu", "--out", str(out), *extra]  # fmt: skip


def test_the_sweep_tables_each_point_as_its_own_retrieve_run(tmp_path, capsys):
    release = _release_for_smoke(tmp_path / "CompoDiff-tiny")
    root, out = layouts.patterncom(tmp_path / "PatternNet"), tmp_path / "sweep"
    argv = _argv(root, release, out, "--weights", "0.2,1", "--sampler-steps", "2,3")
    assert main(argv) == 0, capsys.readouterr().err
    assert_restored(argv, out, skip=("points",))  # each point is a retrieve run of its own
    table = pd.read_csv(out / "table.csv", index_col=0)
    assert list(table.index) == [2, 3] and list(table.columns) == ["0.2", "1"]
    record = json.loads((out / "run.json").read_text())
    assert record["study"] == "compodiff-sweep" and record["metric"] == "ap"
    for name, point in record["points"].items():
        run = json.loads((out / "points" / name / "run.json").read_text())
        cfg = run["methods"]["compodiff"]["config"]
        assert (cfg["steps"], cfg["source_weight"]) == (point["steps"], point["source_weight"])
        avg = run["methods"]["compodiff"]["summary"]["ap"]["macro"]
        assert table.loc[point["steps"], f"{point['source_weight']:g}"] == pytest.approx(100 * avg)
    # w = 1 is the reference embedding alone: the same mAP whatever the number of steps
    assert table.loc[2, "1"] == pytest.approx(table.loc[3, "1"])
    assert "source weight" in capsys.readouterr().out

    # a rerun reads every point back from its run folder: each point's run is finished, so nothing is
    # computed and neither its records nor its run.json are written again
    def written(name: str) -> dict[str, bytes]:
        folder = out / "points" / name
        return {
            p.name: p.read_bytes()
            for p in [folder / "run.json", *sorted((folder / "journal").glob("rank-*"))]
        }

    before = {name: written(name) for name in record["points"]}
    assert main(argv) == 0
    assert pd.read_csv(out / "table.csv", index_col=0).equals(table)
    assert {name: written(name) for name in record["points"]} == before


def test_the_swept_settings_cannot_also_be_set(tmp_path, capsys):
    release = _release_for_smoke(tmp_path / "CompoDiff-tiny")
    root = layouts.patterncom(tmp_path / "PatternNet")
    argv = _argv(root, release, tmp_path / "sweep", "--set", "steps=4")
    assert main(argv) != 0
    assert "what the sweep varies" in capsys.readouterr().err
    assert main(_argv(root, release, tmp_path / "s2", "--weights", "0.2,1.5")) != 0
    assert "[0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--weights", ""], "needs at least one float"),
        (["--weights", " , "], "needs at least one float"),
        (["--weights", "0.1,,0.2"], "an empty value at position 2 of '0.1,,0.2'"),
        (["--sampler-steps", "5,"], "an empty value at position 2"),
        (["--weights", "0.1,x"], "expected comma-separated floats"),
    ],
)
def test_empty_or_holed_grids_are_refused(tmp_path, capsys, extra, message):
    """`--weights ""` used to exit 0 with an empty table and never look at --root."""
    root = layouts.patterncom(tmp_path / "PatternNet")
    (
        tmp_path / "release"
    ).mkdir()  # click checks that the folder exists; the grid is refused before it is read
    assert main(_argv(root, tmp_path / "release", tmp_path / "sweep", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "sweep").exists()


def test_a_missing_root_is_refused_before_any_point(tmp_path, capsys):
    release = _release_for_smoke(tmp_path / "CompoDiff-tiny")
    assert main(_argv(tmp_path / "no-such-root", release, tmp_path / "sweep", "--weights", "0.2")) == 2
    assert "no-such-root is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()
