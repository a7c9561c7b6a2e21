"""Progress lines when stderr is a file (SLURM, nohup, CI): done/total, rate, ETA and failures, not a bar."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from recon_score.progress import Progress

LINE = re.compile(
    r"^\[\d\d:\d\d:\d\d\] (?P<desc>\S+) (?P<done>\d+)/(?P<total>\d+) (?P<unit>\w+)s \([\d.]+%\) "
    r"[\d.e+-]+ \w+/s ETA (\S+) elapsed \d+:\d\d:\d\d failed (?P<failed>\d+)"
)


def test_plain_lines_when_not_a_terminal():
    buf = io.StringIO()
    with Progress(4, desc="score[0]", unit="caption", file=buf, interval=0) as p:
        p.update(1)
        p.update(2, failed=1)
        p.stage("phase 2/3: rendering")
        p.update(1)
    lines = [LINE.match(x) for x in buf.getvalue().splitlines()]
    assert all(lines), buf.getvalue()
    assert [(m["done"], m["failed"]) for m in lines] == [
        ("0", "0"),
        ("1", "0"),
        ("3", "1"),
        ("3", "1"),
        ("4", "1"),
        ("4", "1"),
    ]
    assert "phase 2/3: rendering" in buf.getvalue().splitlines()[3]
    assert "\r" not in buf.getvalue()


def test_interval_throttles_lines():
    buf = io.StringIO()
    p = Progress(100, desc="d", unit="image", file=buf, interval=3600)
    for _ in range(100):
        p.update(1)
    p.close()
    assert len(buf.getvalue().splitlines()) == 2  # the first and the last


def test_score_with_stderr_in_a_file(tmp_path):
    log = tmp_path / "stderr.log"
    env = {**os.environ, "RECONSCORE_PROGRESS_INTERVAL": "0", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "eval",
        "score",
        "--preset",
        "smoke",
        "--limit",
        "3",
        "--out",
        str(tmp_path / "run"),
    ]
    with log.open("w") as err:
        rc = subprocess.run(cmd, stderr=err, stdout=subprocess.DEVNULL, env=env, timeout=600).returncode
    assert rc == 0
    matches = [LINE.match(x) for x in log.read_text().splitlines()]
    progress = [m for m in matches if m and m["desc"] == "score[0]"]
    assert (
        progress
        and progress[-1]["done"] == progress[-1]["total"] == "3"
        and progress[-1]["unit"] == "caption"
    )
    assert "\r" not in log.read_text()
    rows = [json.loads(x) for x in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["reference"] * 3  # the sample's own columns travel to the output
    summary = json.loads((tmp_path / "run" / "run.json").read_text())["summary"]["references_vs_distractors"]
    assert summary["references"] == 3 and summary["distractors"] == 0 and summary["images"] == 0


def test_a_long_unit_without_updates_still_prints_lines():
    import time

    buf = io.StringIO()
    p = Progress(2, desc="render", unit="caption", file=buf, interval=0.05)
    p.stage("rendering 2 captions")
    time.sleep(0.4)  # one long unit: no update, yet the log hears from it
    p.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 4 and all(LINE.match(x) for x in lines), lines
    assert all(LINE.match(x)["done"] == "0" for x in lines[:-1])
    n = len(lines)
    time.sleep(0.2)
    assert len(buf.getvalue().splitlines()) == n  # closed: the heartbeat has stopped


def test_count_and_stage_of_one_line_agree():
    buf = io.StringIO()
    with Progress(3, desc="describe[0]", unit="image", file=buf, interval=0) as p:
        p.stage("phase 1/1: captioned 3/3 images")
        p.update(2, stage="phase 1/1: scored 2/3 images")
        p.update(1, stage="phase 1/1: scored 3/3 images")
    lines = buf.getvalue().splitlines()
    assert lines[2].split(" describe[0] ")[1].startswith("2/3 images") and lines[2].endswith(
        "scored 2/3 images"
    )
    assert lines[3].split(" describe[0] ")[1].startswith("3/3 images") and lines[3].endswith(
        "scored 3/3 images"
    )


def test_disabled_prints_nothing_and_units_are_plural():
    buf = io.StringIO()
    with Progress(5, desc="q", unit="query", file=buf, interval=0, disable=True) as p:
        p.update(5)
    assert buf.getvalue() == ""
    with Progress(5, desc="q", unit="query", file=buf, interval=0) as p:
        p.update(5)
    assert "5/5 queries (100.0%)" in buf.getvalue().splitlines()[-1]


def test_retrieval_bars_go_through_progress():
    """Off a terminal retrieval prints plain lines too: no module draws a tqdm bar of its own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    own = [
        str(p.relative_to(root))
        for pkg in ("recon_score", "eval", "describer", "retrieval")
        for p in (root / pkg).rglob("*.py")
        if "from tqdm" in p.read_text() and p.name != "progress.py"
    ]
    assert own == []


