"""`score --explain` end to end on the smoke preset: maps and attributions for every scored row, kill -9 and
resume to the same bytes, repair of a deleted map."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eval.cli import main
from eval.studies.common import selection_seeds
from recon_score.atomic_io import read_jsonl
from recon_score.explain import ExplainOptions, split_phrases
from tests.smoke_cli import caption_folder, own_cache, smoke

REPO = Path(__file__).resolve().parents[2]
CAPTIONS = (
    "a farmland with rows of crops, a road on the left",
    "a baseball field",
    "a sandy beach, white waves",
)


@pytest.fixture
def data(tmp_path, sample_dir):
    return caption_folder(tmp_path / "data", sample_dir, CAPTIONS)


def _argv(data: Path, out: Path, seeds: str = "2") -> list[str]:
    return smoke(
        "score",
        out,
        "--captions",
        str(data / "caps.jsonl"),
        "--explain",
        "--explain-seeds",
        "2",
        "--seeds",
        seeds,
    )


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "explain").iterdir())}


def test_every_scored_row_is_explained_and_a_deleted_map_is_repaired(data, tmp_path, caplog, capsys):
    out = tmp_path / "run"
    assert main(_argv(data, out)) == 0
    printed, progress = capsys.readouterr()
    # the cost before the first render ((4 + 1 + 3) variants x 2 seeds), progress in renders, the summary
    assert (
        "explain: 3 caption(s) x (phrases + 1) x 2 seeds = 16 renders, besides the score's 6 (22 in all)"
        in progress
    )
    assert "/22 renders" in progress and "captions (" not in progress
    assert all(label in printed for label in ("explained captions", "phrases attributed", "gap maps"))
    rows = read_jsonl(out / "scores.jsonl")
    for row, caption in zip(rows, CAPTIONS):
        ex = row["explain"]
        assert ex["seeds"] == row["seeds"] and len(ex["per_seed"]) == 2
        assert [p["text"] for p in ex["phrases"]] == [p.text for p in split_phrases(caption)]
        with np.load(out / ex["maps"], allow_pickle=False) as z:
            assert z["recall"].shape == z["aligned"].shape and z["phrase_drops"].shape[0] == len(
                ex["phrases"]
            )
        assert (out / ex["heatmap"]).stat().st_size > 0
    assert rows[1]["explain"]["phrases"][0]["error"].startswith("the caption's only phrase")
    assert json.loads((out / "run.json").read_text())["config"]["preset"]["t2i_model"] == "smoke:z-image"
    html = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(html)]) == 0
    page = html.read_text()
    assert page.count('<details class="gap">') == len(rows) and 'class="phrase' in page
    assert 'aria-label="phrase colours"' in page and "within the seed noise (not significant)" in page
    assert "<th" in page and "worst phrase Δ" in page
    before = _files(out)
    (out / rows[0]["explain"]["heatmap"]).unlink()
    with caplog.at_level("WARNING"):
        assert main(_argv(data, out)) == 0
    assert "1 row(s) with explain/ files missing or replaced: explained again" in caplog.text
    assert _files(out) == before


def test_explain_kill_and_resume_gives_identical_bytes(tmp_path, sample_dir):
    data = caption_folder(
        tmp_path / "data",
        sample_dir,
        ("a farmland, a road", "trees", "a beach"),  # 6 + 2 + 2 explain renders
    )
    env = {**os.environ, "RECONSCORE_CACHE": own_cache(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    ref, out = tmp_path / "ref", tmp_path / "killed"
    cli = [sys.executable, "-m", "eval"]
    subprocess.run(
        [*cli, *_argv(data, ref, "1")], env=env, cwd=REPO, check=True, capture_output=True, timeout=600
    )
    env["RECONSCORE_CACHE"] = own_cache(tmp_path / "cache-killed")
    proc = subprocess.Popen(
        [*cli, *_argv(data, out, "1")],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = out / "journal" / "rank-0.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (journal.exists() and journal.read_bytes().count(b"\n") >= 2):
        if proc.poll() is not None:
            pytest.fail("the run finished before it could be killed")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(read_jsonl(journal)) - 1
    assert 1 <= finished < 3
    subprocess.run(
        [*cli, *_argv(data, out, "1")], env=env, cwd=REPO, check=True, capture_output=True, timeout=600
    )
    assert (out / "scores.jsonl").read_bytes() == (ref / "scores.jsonl").read_bytes()
    assert _files(out) == _files(ref)


def test_describe_explains_the_chosen_caption_on_held_out_seeds(tmp_path, capsys):
    out = tmp_path / "describe"
    assert main(smoke("describe", out, "--n", "2", "--limit", "1", "--explain", "--explain-seeds", "2")) == 0
    (row,) = read_jsonl(out / "captions.jsonl")
    renders = ExplainOptions(seeds=2).renders(row["caption"])  # the cost, said before the first render
    assert (
        f"explain: 1 chosen caption(s) x (phrases + 1) x 2 seeds = {renders} renders"
        in capsys.readouterr().err
    )
    ex = row["explain"]
    run = json.loads((out / "run.json").read_text())
    selection = selection_seeds(run)
    assert selection and ex["seeds"][0] == row["eval_seed"] and not set(ex["seeds"]) & set(selection)
    assert [p["text"] for p in ex["phrases"]] == [p.text for p in split_phrases(row["caption"])] or ex[
        "error"
    ]
    if ex["maps"]:
        assert (out / ex["maps"]).is_file() and (out / ex["heatmap"]).is_file()


def test_describe_explain_needs_recon_score_selection(tmp_path, capsys):
    argv = smoke(
        "describe", tmp_path / "d", "--n", "2", "--limit", "1", "--explain", "--select-by", "clipscore"
    )
    assert main(argv) == 2
    assert "--explain needs ReconScore selection" in capsys.readouterr().err
