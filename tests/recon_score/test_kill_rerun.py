"""An interrupted run, rerun with the same command, gives the bytes of an uninterrupted one: `retrieve` (resumed
from its journal, the journaled methods not recomputed), `evaluate` and `pairs` (computed in one go: whatever a
SIGKILL left behind, the rerun publishes the same files). `score`, `describe` and `generate` have their own
kill-and-resume tests (test_run.py, test_describe.py, test_generate_resume.py)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.cli import main
from tests.retrieval import layouts
from tests.smoke_cli import evaluate, retrieve_patterncom

REPO = Path(__file__).resolve().parents[2]


def _files(out: Path, *, skip: tuple[str, ...] = ("run.json", "journal", ".lock")) -> dict[str, bytes]:
    """Every file of a run folder but its record, journal and lock (those hold times and invocations)."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[0] not in skip
    }


def _killed(argv: list[str], out: Path, tmp_path: Path) -> int:
    """Start `reconscore ARGV` and SIGKILL it once it holds the folder's lock (wherever it then is)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RECONSCORE_CACHE": str(tmp_path / "cache-killed")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "eval", *argv],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (out / ".lock").exists():
        time.sleep(0.005)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=60)


def test_retrieve_resumes_after_a_kill_between_methods(tmp_path):
    """What a SIGKILL after the first method leaves (its journal record and methods/ files, no final files, an
    invocation without an end: the journal is append-only and fsync'd), rebuilt exactly; the rerun reads that
    method back."""
    root = layouts.patterncom(tmp_path / "pc")
    ref, out = tmp_path / "ref", tmp_path / "run"
    argv = lambda o: retrieve_patterncom(root, o, "text,image,sum")  # noqa: E731
    assert main(argv(ref)) == 0
    assert main(argv(out)) == 0
    journal = out / "journal" / "rank-0.jsonl"
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:2]))  # header + 1 method
    log = out / "journal" / "invocations.jsonl"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True) if '"end"' not in line))
    for p in [*out.iterdir(), *(out / "methods").iterdir()]:
        if p.name not in ("journal", ".lock", "methods") and not p.name.startswith("text."):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert main(argv(out)) == 0
    record = json.loads((out / "run.json").read_text())
    assert [record["methods"][m]["resumed"] for m in ("text", "image", "sum")] == [True, False, False]
    assert _files(out) == _files(ref)


@pytest.mark.parametrize("command", ["evaluate", "pairs"])
def test_a_one_go_run_killed_anywhere_reruns_to_the_same_bytes(command, tmp_path, sample_dir):
    if command == "evaluate":
        root = tmp_path / "split"
        (root / "images").mkdir(parents=True)
        images = []
        for i in (1, 2, 3):
            shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
            images.append({"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": f"a farm {i} ."}]})
        (root / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
        caps = tmp_path / "caps.csv"
        caps.write_text("image,caption\n1.tif,a farm 1 .\n2.tif,a road\n3.tif,rows of crops\n")
        argv = lambda o: evaluate("ucm-captions", root, caps, "bleu1,rouge,cider", o)  # noqa: E731
    else:
        from tests.describer.test_pairs import _fake_run

        run = _fake_run(tmp_path)
        argv = lambda o: ["pairs", str(run), "--out", str(o), "--policy", "all"]  # noqa: E731
    ref, out = tmp_path / "ref", tmp_path / "killed"
    code = main(argv(ref))
    assert _killed(argv(out), out, tmp_path) == -signal.SIGKILL  # killed, not finished
    assert main(argv(out)) == code
    assert _files(out) == _files(ref) and _files(ref)


def test_retrieve_restores_every_deleted_final_file_without_evaluating(tmp_path):
    """retrieve's tables are final files the Run knows: deleted, each comes back byte for byte from the
    journaled methods (read back, not evaluated again); an intact folder's rerun rewrites nothing."""
    root = layouts.patterncom(tmp_path / "pc")
    out = tmp_path / "run"
    argv = retrieve_patterncom(root, out, "text,image")
    assert main(argv) == 0
    want = _files(out)
    finals = [p for p in out.iterdir() if p.is_file() and p.name not in ("run.json", ".lock")]
    assert {"per_query.csv", "per_query.parquet", "table.md"} <= {p.name for p in finals}
    for p in finals:
        p.unlink()
    assert main(argv) == 0
    assert _files(out) == want
    record = json.loads((out / "run.json").read_text())
    assert [record["methods"][m]["resumed"] for m in ("text", "image")] == [True, True]
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    assert main(argv) == 0  # finished: nothing rewritten (the lock file holds the pid of whoever runs)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == mtimes