def test_a_bar_dropped_without_close_stops_its_heartbeat():
    import gc
    import threading
    import time

    buf = io.StringIO()
    p = Progress(3, desc="lost", unit="image", file=buf, interval=0.05)
    thread = p._heartbeat
    del p  # the work raised before close()
    gc.collect()
    time.sleep(0.3)
    assert not thread.is_alive() and thread not in threading.enumerate()


ANNOUNCE = re.compile(r"^\[\d\d:\d\d:\d\d\] (?P<text>.+)$")


def _stderr_lines(argv: list[str], log) -> list[str]:
    """`reconscore ARGV` in a subprocess with stderr in a file, as under nohup or SLURM; its stderr lines."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RECONSCORE_PROGRESS_INTERVAL": "30"}
    with log.open("w") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "eval", *argv], stderr=err, stdout=subprocess.DEVNULL, env=env, timeout=600
        )
    assert proc.returncode == 0, log.read_text()[-2000:]
    text = log.read_text()
    assert "\r" not in text
    return text.splitlines()


def test_correlate_says_what_starts_with_stderr_in_a_file(tmp_path):
    """A line at start-up, one per metric set up and one per metric run, and before the bootstrap: a handful of
    captions (under any bar's threshold) is never a silent wait."""
    from tests.smoke_cli import correlate_ranking

    example = Path(__file__).resolve().parents[2] / "preference_data" / "examples" / "ranking_example.jsonl"
    argv = correlate_ranking(example, "clipscore,bleu4", tmp_path / "run", "--bootstrap", "20")
    lines = _stderr_lines(argv, tmp_path / "stderr.log")
    said = [m["text"] for m in map(ANNOUNCE.match, lines) if m]
    assert said[0].startswith(f"correlate: reading {example} (ranking); metrics clipscore, bleu4"), lines
    wanted = [
        "metrics: setting up clipscore (1/2)",
        "metrics: setting up bleu4 (2/2)",
        "metrics: clipscore on ",
        "metrics: bleu4 on ",
        "correlate: Kendall τ of 2 metric(s), 20 bootstrap resamples over images",
    ]
    positions = [next(i for i, t in enumerate(said) if t.startswith(w)) for w in wanted]
    assert positions == sorted(positions), said  # in the order the work happens
    assert any(m and m["desc"] == "metrics" for m in map(LINE.match, lines))  # the bar's own lines too


def test_retrieve_says_what_starts_with_stderr_in_a_file(tmp_path):
    """Reading the annotations and loading the encoder (the minutes before the first feature bar), then each
    method: a timestamped line each."""
    from tests.retrieval import layouts
    from tests.smoke_cli import retrieve_patterncom

    root = layouts.patterncom(tmp_path / "pc")
    lines = _stderr_lines(retrieve_patterncom(root, tmp_path / "run", "text,sum"), tmp_path / "stderr.log")
    said = [m["text"] for m in map(ANNOUNCE.match, lines) if m]
    wanted = [
        "retrieve: patterncom from ",
        "retrieve: reading the patterncom annotations",
        "retrieve: loading encoder smoke:open-clip",
        "retrieve: encoder smoke:open-clip loaded in ",
        "retrieve: method text on ",
        "retrieve: method sum on ",
    ]
    positions = [next(i for i, t in enumerate(said) if t.startswith(w)) for w in wanted]
    assert positions == sorted(positions) and positions[0] == 0, said
