"""Targets are checked before anything is written, for every command that writes (recon_score.run_engine,
docs/runs.md, docs/bad-inputs.md): a folder of another kind of run, a run's own file (also through a symlink,
`with_suffix` or another letter case), a full, size-limited or read-only disk, and run files that are FIFOs,
devices or too large. Each case: exit 1, one `error:` line, the target folder's files unchanged (sha256)."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from eval.cli import main
from recon_score.run_engine import RunLock
from tests.describer.test_pairs import _fake_run
from tests.recon_score.test_run_folder import _tmpfs
from tests.smoke_cli import correlate_ranking, smoke

REPO = Path(__file__).resolve().parents[2]
RANKING = REPO / "preference_data" / "examples" / "ranking_example.jsonl"
CAPTIONS = REPO / "recon_score" / "sample" / "captions.jsonl"


def _sums(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` (links followed only when they point at regular files)."""
    found = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            found[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_symlink():
            found[str(p.relative_to(folder))] = "-> " + os.readlink(p)
    return found


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def score_run(tmp_path_factory) -> Path:
    """A finished 2-row smoke score run, copied by each test that aims a command at it."""
    out = tmp_path_factory.mktemp("score") / "run"
    assert main(smoke("score", out, "--limit", "2")) == 0
    return out


@pytest.fixture
def run(score_run, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(score_run, out, symlinks=True)
    return out


def _metrics_add(run: Path, out: Path) -> list[str]:
    return ["metrics", "add", str(run), "--metrics", "bleu1", "--references", str(REPO / "recon_score" /
            "sample" / "references.json"), "--out", str(out)]  # fmt: skip


def _sweep(tmp_path: Path, out: Path) -> list[str]:
    (tmp_path / "release").mkdir(exist_ok=True)
    (tmp_path / "PatternNet").mkdir(exist_ok=True)
    return ["study", "compodiff-sweep", "--root", str(tmp_path / "PatternNet"), "--encoder", "smoke:open-clip",
            "--checkpoint", str(tmp_path / "release"), "--device", "cpu", "--out", str(out)]  # fmt: skip


WRITERS = {
    "pairs": lambda tmp, out: ["pairs", str(_fake_run(tmp / "src")), "--policy", "all", "--out", str(out)],
    "correlate": lambda tmp, out: correlate_ranking(RANKING, "clipscore", out, "--bootstrap", "10"),
    "compodiff-sweep": _sweep,
    "study n-sweep": lambda tmp, out: [
        "study",
        "n-sweep",
        "--run",
        f"a={_fake_run(tmp / 'src')}",
        "--out",
        str(out),
    ],
    "generate": lambda tmp, out: [
        "generate",
        "paraphrase",
        "--captions",
        str(CAPTIONS),
        "--model",
        "smoke:qwen3-text",
        "--device",
        "cpu",
        "--out",
        str(out),
    ],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_folder_of_another_kind_is_refused_untouched(command, run, tmp_path, capsys):
    before = _sums(run)
    assert main(WRITERS[command](tmp_path, run)) == 1
    errors = _errors(capsys)
    assert len(errors) == 1 and "is a `score` run folder" in errors[0] and str(run) in errors[0]
    assert _sums(run) == before
    # also any folder inside the run's own files (its journal, its reconstructions)
    assert main(WRITERS[command](tmp_path, run / "journal")) == 1
    assert "is a file of the score run" in _errors(capsys)[0]
    assert _sums(run) == before


@pytest.mark.parametrize(
    "target",
    ["journal/rank-0.jsonl", "run.jsonl", "scores.jsonl", "Scores.jsonl", "journal/invocations.jsonl"],
)
def test_metrics_add_never_writes_a_file_of_the_run(target, run, capsys):
    """`run.jsonl` would put its record on RUN/run.json (with_suffix); `Scores.jsonl` is scores.jsonl on a
    case-insensitive disk."""
    before = _sums(run)
    assert main(_metrics_add(run, run / target)) == 1
    errors = _errors(capsys)
    assert len(errors) == 1 and "writing it would destroy the run's results" in errors[0]
    assert _sums(run) == before


def test_a_symlink_to_a_run_file_is_refused(run, tmp_path, capsys):
    before = _sums(run)
    (tmp_path / "link.jsonl").symlink_to(run / "scores.jsonl")
    (tmp_path / "linked").symlink_to(run / "journal")
    assert main(_metrics_add(run, tmp_path / "link.jsonl")) == 1
    assert main(["report", str(run), "--out", str(tmp_path / "linked" / "rank-0.jsonl")]) == 1
    assert main(["report", str(run), "--out", str(tmp_path / "link.jsonl")]) == 1
    assert len(_errors(capsys)) == 3
    assert _sums(run) == before


def test_a_metrics_tables_own_files_are_refused_to_every_other_writer(run, capsys):
    """A `metrics add` table keeps its record (TABLE.json), journal and lock beside it: no other command writes
    over them (also in another letter case or inside the journal); its own rerun still writes the table."""
    table = run / "scores.metrics.jsonl"
    assert main(_metrics_add(run, table)) == 0
    before = _sums(run)
    journal = run / ".scores.metrics.jsonl.journal"
    targets = [table, run / "scores.metrics.json", run / "Scores.Metrics.jsonl", journal / "rank-0.jsonl",
               run / ".scores.metrics.jsonl.lock"]  # fmt: skip
    for target in targets:
        assert main(["report", str(run), "--out", str(target)]) == 1, target
        assert _errors(capsys) == [
            f"error: --out {target} is a file of the metrics table {table} (the table, its record or journal); "
            "writing it would destroy its results: choose another path"
        ]
    assert main(smoke("score", journal, "--limit", "1")) == 1
    assert "is a file of the metrics table" in _errors(capsys)[0]
    assert _sums(run) == before
    assert main(_metrics_add(run, table)) == 0 and _sums(run) == before  # its own rerun: a no-op


def test_a_metrics_table_named_like_its_record_is_refused(run, tmp_path, capsys):
    assert main(_metrics_add(run, tmp_path / "m.json")) == 1
    assert "ends in .json" in _errors(capsys)[0]


@pytest.fixture
def read_only(tmp_path):
    mnt = tmp_path / "ro"
    _tmpfs(mnt, "1m")
    (mnt / "kept.txt").write_text("the user's file")
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    mnt = tmp_path / "tiny"
    _tmpfs(mnt, "12k")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_read_only_disk_is_one_line_for_every_writer(run, read_only, tmp_path, capsys):
    before = _sums(read_only)
    argvs = {
        "score": smoke("score", read_only / "new", "--limit", "1"),
        "pairs": WRITERS["pairs"](tmp_path, read_only / "new"),
        "correlate": WRITERS["correlate"](tmp_path, read_only / "new"),
        "report": ["report", str(run), "--out", str(read_only / "r.html")],
        "report, new folder": ["report", str(run), "--out", str(read_only / "sub" / "r.html")],
        "metrics add": _metrics_add(run, read_only / "m.jsonl"),
    }
    for name, argv in argvs.items():
        assert main(argv) == 1, name
        errors = _errors(capsys)
        assert len(errors) == 1 and errors[0].startswith("error: cannot write in "), (name, errors)
        assert "read-only" in errors[0] and str(read_only) in errors[0], (name, errors)
    assert _sums(read_only) == before


@pytest.mark.parametrize("where", ["journal", "overwrite"])
def test_a_forbidden_write_in_the_run_folder_is_one_line(where, run, monkeypatch, capsys):
    """Permission denied (a folder the user may not write in; root is not refused, so the refusal is the kernel's
    error raised where the Run writes) is one line naming the folder, as a read-only disk is: at the journal's
    append, and at --overwrite's removal, where rmtree names the refused file relative to its folder."""
    import errno

    from recon_score import run_engine

    def refuse(path, *args, **kwargs):
        raise PermissionError(
            errno.EACCES, "Permission denied", str(path) if where == "journal" else "rank-0.jsonl"
        )

    if where == "journal":
        monkeypatch.setattr(run_engine, "_append_lines", refuse)
        argv, folder = (
            smoke("score", run, "--limit", "1"),
            run / "journal",
        )  # another --limit: work to journal
    else:
        monkeypatch.setattr(run_engine.shutil, "rmtree", refuse)
        argv, folder = smoke("score", run, "--limit", "2", "--overwrite"), run
    assert main(argv) == 1
    assert _errors(capsys) == [f"error: cannot write in {folder}: Permission denied; choose another --out"]


def test_a_full_disk_is_one_line_and_a_new_folder_is_not_left_behind(run, tiny_disk, tmp_path, capsys):
    """12 KB: the record fits, a pair's PNG does not."""
    out = tiny_disk / "pairs"
    assert main(WRITERS["pairs"](tmp_path, out)) == 1
    errors = _errors(capsys)
    assert len(errors) == 1 and "no space left on the device" in errors[0] and str(out) in errors[0]
    assert not out.exists()
    assert main(["report", str(run), "--out", str(tiny_disk / "r.html")]) == 1
    assert "no space left on the device" in _errors(capsys)[0]
    assert list(tiny_disk.iterdir()) == []


def test_final_files_refused_midway_leave_the_previous_ones_as_they_were(
    tmp_path, sample_dir, monkeypatch, capsys
):
    """An evaluate rerun with other captions whose second final file meets a full disk (at its fsync, as on a
    quota or a network disk): every final file is staged before any replaces its predecessor, so the folder keeps
    the first run's files beside its run.json."""
    import errno

    from tests.recon_score.test_rerun_restores import _evaluate

    argv, out = _evaluate(tmp_path, sample_dir), tmp_path / "run"
    assert main(argv(out)) == 0
    before = _sums(out)
    (tmp_path / "caps.csv").write_text("image,caption\n1.tif,a field 1 .\n2.tif,a long road by the river\n")
    synced, fsync = [], os.fsync

    def full_at_the_second(fd):
        synced.append(fd)
        if len(synced) == 2:  # per_image.jsonl is written, summary.csv is not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", full_at_the_second)
    assert main(argv(out)) == 1
    assert f"error: cannot write in {out}: no space left on the device" in _errors(capsys)[0]
    assert _sums(out) == before


def test_a_file_size_limit_is_one_line(run, tmp_path, capsys):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
    try:
        rc = main(["report", str(run), "--out", str(tmp_path / "r.html")])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert rc == 1
    assert _errors(capsys) == [f"error: cannot write in {tmp_path}: file size limit reached; free space and rerun "
                               "the same command"]  # fmt: skip
    assert not (tmp_path / "r.html").exists()


def test_run_files_that_are_fifos_devices_or_too_large_are_named(run, tmp_path, capsys):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert main(["pairs", str(fifo), "--prompt", "x", "--out", str(tmp_path / "p")]) == 1
    assert f"{fifo}: candidates table is a FIFO (named pipe), not a regular file" in capsys.readouterr().err
    assert main(["pairs", "/dev/zero", "--prompt", "x", "--out", str(tmp_path / "p")]) == 1
    assert "/dev/zero: candidates table is a device, not a regular file" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
    (run / "scores.jsonl").unlink()
    (run / "scores.jsonl").symlink_to("/dev/zero")
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    assert _errors(capsys) == [f"error: {run / 'scores.jsonl'}: file is a device, not a regular file"]
    (run / "scores.jsonl").unlink()
    with open(run / "scores.jsonl", "wb") as f:
        f.truncate((2 << 30) + 1)  # sparse: over the bound without using the disk
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    assert "2,147,483,649 bytes, over the 2,147,483,648-byte limit" in _errors(capsys)[0]
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command", ["pairs", "study n-sweep", "compodiff-sweep"])
def test_a_held_lock_refuses_before_any_work(command, tmp_path, capsys):
    """The Run checks and locks the folder before the command computes: a study's reads and a sweep's points
    (each a retrieve run under OUT/points/) never start while another process holds OUT."""
    out = tmp_path / "out"
    out.mkdir()
    with RunLock(out):
        assert main(WRITERS[command](tmp_path, out)) == 1
    errors = _errors(capsys)
    assert len(errors) == 1 and "is in use by another process" in errors[0], errors
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_a_journal_of_an_older_layout_gets_a_one_line_rerun_message(run, capsys):
    """No compatibility code: a journal of an older layout is a changed setting (the layout is one of every
    run's settings), refused in one line naming both layouts, not silently recomputed or mixed."""
    import json

    from recon_score.run_engine import JOURNAL_LAYOUT

    journal = run / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    head = json.loads(lines[0])
    head["header"]["settings"]["journal_layout"] = JOURNAL_LAYOUT - 1
    head["fingerprint"] = "0" * 16
    journal.write_text(json.dumps(head) + "\n" + "".join(lines[1:]))
    before = _sums(run)
    assert main(smoke("score", run, "--limit", "2")) == 1
    assert _errors(capsys) == [
        f"error: {run} was started with a different configuration: journal_layout: {JOURNAL_LAYOUT - 1} -> "
        f"{JOURNAL_LAYOUT}. Choose another --out, or pass --overwrite to start again."
    ]
    assert _sums(run) == before


def test_metrics_add_writes_its_record_through_the_run_writer(run, tmp_path, capsys):
    """`metrics add` is a file-target run: OUT.json has run.json's shape (kind, `meaningless` from the run it
    read, `upstream`), written by the one record writer."""
    import json

    assert main(_metrics_add(run, tmp_path / "m.jsonl")) == 0
    record = json.loads((tmp_path / "m.json").read_text())
    score_record = json.loads((run / "run.json").read_text())
    assert record["command"] == "metrics add" and record["upstream"] == [str(run.resolve())]
    assert record["meaningless"] is True  # bleu1 is a real metric; the smoke score run it read is not
    assert {"started", "finished", "provenance"} <= record.keys() and "argv" in record["provenance"]
    assert score_record["meaningless"] is True and set(score_record) >= {"command", "meaningless", "upstream"}


def test_an_older_run_read_as_input_is_refused_with_one_line(run, tmp_path, capsys):
    """A run.json written before records said `meaningless` would silently lose the smoke banner downstream:
    report, studies, pairs and metrics add refuse it (exit 1, one line saying to rerun), the folder untouched."""
    import json

    def old(folder: Path) -> Path:
        record = json.loads((folder / "run.json").read_text())
        del record["meaningless"]
        (folder / "run.json").write_text(json.dumps(record))
        return folder

    score_run, describe_run = old(run), old(_fake_run(tmp_path / "d"))
    before = _sums(score_run), _sums(describe_run)
    commands = {
        "report": ["report", str(score_run), "--out", str(tmp_path / "r.html")],
        "metrics add": _metrics_add(score_run, tmp_path / "m.jsonl"),
        "pairs": ["pairs", str(describe_run), "--prompt", "x", "--out", str(tmp_path / "p")],
        "study": ["study", "n-sweep", "--run", f"x={describe_run}", "--out", str(tmp_path / "st")],
    }
    for name, argv in commands.items():
        assert main(argv) == 1, name
        errors = _errors(capsys)
        assert len(errors) == 1 and "written by an older reconscore" in errors[0], (name, errors)
        assert "rerun the command that made it" in errors[0]
    assert (_sums(score_run), _sums(describe_run)) == before
    assert not any((tmp_path / n).exists() for n in ("r.html", "m.jsonl", "m.json", "p", "st"))


def test_a_runs_outputs_are_read_through_their_declared_readers(run, tmp_path):
    """run_outputs declares each kind's files once (the engine guards them) and reads them for other commands:
    a score run's rows in order, a missing file named, a bad line named file:line."""
    import json

    from recon_score.errors import ReconScoreError
    from recon_score.run_engine import RUN_FILES
    from recon_score.run_outputs import CANDIDATES, KIND_OUTPUTS, SCORES, read_rows
    from recon_score.textfiles import TextFileError

    assert KIND_OUTPUTS["score"][0] == SCORES and SCORES not in RUN_FILES
    lines = (run / SCORES).read_text().splitlines()
    assert read_rows(run, SCORES) == [json.loads(x) for x in lines] and len(lines) == 2
    with pytest.raises(ReconScoreError, match=r"candidates\.jsonl not found"):
        read_rows(run, CANDIDATES)
    (run / SCORES).write_text(lines[0] + "\n[1]\n")
    with pytest.raises(TextFileError, match=r"scores\.jsonl:2"):
        read_rows(run, SCORES)


def _special_files(folder: Path, suffix: str) -> dict[str, Path]:
    """A private character device (/dev/null's numbers, made with mknod in the test's own folder, never the real
    /dev), a FIFO and a symlink to the process's stdout: what a file writer must never replace."""
    folder.mkdir()
    made = {}
    try:
        os.mknod(folder / f"chardev{suffix}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made["a character device"] = folder / f"chardev{suffix}"
    except PermissionError:  # not root: the FIFO and the symlink are still tested
        pass
    os.mkfifo(folder / f"fifo{suffix}")
    made["a FIFO (named pipe)"] = folder / f"fifo{suffix}"
    (folder / f"link{suffix}").symlink_to("/proc/self/fd/1")
    made["a symlink"] = folder / f"link{suffix}"
    return made


def _entries(folder: Path) -> list[tuple]:
    """Every entry of `folder` as lstat sees it: name, mode, device numbers, link target."""
    return [
        (p.name, os.lstat(p).st_mode, os.lstat(p).st_rdev, os.readlink(p) if p.is_symlink() else None)
        for p in sorted(folder.iterdir())
    ]


def _writer_argv(writer: str, run: Path, target: Path, tmp_path: Path) -> tuple[list[str], str]:
    """The command line of one file writer aimed at `target`, and the name its error gives the target."""
    if writer == "report":
        return ["report", str(run), "--out", str(target)], "--out"
    if writer == "metrics add":
        return _metrics_add(run, target), "--out"
    src = tmp_path / "release.pkl"
    src.write_bytes(b"never read: the target is refused first")
    return ["models", "convert", "magiclens", str(src), str(target)], "DST"


@pytest.mark.parametrize("writer", ["report", "metrics add", "models convert"])
def test_file_writers_never_replace_what_is_not_a_regular_file(writer, run, tmp_path, capsys):
    folder = tmp_path / "targets"
    specials = _special_files(folder, ".safetensors" if writer == "models convert" else ".out")
    before = _entries(folder)
    for kind, target in specials.items():
        argv, name = _writer_argv(writer, run, target, tmp_path)
        assert main(argv) == 1, kind
        assert _errors(capsys) == [
            f"error: {name} {target} is {kind}, not a regular file; choose another path"
        ]
    assert _entries(folder) == before  # nothing replaced, and no record written beside any of them


@pytest.mark.parametrize("output", ["reconstructions", "scores.jsonl", "run.json"])
def test_an_output_replaced_by_a_folder_is_named_in_one_line(output, run, capsys):
    target = run / output
    if output == "reconstructions":
        target = sorted(target.iterdir())[0]
    target.unlink()
    target.mkdir()
    (target / "keep.txt").write_text("the user's")
    assert main(smoke("score", run, "--limit", "2")) == 1
    assert _errors(capsys) == [f"error: {target} is a folder, not a regular file, where a file is written; move "
                               "it away and rerun"]  # fmt: skip
    assert (target / "keep.txt").read_text() == "the user's"


def test_report_on_a_run_still_being_written_says_so(run, tmp_path, capsys):
    """run.json is written last: a folder with a journal and no record is a run under way (or stopped), not
    "not a reconscore run folder"."""
    (run / "run.json").unlink()
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    (line,) = _errors(capsys)
    assert "has no run.json yet: the run is still being written, or stopped before it finished" in line
    assert "not a reconscore run folder" not in line and not (tmp_path / "r.html").exists()
    assert "(its .lock and journal are there)" in line
    (run / ".lock").unlink()
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    assert "(its journal is there)" in _errors(capsys)[0]
    bare = tmp_path / "bare"
    bare.mkdir()
    assert main(["report", str(bare), "--out", str(tmp_path / "r.html")]) == 1
    assert "has no run.json: not a reconscore run folder" in _errors(capsys)[0]


def test_metrics_add_on_scores_linked_to_a_device_says_what_it_is(run, tmp_path, capsys):
    """A scores.jsonl that is a link to /dev/zero is there (never opened: only its kind is read), so "not found"
    would mislead."""
    (run / "scores.jsonl").unlink()
    (run / "scores.jsonl").symlink_to("/dev/zero")
    assert main(_metrics_add(run, tmp_path / "m.jsonl")) == 1
    (line,) = _errors(capsys)
    assert f"{run / 'scores.jsonl'} is a character device, not a regular file" in line, line
    assert "not found" not in line and not (tmp_path / "m.jsonl").exists()


def test_a_full_disk_promises_a_resume_only_where_a_journal_keeps_the_work(tmp_path):
    """A run computed in one go (annotate collect, correlate, ...) has no journal: rerunning recomputes it all."""
    import errno

    from recon_score.errors import ReconScoreError
    from recon_score.run_engine import Item, RunFolder, RunSpec, Stage

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    said = {}
    for kind, spec in (
        ("annotate-collect", RunSpec({}, outputs=full)),
        ("score", RunSpec({}, items=[Item(0, {"x": 1})], stages=[Stage(full)])),
    ):
        with pytest.raises(ReconScoreError) as err, RunFolder(kind, tmp_path / kind) as run:
            run.run(spec)
        said[kind] = str(err.value)
    assert said["annotate-collect"].endswith(
        "no space left on the device; free space and rerun the same command"
    )
    assert said["score"].endswith("free space and rerun the same command: the run resumes where it stopped")
