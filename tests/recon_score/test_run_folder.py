"""Run-folder integrity (recon_score.run_engine, docs/runs.md, docs/bad-inputs.md): a failed start leaves
nothing behind, a folder knows its kind, a damaged folder is rebuilt from its journal, a full, size-limited or
read-only disk gives one clear line. Every hostile case is built here, in a temporary folder."""

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from eval.cli import main
from tests.smoke_cli import caption_folder, smoke

CAPTIONS = ("a farmland", "many green trees", "a baseball field")


@pytest.fixture
def data(tmp_path, sample_dir):
    return caption_folder(tmp_path / "data", sample_dir, CAPTIONS)


def _score(data: Path, out: Path, *extra: str) -> int:
    return main(smoke("score", out, "--captions", str(data / "caps.jsonl"), *extra))


def _files(out: Path) -> dict[str, bytes]:
    """scores.jsonl and every reconstruction, by path: what a repair must give back byte for byte."""
    found = {"scores.jsonl": (out / "scores.jsonl").read_bytes()}
    for p in sorted((out / "reconstructions").glob("*.png")):
        found[f"reconstructions/{p.name}"] = p.read_bytes()
    return found


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_dir):
    """One finished 3-row run, copied by the tests that damage it (rendering once keeps them fast)."""
    base = tmp_path_factory.mktemp("finished")
    data = caption_folder(base / "data", sample_dir, CAPTIONS)
    assert _score(data, base / "run") == 0
    return data, base / "run"


def _copy(finished, tmp_path) -> tuple[Path, Path]:
    data, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return data, out


def test_failed_start_leaves_nothing_behind(data, tmp_path, capsys):
    out = tmp_path / "new" / "run"
    missing = ["score", "--preset", "smoke", "--captions", str(data / "nope.jsonl"), "--out", str(out)]
    assert main(missing) == 1
    assert "nope.jsonl" in _error_lines(capsys)[0]
    assert not (tmp_path / "new").exists()  # no folder, lock or journal
    out.mkdir(parents=True)
    assert _score(data, out, "--t2i-model", str(tmp_path / "no-such-model")) == 1  # a missing model
    assert "no-such-model" in capsys.readouterr().err  # the preflight lists it under its one error line
    assert list(out.iterdir()) == []  # the folder it did not create is left as it was: empty
    assert _score(data, out, "--limit", "1") == 0
    info = json.loads((out / "run.json").read_text())
    assert info["resumed"] is False and len(info["invocations"]) == 1


def test_a_run_folder_knows_its_kind(finished, tmp_path, capsys):
    _, out = _copy(finished, tmp_path)
    before = {p: (out / p).read_bytes() for p in ("run.json", "scores.jsonl")}
    argv = smoke("describe", out, "--n", "2", "--limit", "1")
    assert main(argv) == 1
    assert "is a `score` run folder; `describe` will not write into it" in _error_lines(capsys)[0]
    assert main(["report", str(out), "--out", str(out / "scores.jsonl")]) == 1
    assert "is a file of the score run in" in _error_lines(capsys)[0]
    assert {p: (out / p).read_bytes() for p in before} == before
    assert main(["report", str(out), "--out", str(out / "report.html")]) == 0  # a new file beside it is fine


def test_lock_that_is_a_folder_and_journal_that_is_a_file(data, tmp_path, capsys):
    out = tmp_path / "run"
    (out / ".lock").mkdir(parents=True)
    assert _score(data, out) == 1
    assert _error_lines(capsys) == [
        f"error: {out / '.lock'} is not a file: it is where the run's lock lives; remove it"
    ]
    (out / ".lock").rmdir()
    (out / "journal").write_text("not a folder")
    assert _score(data, out) == 1
    assert f"{out / 'journal'} is a file, not the run's journal folder" in _error_lines(capsys)[0]
    assert (out / "journal").read_text() == "not a folder"  # nothing replaced


