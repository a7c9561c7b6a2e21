"""`reconscore generate` is a run like `score`: journaled through the run folder (its lock, its journal with
checksums), so a SIGKILL between two batches resumes to the same bytes as an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from eval.cli import main
from recon_score.atomic_io import read_jsonl
from tests.smoke_cli import one_thread

REPO = Path(__file__).resolve().parents[2]


def _argv(caps: Path, out: Path) -> list[str]:
    return ["generate", "perturb", "--captions", str(caps), "--model", "smoke:qwen3-text", "--device", "cpu",
            "--max-new-tokens", "4", "--out", str(out)]  # fmt: skip


def _killed(caps: Path, out: Path) -> int:
    """`reconscore generate` SIGKILLed (no cleanup) when the second batch of 16 answers is about to be journaled."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tests.killpoint", "2", *_argv(caps, out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=600,
    ).returncode


def test_kill_and_resume_gives_identical_output(tmp_path):
    caps = tmp_path / "caps.jsonl"
    rows = [
        {"id": f"s{i}", "image": "images/UCM_1.tif", "caption": f"a farmland with {i} trees"}
        for i in range(20)
    ]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the reference and the resume run in this process (an interpreter start-up is seconds of imports), on the
    # killed process's one thread
    ref = tmp_path / "ref"
    with one_thread():
        assert main(_argv(caps, ref)) in (0, 3)

    out = tmp_path / "killed"
    assert _killed(caps, out) == -9
    assert not (out / "generated.jsonl").exists()
    (journal,) = (out / "journal").glob("generated-rank-*.jsonl")
    assert len(read_jsonl(journal)) == 1 + 16  # the header and the first batch, each record with its checksum

    with one_thread():
        assert main(_argv(caps, out)) in (0, 3)
    assert (out / "generated.jsonl").read_bytes() == (ref / "generated.jsonl").read_bytes()
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"] and [i["rows_done"] for i in run["invocations"]] == [16, 4]
    assert run["meaningless"] is True  # a synthetic model: the record says so


def test_a_rerun_after_the_source_table_is_edited_writes_a_fresh_runs_bytes(tmp_path):
    """A source row's image changed (its caption kept): its request is sent again and generated.jsonl names the
    new image, byte for byte what a fresh run writes; the unchanged rows are not sent again."""
    caps = tmp_path / "caps.jsonl"
    rows = [
        {"id": f"s{i}", "image": "images/UCM_1.tif", "caption": f"a farmland with {i} trees"}
        for i in range(3)
    ]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    with one_thread():
        assert main(_argv(caps, out)) in (0, 3)
        rows[1]["image"] = "images/UCM_2.tif"
        caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert main(_argv(caps, out)) in (0, 3)
        assert main(_argv(caps, fresh)) in (0, 3)
    generated = (out / "generated.jsonl").read_bytes()
    assert [json.loads(line)["image"] for line in generated.splitlines()][1] == "images/UCM_2.tif"
    assert generated == (fresh / "generated.jsonl").read_bytes()
    run = json.loads((out / "run.json").read_text())
    assert [i["rows_done"] for i in run["invocations"]] == [2, 1]  # the current rows each invocation computed
    assert run["invocations"][-1]["recomputed_changed_inputs"] == 1
