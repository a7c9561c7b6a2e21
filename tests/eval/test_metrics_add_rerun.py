"""`metrics add` is a Run like the others: a finished rerun computes nothing, a deleted output comes back byte for
byte from the journal, a changed input recomputes the table, and a SIGKILL mid-run reruns to the bytes of an
uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import eval.add_metrics
from eval.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "recon_score" / "sample"


def _run(folder: Path) -> Path:
    """A 3-row results table of the bundled sample, with the record a score run would have."""
    rows = [json.loads(line) for line in (SAMPLE / "captions.jsonl").read_text().splitlines()][:3]
    folder.mkdir()
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "run.json").write_text(json.dumps({"images_root": str(SAMPLE), "meaningless": True}))
    return folder


def _argv(run: Path, references: Path = SAMPLE / "references.json") -> list[str]:
    return ["metrics", "add", str(run), "--metrics", "bleu4,cider", "--references", str(references)]


def _never(*args, **kwargs):
    raise AssertionError("the metrics were computed again")


def test_a_finished_rerun_computes_nothing_and_a_deleted_output_comes_back(tmp_path, monkeypatch):
    run = _run(tmp_path / "run")
    assert main(_argv(run)) == 0
    table, record = run / "scores.metrics.jsonl", run / "scores.metrics.json"
    want = table.read_bytes()
    assert len(want.splitlines()) == 3 and "cider" in json.loads(want.splitlines()[0])
    mtimes = {p: p.stat().st_mtime_ns for p in (table, record)}
    monkeypatch.setattr(eval.add_metrics, "compute_metrics", _never)
    assert main(_argv(run)) == 0  # finished: nothing computed, nothing rewritten
    assert {p: p.stat().st_mtime_ns for p in (table, record)} == mtimes
    table.unlink()
    assert main(_argv(run)) == 0  # rebuilt from the journal, not computed
    assert table.read_bytes() == want
    record.unlink()
    assert main(_argv(run)) == 0
    assert json.loads(record.read_text())["command"] == "metrics add"


def test_a_corrupt_journal_says_how_to_start_again(tmp_path, capsys):
    """`metrics add` has no --overwrite: the message names what to remove instead, and removing it works."""
    run = _run(tmp_path / "run")
    assert main(_argv(run)) == 0
    capsys.readouterr()
    journal = run / ".scores.metrics.jsonl.journal"
    lines = (journal / "rank-0.jsonl").read_text().splitlines()
    (journal / "rank-0.jsonl").write_text(
        "\n".join(["garbage", *lines[1:]]) + "\n"
    )  # the header, not the last
    assert main(_argv(run)) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {journal / 'rank-0.jsonl'}:1: not a valid JSON line; the file is corrupt (restore it, or remove "
        f"{journal})"
    )
    shutil.rmtree(journal)
    assert main(_argv(run)) == 0


def test_a_changed_reference_recomputes_the_table(tmp_path, monkeypatch):
    run = _run(tmp_path / "run")
    refs = tmp_path / "refs.json"
    refs.write_text((SAMPLE / "references.json").read_text())
    assert main(_argv(run, refs)) == 0
    before = (run / "scores.metrics.jsonl").read_bytes()
    items = json.loads(refs.read_text())
    items[0]["captions"] = ["a caption nothing else shares"]
    refs.write_text(json.dumps(items))
    assert main(_argv(run, refs)) == 0
    assert (run / "scores.metrics.jsonl").read_bytes() != before


def _killed(run: Path) -> int:
    """`metrics add` SIGKILLed (no cleanup) when its computed table is about to be journaled."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.killpoint", "1", *_argv(run)],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
    )
    return proc.returncode


@pytest.mark.parametrize("at", ["before the journal", "after the journal"])
def test_a_kill_mid_run_reruns_to_the_bytes_of_an_uninterrupted_run(at, tmp_path):
    """Killed with the table computed but not journaled, or journaled but no final file written (what a kill
    there leaves: the journal, no table, no record, an invocation without its end line)."""
    ref, run = _run(tmp_path / "ref"), _run(tmp_path / "killed")
    assert main(_argv(ref)) == 0
    if at == "before the journal":
        assert _killed(run) == -9
    else:
        assert main(_argv(run)) == 0
        for name in ("scores.metrics.jsonl", "scores.metrics.json"):
            (run / name).unlink()
        log = run / ".scores.metrics.jsonl.journal" / "invocations.jsonl"
        log.write_text("".join(x for x in log.read_text().splitlines(keepends=True) if '"end"' not in x))
    assert not (run / "scores.metrics.jsonl").exists()
    assert main(_argv(run)) == 0
    assert (run / "scores.metrics.jsonl").read_bytes() == (ref / "scores.metrics.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("refs_name", "out_name", "named"),
    [
        ("refs.json", "refs.jsonl", "--out's record"),  # the record OUT.json is the references
        ("r2.jsonl", "r2.jsonl", "--out"),  # the table is the references
    ],
)
def test_the_references_are_never_overwritten(tmp_path, capsys, monkeypatch, refs_name, out_name, named):
    run = _run(tmp_path / "run")
    refs = tmp_path / refs_name
    refs.write_bytes((SAMPLE / "references.json").read_bytes())
    want = refs.read_bytes()
    monkeypatch.setattr(eval.add_metrics, "compute_metrics", _never)
    assert main([*_argv(run, refs), "--out", str(tmp_path / out_name)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {named} {refs} is the input {refs}: choose another path"]
    assert refs.read_bytes() == want
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", refs_name])  # no journal, no lock


def test_an_image_of_the_run_is_never_overwritten(tmp_path, capsys, monkeypatch):
    run = _run(tmp_path / "run")
    images = tmp_path / "images"
    images.mkdir()
    rows = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    image = images / Path(rows[0]["image"]).name
    image.write_bytes((SAMPLE / rows[0]["image"]).read_bytes())
    for r in rows:
        r["image"] = image.name
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    want = image.read_bytes()
    monkeypatch.setattr(eval.add_metrics, "compute_metrics", _never)
    argv = ["metrics", "add", str(run), "--metrics", "clipscore", "--encoder", "smoke:open-clip"]
    assert main([*argv, "--images", str(images), "--out", str(image)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --out {image} is the input {image}: choose another path"]
    assert image.read_bytes() == want
    assert [p.name for p in images.iterdir()] == [image.name]  # its lock removed with the failed start