@pytest.mark.parametrize("last", ["{}", "[1, 2]", "null"])
def test_journal_ending_in_json_that_is_not_a_record_is_a_torn_line(finished, tmp_path, last):
    data, out = _copy(finished, tmp_path)
    want = _files(out)
    with (out / "journal" / "rank-0.jsonl").open("a") as f:
        f.write(last + "\n")
    (out / "scores.jsonl").unlink()
    assert _score(data, out) == 0
    assert _files(out) == want


def test_rerun_rebuilds_a_damaged_folder_from_the_journal(finished, tmp_path, caplog):
    data, out = _copy(finished, tmp_path)
    want = _files(out)
    pngs = sorted((out / "reconstructions").glob("*.png"))
    scores = (out / "scores.jsonl").read_bytes()
    (out / "scores.jsonl").write_bytes(scores[: len(scores) // 2])  # truncated mid-line
    pngs[0].unlink()
    pngs[1].write_bytes(pngs[2].read_bytes())  # replaced
    (out / "run.json").write_text("{not json")
    assert _score(data, out) == 0
    said = " ".join(r.getMessage() for r in caplog.records if "repairing" in r.getMessage())
    assert "2 row(s) with reconstructions/ files missing or replaced: rendered again" in said
    assert "scores.jsonl did not match the journal" in said and "run.json was missing or invalid" in said
    assert _files(out) == want
    info = json.loads((out / "run.json").read_text())
    assert info["invocations"][-1]["repaired"] and info["resumed"] is True

    shutil.rmtree(out / "reconstructions")
    (out / "reconstructions").write_text("a file where the folder was")
    caplog.clear()
    assert _score(data, out) == 0
    assert "3 row(s) with reconstructions/ files missing or replaced" in caplog.text
    assert _files(out) == want
    n = len(json.loads((out / "run.json").read_text())["invocations"])
    assert _score(data, out) == 0  # repaired: a no-op again
    assert len(json.loads((out / "run.json").read_text())["invocations"]) == n


def test_file_size_limit_is_one_line_and_the_resume_is_byte_identical(finished, tmp_path, capsys):
    data, ref = finished
    out = tmp_path / "run"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # a reconstruction PNG is ~160 kB
    try:
        rc = _score(data, out)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert rc == 1
    assert _error_lines(capsys) == [
        f"error: cannot write in {out / 'reconstructions'}: file size limit reached; free space and rerun "
        "the same command: the run resumes where it stopped"
    ]
    assert _score(data, out) == 0
    assert _files(out) == _files(ref)


def _tmpfs(mnt: Path, size: str = "3m") -> None:
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    _tmpfs(mnt)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_is_one_line_and_the_resume_is_byte_identical(finished, small_disk, capsys):
    data, ref = finished
    out = small_disk / "run"
    filler = small_disk / "filler"
    st = os.statvfs(small_disk)
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 250_000))  # room for one reconstruction, not two
    assert _score(data, out) == 1
    errors = _error_lines(capsys)
    assert len(errors) == 1 and "no space left on the device" in errors[0] and str(out) in errors[0]
    filler.unlink()
    assert _score(data, out) == 0
    assert _files(out) == _files(ref)


def test_read_only_finished_run_is_a_no_op(finished, small_disk, capsys):
    data, ref = finished
    out = small_disk / "run"
    shutil.copytree(ref, out)
    (out / ".lock").unlink()  # a read-only copy without a lock file
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    assert _score(data, out) == 0
    # one line whatever the temporary path's length or the terminal's width
    assert f"{out} is already complete: nothing to do." in capsys.readouterr().out.splitlines()
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)


def test_the_rerun_of_a_finished_run_opens_no_reconstruction(finished, tmp_path):
    """A rerun costs what its records cost: the journal and run.json are read, the reconstructions are checked
    by size and modification time (an audit hook on `open` sees none of them opened)."""
    from tests.recon_score.test_run_plan import opened_files

    data, out = _copy(finished, tmp_path)
    with opened_files() as opened:
        assert _score(data, out) == 0
    assert any(p.endswith("rank-0.jsonl") for p in opened)  # the hook sees the run's opens
    assert not [p for p in opened if "/reconstructions/" in p or p.endswith("scores.jsonl")]
