"""The one resumable-run engine: every writing command hands `RunFolder.run` a `RunSpec` and the Run owns the
rest of the lifecycle; the folder's layout and guarantees are in docs/runs.md.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recon_score.atomic_io import (
    DISK_FULL,
    WRITE_REFUSED,
    WriteError,
    dumps_line,
    file_sha256,
    read_jsonl,
    sha256_json,
    stage_bytes,
    write_error,
    write_json_atomic,
)
from recon_score.errors import InputError, ReconScoreError, ResumeMismatchError
from recon_score.progress import Progress
from recon_score.run_outputs import EXPLAIN, KIND_BY_RECORD_ONLY, KIND_OUTPUTS, RECONSTRUCTIONS, RECORD
from recon_score.runtime import provenance, utc_now
from recon_score.textfiles import entry_kind, read_json

log = logging.getLogger(__name__)

# the journal records' shape, one of every run's settings: a journal of another layout (an older or newer
# reconscore's) is refused as a changed setting, naming both layouts, never misread
JOURNAL_LAYOUT = 4
RUN_FILES = (RECORD, ".lock", "journal")  # every kind's own files besides its outputs


def _is_journal_line(rec: object) -> bool:  # a header or an item's record
    return isinstance(rec, dict) and ("row" in rec or "fingerprint" in rec)


def _is_log_line(rec: object) -> bool:
    return isinstance(rec, dict) and rec.get("event") in ("start", "end")


def _append_lines(path: Path, records: Iterable[dict]) -> None:
    """Append each record as one line, then fsync. A short write on a nearly full disk is retried, so a failure
    leaves at most a torn *last* line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for rec in records:
            view = memoryview((dumps_line(rec) + "\n").encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def diff_settings(old: dict | None, new: dict | None) -> list[str]:
    """`key: old -> new` for every differing leaf setting (dotted keys, sorted); [] if either is unknown."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return []

    def flat(d: dict, prefix: str = "") -> dict[str, object]:
        out: dict[str, object] = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            out.update(flat(v, key + ".") if isinstance(v, dict) and v else {key: v})
        return out

    a, b = flat(old), flat(new)
    missing = object()
    return [
        f"{k}: {dumps_line(a.get(k)) if k in a else '(unset)'} -> {dumps_line(b.get(k)) if k in b else '(unset)'}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k, missing) != b.get(k, missing)
    ]


class RunLock:
    """Exclusive fcntl lock on `out/.lock`, taken by process 0 (the kernel releases it on SIGKILL). A folder that
    refuses the lock file refuses every other write too: no lock is needed there.

    Raises:
        ReconScoreError: another process holds it (a second command on the same --out), or `.lock` is not a file.
    """

    def __init__(self, out: Path, *, name: str = ".lock"):
        self.path, self._fd = out / name, -1

    def __enter__(self) -> RunLock:
        import fcntl

        if self.path.exists() and not self.path.is_file():
            raise ReconScoreError(f"{self.path} is not a file: it is where the run's lock lives; remove it")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            return self  # a read-only folder: nothing here can be written, by this process or another
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ReconScoreError(
                f"{self.path.parent} is in use by another process (pid {holder}); wait for it to finish "
                "or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing releases the flock
            self._fd = -1


def folder_kind(out: Path) -> str | None:
    """The kind of run folder `out` is, or None: run.json's `command`, else its journal headers', else the kind
    whose final files it holds."""
    info = read_record(out / RECORD)
    if isinstance(info.get("command"), str):
        return info["command"]  # also `study`, `correlate`, ...: never written into by a run of another kind
    for path in sorted((out / "journal").glob("*rank-*.jsonl")):
        try:
            if not path.is_file():  # a FIFO would block the open
                continue
            with path.open("rb") as f:
                head = json.loads(f.readline(1 << 20))
            kind = head["header"]["kind"]
        except (OSError, ValueError, RecursionError, KeyError, TypeError):
            continue
        if isinstance(kind, str) and kind in KIND_OUTPUTS:
            return kind
    for kind, names in KIND_OUTPUTS.items():
        if kind not in KIND_BY_RECORD_ONLY and (out / names[0]).is_file():
            return kind
    return None


def load_record(folder: Path, *, missing_ok: bool = False) -> dict:
    """The record of a run read as input (with `missing_ok`, {} for a bare results table).

    Raises:
        ReconScoreError: there is none, it is unreadable, or an older reconscore wrote it (no `meaningless`).
    """
    path = Path(folder) / RECORD
    if not os.path.lexists(path):
        if missing_ok:
            return {}
        started = [n for n in (".lock", "journal") if os.path.lexists(Path(folder) / n)]
        if started:  # run.json is written last: a run under way, or one stopped before it finished
            raise ReconScoreError(
                f"{folder} has no run.json yet: the run is still being written, or stopped before it finished "
                f"(its {' and '.join(started)} {'are' if len(started) > 1 else 'is'} there); let it finish, or "
                "rerun its command to resume it"
            )
        raise ReconScoreError(f"{folder} has no run.json: not a reconscore run folder")
    record = read_json(path, expect=dict, what=RECORD)
    if "meaningless" not in record:
        raise ReconScoreError(
            f"{folder} was written by an older reconscore (its run.json has no `meaningless` field): rerun "
            "the command that made it"
        )
    return record


def read_record(path: Path) -> dict:
    """A run's record file (RUN/run.json, OUT.json), or {} when there is no readable JSON object there."""
    try:
        info = read_json(path, expect=dict, what="run record")
    except (InputError, OSError, RecursionError):
        return {}
    return info if isinstance(info, dict) else {}


def _table_files(folder: Path) -> dict[str, Path]:
    """The files `metrics add` tables keep in `folder`, each found by its journal `.TABLE.journal/`: casefolded name
    (the table, its record TABLE.json, its journal and lock) -> the table."""
    found = {}
    for journal in folder.glob(".?*.journal"):
        table = folder / journal.name[1 : -len(".journal")]
        for name in (table.name, table.with_suffix(".json").name, journal.name, f".{table.name}.lock"):
            found[name.casefold()] = table
    return found


def refuse_run_file(target: Path, *, what: str = "--out", table: Path | None = None) -> None:
    """Refuse `target` when it is, or resolves to (a symlink, another letter case), a run folder's own file or a
    `metrics add` table's (other than `table`'s, the one being written).

    Raises:
        ReconScoreError: naming the run folder or table and the file.
    """
    mine = {Path(os.path.abspath(table)), Path(os.path.realpath(table))} if table is not None else set()
    for path in {Path(os.path.abspath(target)), Path(os.path.realpath(target))}:
        for folder in path.parents:
            of = _table_files(folder).get(path.relative_to(folder).parts[0].casefold())
            if of is not None and of not in mine:
                raise ReconScoreError(
                    f"{what} {target} is a file of the metrics table {of} (the table, its record or journal); "
                    "writing it would destroy its results: choose another path"
                )
            kind = folder_kind(folder)
            if kind is None:
                continue
            own = {n.casefold() for n in (*RUN_FILES, *KIND_OUTPUTS.get(kind, ()))}
            if path.relative_to(folder).parts[0].casefold() in own:
                raise ReconScoreError(
                    f"{what} {target} is a file of the {kind} run in {folder}; writing it would destroy the "
                    "run's results: choose another path"
                )
            break


def check_file_target(
    target: Path, *, inputs: Sequence[Path] = (), what: str = "--out", table: Path | None = None
) -> None:
    """Refuse a one-file target that is a folder, not a regular file, a run's own file (`table`'s are allowed: the
    `metrics add` table being written), or one of `inputs`.

    Raises:
        ReconScoreError: naming the target and why.
    """
    kind = entry_kind(target)
    if kind == "a folder":
        raise ReconScoreError(f"{what} {target} is a folder; give a file path")
    if kind is not None:  # os.replace would swap the device, FIFO or link itself for the result
        raise ReconScoreError(f"{what} {target} is {kind}, not a regular file; choose another path")
    refuse_run_file(target, what=what, table=table)
    real = os.path.realpath(target)
    for src in inputs:
        if os.path.realpath(src) == real or (os.path.exists(target) and os.path.samefile(src, target)):
            raise ReconScoreError(f"{what} {target} is the input {src}: choose another path")


def check_run_target(kind: str, out: Path) -> None:
    """`out` must be a folder (or not exist), of no other kind of run, and not inside another run's own files.

    Raises:
        ReconScoreError: naming the folder and what it is.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ReconScoreError(f"--out {out} is a file, not a folder; choose another --out (a run folder)")
    refuse_run_file(out)
    journal = out / "journal"
    if journal.exists() and not journal.is_dir():
        raise ReconScoreError(
            f"{journal} is a file, not the run's journal folder; move it away or choose another --out"
        )
    found = folder_kind(out)
    if found is not None and found != kind:
        raise ReconScoreError(
            f"{out} is a `{found}` run folder; `{kind}` will not write into it (its results would be lost): "
            "choose another --out"
        )


# what a rerun does for an item whose output files are gone or replaced, by the folder they live in
_REDONE = {RECONSTRUCTIONS: "rendered again", EXPLAIN: "explained again"}


def _remove(p: Path) -> None:
    """`p` gone; a refusal is one line naming the folder it is in (rmtree's error names a file relative to it)."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    except OSError as err:
        if err.errno not in WRITE_REFUSED:
            raise
        raise WriteError(p.parent, err.errno) from err


# -- the spec a command hands the Run ------------------------------------------------------------------------------
Computed = tuple[dict, dict[str, bytes]]  # an item's result record and its files (run-relative path -> bytes)


@dataclass
class Item:
    """One unit of work. Its key hashes `inputs` (and its chunk's keys): a changed input is recomputed."""

    id: object  # the journal's `row`: a row index, a method or a request id
    inputs: dict
    name: str = ""  # how a message names it; "<unit> <id>" by default
    key: str = ""  # set by the Run
    results: dict = field(default_factory=dict)  # set by the Run: the earlier stages' results, by stage name


@dataclass
class Stage:
    """One journaled step. `compute(batch, todo)` returns one Computed per item of `todo`: per chunk as composed by
    position (`batch=None`), or per N unfinished items (`batch=N`, then `batch` is `todo`)."""

    compute: Callable[[list[Item], list[Item]], list[Computed]]
    name: str = ""  # the journal's prefix (journal/NAME-rank-K.jsonl); "" for a command's one stage
    batch: int | None = None
    items: Callable[[dict], list[Item]] | None = None  # built from the earlier stages' results by stage name
    ended: Callable[[], None] | None = None  # after the stage's work in a phase (unload its model)


@dataclass
class RunSpec:
    """Everything a command hands `RunFolder.run`: the Run owns the rest of the lifecycle (docs/runs.md)."""

    settings: dict  # what every result depends on besides the items: hashed into the fingerprint
    items: list[Item] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)  # none: a run computed in one go by `outputs`
    outputs: Callable[[RunResult], dict[str, bytes]] | None = None  # the final files, from the records
    record: Callable[[RunResult], dict] | None = None  # run.json's fields of the command
    prepare: Callable[[list[Item]], None] | None = None  # before the first compute, with this process's to-do
    weight: Callable[[Item], int] | None = None  # the bar's units per item (score --explain: its renders); 1
    chunk: int = 1  # consecutive items per chunk: chunk j goes to process j mod the number of processes
    phase: int | None = None  # chunks per phase: each phase runs every stage (describe's two models)
    retry_errors: bool = False  # a journaled result with an `error` is computed again
    unit: str = "row"  # how messages count items
    progress: str | None = None  # the bar's unit (None: no bar)
    depends: object = None  # what the outputs read besides the records (score: the input's own columns)
    upstream: Sequence[Path | str] = ()  # the run folders it read
    # folders staged in the run folder, renamed into place (pairs' dataset)
    folders: dict[str, Path] = field(default_factory=dict)


@dataclass
class RunResult:
    """Every stage's journaled records, and what this invocation did."""

    items: dict[str, list[Item]] = field(default_factory=dict)  # by stage name, in plan order
    # by stage name: item id -> journal record (only those whose key matches and are not to redo)
    records: dict[str, dict] = field(default_factory=dict)
    complete: bool = False  # a finished run rerun: nothing computed, nothing written
    resumed: int = 0  # items of the last stage an earlier invocation finished, when this one worked
    changed: dict = field(default_factory=dict)  # item id -> the inputs that changed since it was journaled
    repairs: list[str] = field(default_factory=list)  # what this invocation rebuilt from the journal
    previous: dict = field(default_factory=dict)  # the run.json found before this invocation
    info: dict = field(default_factory=dict)  # the run.json it wrote (process 0), or found finished
    inv: int = -1

    def results(self, stage: str = "") -> list[dict]:
        """Every item's result in order; ReconScoreError when one has none after every process finished."""
        out = []
        for item in self.items[stage]:
            rec = self.records[stage].get(item.id)
            if rec is None or rec.get("key") != item.key:
                raise ReconScoreError(
                    f"{item.name} has no result after all processes finished; rerun the same command to "
                    "complete it"
                )
            out.append(rec["result"])
        return out


def _stat(path: Path) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _write_files(out: Path, files: dict[str, bytes]) -> dict[str, list]:
    """Every file staged, then all moved into place: a write refused midway (a full disk) leaves the files as they
    were. Returns the journal's [sha256, size, mtime_ns] of each. A non-folder where a file's folder belongs goes:
    the files it held are the ones being written again."""
    staged: list[tuple[Path, Path]] = []
    try:
        for rel, data in files.items():
            top = out / Path(rel).parts[0]
            if top != out / rel and not top.is_dir() and os.path.lexists(top):
                top.unlink()
            staged.append((stage_bytes(out / rel, data), out / rel))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
    return {rel: [hashlib.sha256(data).hexdigest(), *_stat(out / rel)] for rel, data in files.items()}


def _sweep_temporaries(out: Path, files: dict[str, bytes]) -> None:
    """Temporaries of these files left by a write killed midway go: the lock is ours."""
    for rel in files:
        for stale in (out / rel).parent.glob(f".{glob.escape(Path(rel).name)}.????????.tmp"):
            if stale.is_file():  # never a folder
                stale.unlink(missing_ok=True)


def _intact(out: Path, rel: str, kept: list) -> bool:
    """Whether a journaled file is as written: by size and mtime (not opened), else by content (after a `touch`)."""
    try:
        if not stat.S_ISREG(os.lstat(out / rel).st_mode):
            return False
        return _stat(out / rel) == kept[1:] or file_sha256(out / rel) == kept[0]
    except OSError:
        return False


def _last_invocation(record: dict) -> object:
    """The number of the last invocation a run.json lists (None when it lists none it can read)."""
    invocations = record.get("invocations")
    last = invocations[-1] if isinstance(invocations, list) and invocations else None
    return last.get("invocation") if isinstance(last, dict) else None


def _item_keys(items: list[Item], chunk: int) -> None:
    """Each item's key hashes its inputs, and its chunk's keys (batch composition changes a batched kernel's floats):
    a journaled result is reused only for exactly these."""
    own = [sha256_json({"kind": "resume", **item.inputs})[:24] for item in items]
    for j, item in enumerate(items):
        batch = {"item": own[j], "batch": own[j - j % chunk : j - j % chunk + chunk]}
        item.key = own[j] if chunk <= 1 else sha256_json({"kind": "resume", **batch})[:24]


def _prefix(stage: Stage) -> str:
    """NAME-rank-K.jsonl; a command's one unnamed stage writes rank-K.jsonl."""
    return f"{stage.name}-" if stage.name else ""


class RunFolder:
    """One run folder of one kind, opened by every process (`state`: accelerate's PartialState, or None);
    `run(spec)` is one invocation."""

    def __init__(
        self,
        kind: str,
        out: Path,
        *,
        state=None,
        overwrite: bool = False,
        argv: Sequence[str] = (),
        file_of: Sequence[Path] | None = None,
    ):
        """`file_of`: `out` is one file made from these inputs (`metrics add`), its journal and lock hidden beside
        it and its record OUT.json."""
        self.target, self.file_of = Path(out), file_of
        hidden = f".{self.target.name}." if file_of is not None else ""
        self.kind, self.state, self.overwrite = kind, state, overwrite
        self.out = self.target.parent if file_of is not None else self.target
        self.argv = list(argv) or list(sys.argv)
        self.rank = state.process_index if state is not None else 0
        self.world = state.num_processes if state is not None else 1
        self.is_main = state is None or state.is_main_process
        self.journal_dir = self.out / f"{hidden}journal"
        self.record_path = self.target.with_suffix(".json") if hidden else self.out / RECORD
        self.log_path = self.journal_dir / "invocations.jsonl"
        # how a run starts again from nothing (a table of `metrics add` has no --overwrite: its journal goes)
        self.restart = f"remove {self.journal_dir}" if file_of is not None else "pass --overwrite"
        self.started = utc_now()
        self._begun, self._created, self.spec = False, [], None
        self._lock = RunLock(self.out, name=f"{hidden}lock" if hidden else ".lock")

    # -- opening: nothing is created that a failed start would leave behind ---------------------------------
    def __enter__(self) -> RunFolder:
        if self.file_of is None:
            check_run_target(self.kind, self.out)
        else:  # RUN/scores.jsonl, RUN/journal/..., a link to them; RUN/run.jsonl would write RUN/run.json
            check_file_target(self.target, inputs=self.file_of, table=self.target)
            check_file_target(self.record_path, inputs=self.file_of, what="--out's record", table=self.target)
        self._lock_existed = self._lock.path.exists()
        try:
            self._created = [d for d in (self.out, *self.out.parents) if not d.exists()]  # deepest first
            self.out.mkdir(parents=True, exist_ok=True)
            if self.is_main:  # the ranks of one `accelerate launch` share process 0's lock
                self._lock.__enter__()
        except BaseException as err:
            self._undo()
            if isinstance(err, OSError) and err.errno in WRITE_REFUSED:
                raise write_error(err, self.out, "choose another --out") from err
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is KeyboardInterrupt and self._begun and self.is_main and self.result.records:
            print(self._interrupted(), file=sys.stderr, flush=True)
        self._lock.__exit__()
        if exc is not None and not self._begun:
            self._undo()
        # a full, read-only or forbidden folder: one line
        if isinstance(exc, (OSError, WriteError)) and exc.errno in WRITE_REFUSED:
            hint = "free space and rerun the same command"
            if self.spec is not None and self.spec.stages:  # only a journal keeps the work done
                hint += ": the run resumes where it stopped"
            if exc.errno not in DISK_FULL:
                hint = "choose another --out"
            raise write_error(exc, self.out, hint) from exc

    def _interrupted(self) -> str:
        """Ctrl-C's one line: what each stage saved, where, and how to go on."""
        stages = list(self.result.records.items())[::-1]
        saved = [f"{len(done)} with {name}" for name, done in stages[1:]]
        saved.insert(0, f"{len(stages[0][1])} {self.spec.unit}(s) finished")
        return (
            f"interrupted: {', '.join(saved)} saved in {self.journal_dir}; run the same command again to resume "
            f"(finished {self.spec.unit}s are not redone; --out {self.out})"
        )

    def abandon(self) -> None:
        """Nothing to write after all (`pairs` kept no pair): leave the folder as found."""
        if not self._begun:
            self._lock.__exit__()
            self._undo()

    def _undo(self) -> None:
        """A failed start: remove the lock file and the (still empty) folders this invocation created."""
        if not self._lock_existed and self.is_main:
            self._lock.path.unlink(missing_ok=True)
        for d in self._created:
            try:
                d.rmdir()
            except OSError:
                break

    def wait(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()

    # -- one invocation --------------------------------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunResult:
        """Plan from every journal (a finished run's rerun is a no-op), work, then the final files and run.json."""
        self.spec, self.settings = spec, {**spec.settings, "journal_layout": JOURNAL_LAYOUT}
        self.fp = sha256_json(self.settings)[:16]
        self.result = RunResult(previous=read_record(self.record_path))
        if spec.stages and self._plan():
            self.result.complete, self.result.info = True, self.result.previous
            return self.result
        if spec.stages:
            self._work()
        return self._finish()

    def _load(self, stage: Stage, items: list[Item], *, retry_errors: bool = False) -> tuple[dict, dict]:
        """The stage's journaled records: of an item's records, one whose key matches wins, then the later
        invocation, then the later line; with `retry_errors`, failed ones are left to compute again.

        Raises:
            ResumeMismatchError: a journal holds other settings (naming them), or its first line is no header.
        """
        keys, records = {item.id: item.key for item in items}, {}
        fresh = self.overwrite and not self._begun  # --overwrite starts from nothing

        def rank(rec: dict) -> tuple[bool, int]:
            return (rec.get("key") == keys.get(rec["row"]), int(rec.get("inv") or 0))

        for path in [] if fresh else sorted(self.journal_dir.glob(f"{_prefix(stage)}rank-*.jsonl")):
            rows = read_jsonl(path, is_record=_is_journal_line, restart=self.restart)
            head, *lines = rows or [{"fingerprint": self.fp}]
            if head.get("fingerprint") != self.fp:
                before = (head.get("header") or {}).get("settings")
                changes = diff_settings(before, self.settings)
                raise ResumeMismatchError(
                    str(self.out), str(head.get("fingerprint")), self.fp, changes, restart=self.restart
                )
            for rec in lines:
                if "row" in rec and (rec["row"] not in records or rank(rec) >= rank(records[rec["row"]])):
                    records[rec["row"]] = rec
        done, changed = {}, {}
        for item in items:
            rec = records.get(item.id)
            if rec is not None and rec.get("key") != item.key:  # which inputs changed since it was journaled
                old = rec.get("inputs") if isinstance(rec.get("inputs"), dict) else {}
                changed[item.id] = [k for k in item.inputs if old.get(k) != item.inputs[k]] or ["resume key"]
            elif rec is not None and not (retry_errors and (rec.get("result") or {}).get("error")):
                done[item.id] = rec
        return done, changed

    def _plan_stage(self, stage: Stage) -> dict:
        """A stage's items (maybe built from earlier stages' results), keyed, and its records; which inputs
        changed."""
        spec, records = self.spec, self.result.records
        if stage.items is None:
            items = spec.items
        else:
            items = stage.items({n: {i: r["result"] for i, r in done.items()} for n, done in records.items()})
        for item in items:
            item.name = item.name or f"{spec.unit} {item.id}"
            item.results = {n: done[item.id]["result"] for n, done in records.items() if item.id in done}
        _item_keys(items, spec.chunk if stage.batch is None else 1)
        self.result.items[stage.name] = items
        records[stage.name], changed = self._load(stage, items, retry_errors=spec.retry_errors)
        return changed

    def _plan(self) -> bool:
        """Read every journal; True when finished. An item whose files are gone or replaced is computed again."""
        spec, res, gone, finished = self.spec, self.result, Counter(), True
        for stage in spec.stages:
            for row, inputs in self._plan_stage(stage).items():  # an item of several stages counts once
                res.changed[row] = list(dict.fromkeys([*res.changed.get(row, []), *inputs]))
            done = res.records[stage.name]
            finished = finished and len(done) == len(res.items[stage.name])
            for row, rec in list(done.items()):
                lost = [rel for rel, kept in rec.get("files", {}).items() if not _intact(self.out, rel, kept)]
                if lost:
                    del done[row]
                    gone[Path(lost[0]).parts[0]] += 1
        res.repairs += [
            f"{n} {spec.unit}(s) with {top}/ files missing or replaced: {_REDONE.get(top, 'computed again')}"
            for top, n in sorted(gone.items())
        ]
        if finished:
            res.repairs += self._damage()
        return finished and not res.repairs

    def _state(self) -> str:
        """What the final files are made from: every item's key and the spec's `depends`."""
        keys = {n: [i.key for i in items] for n, items in self.result.items.items()}
        return sha256_json({"keys": keys, "depends": self.spec.depends})[:24]

    def _damage(self) -> list[str]:
        """What is amiss with a finished run's final files and run.json."""
        ended = [e for e in self._log_entries() if e.get("event") == "end" and "outputs" in e]
        kept = ended[-1] if ended else {}
        if kept.get("state") != self._state():
            return ["the final files were not written from these records"]
        found = [
            f"{name} {'did not match the journal' if (self.out / name).exists() else 'was missing'}"
            for name, meta in kept["outputs"].items()
            if not _intact(self.out, name, meta)
        ]
        if not self.result.previous:
            found.append("run.json was missing or invalid")
        elif self.result.previous.get("fingerprint") != self.fp:
            found.append("run.json was not this run's")
        elif _last_invocation(self.result.previous) != kept.get("inv"):
            found.append("run.json was not written by the last finished invocation")
        return found

    def _work(self) -> None:
        """This process's share of every stage, a phase at a time, each result journaled as it comes."""
        spec, res = self.spec, self.result
        last, done = res.items[spec.stages[-1].name], res.records[spec.stages[-1].name]
        res.resumed = len(done)
        todo = [res.items[spec.stages[0].name][j] for j in self._mine(spec.stages[0])]
        todo = [i for i in todo if any(i.id not in d for d in res.records.values())]
        if spec.prepare is not None and todo:
            spec.prepare(todo)  # every missing model named before any work starts
        if res.changed and self.is_main:
            count = Counter(name for inputs in res.changed.values() for name in inputs)
            why, n = ", ".join(f"{n} {name}" for name, n in sorted(count.items())), len(res.changed)
            log.warning("%d journaled %s(s) have changed inputs and are recomputed (%s)", n, spec.unit, why)
        if res.repairs and self.is_main:
            log.warning("repairing %s from its journal: %s", self.out, "; ".join(res.repairs))
        res.inv = self._begin()
        self.weight = weight = spec.weight or (lambda item: 1)
        mine = [last[j] for j in self._mine(spec.stages[-1])] if spec.stages[-1].items is None else []
        bar = Progress(
            sum(map(weight, mine)),
            initial=sum(weight(i) for i in mine if i.id in done),
            desc=f"{self.kind}[{self.rank}]",
            unit=spec.progress or "item",
            position=self.rank,
            disable=spec.progress is None,
        )
        groups: list[list[Stage]] = []  # stages over the same items run phase by phase together
        for stage in spec.stages:
            if groups and stage.items is None:
                groups[-1].append(stage)
            else:
                groups.append([stage])
        try:
            for k, group in enumerate(groups):
                if k:  # items built from the earlier stages' results: every process's
                    self._reload(group[0].name)
                    self._plan_stage(group[0])
                self._phases(group, bar)
        finally:
            bar.close()

    def _reload(self, until: str | None = None) -> None:
        """Once every process is here: reread the stages before `until` (all by default)."""
        self.wait()
        for stage in self.spec.stages:
            if stage.name == until or stage.name not in self.result.items:
                break
            self.result.records[stage.name], _ = self._load(stage, self.result.items[stage.name])

    def _mine(self, stage: Stage) -> list[int]:
        """This process's item positions: chunk j goes to process j mod the number of processes."""
        k = self.spec.chunk
        return [j for j in range(len(self.result.items[stage.name])) if (j // k) % self.world == self.rank]

    def _phases(self, group: list[Stage], bar: Progress) -> None:
        spec, positions = self.spec, self._mine(group[0])
        per = (spec.phase or len(positions) or 1) * spec.chunk
        phases = [positions[s : s + per] for s in range(0, len(positions), per)]
        journals = {s.name: self._journal(s) for s in group}
        for p, phase in enumerate(phases):
            where = f"phase {p + 1}/{len(phases)}: " if len(phases) > 1 else ""
            for stage in group:
                worked = self._stage_phase(stage, phase, journals[stage.name], bar, where)
                if worked and stage.ended is not None:
                    stage.ended()

    def _journal(self, stage: Stage) -> Path:
        """This process's journal of `stage`, with its header line; a torn last line is cut off."""
        path = self.journal_dir / f"{_prefix(stage)}rank-{self.rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not read_jsonl(path, repair=True, is_record=_is_journal_line, restart=self.restart):
            header = {"kind": self.kind, "settings": self.settings}
            _append_lines(path, [{"fingerprint": self.fp, "header": header}])
        return path

    def _stage_phase(self, stage: Stage, phase: list[int], journal: Path, bar: Progress, where: str) -> bool:
        items, done, k = self.result.items[stage.name], self.result.records[stage.name], self.spec.chunk
        todo = [items[j] for j in phase if items[j].id not in done]
        if stage.batch is None:
            chunks = {}
            for j in phase:
                chunks.setdefault(j // k, []).append(items[j])
            calls = [(c, [i for i in c if i.id not in done]) for c in chunks.values()]
        else:
            calls = [(todo[s : s + stage.batch],) * 2 for s in range(0, len(todo), stage.batch)]
        calls = [c for c in calls if c[1]]
        for n, (batch, pending) in enumerate(calls):
            computed = stage.compute(batch, pending)
            if len(computed) != len(pending):
                raise RuntimeError(
                    f"{stage.name or 'stage'}: {len(computed)} results for {len(pending)} items"
                )
            recs = [self._journaled(stage, item, *c) for item, c in zip(pending, computed)]
            _append_lines(journal, recs)
            if stage is self.spec.stages[-1]:
                failed = sum(1 for r in recs if (r["result"] or {}).get("error"))
                bar.update(sum(map(self.weight, pending)), failed=failed)
            elif stage.name:
                bar.stage(f"{where}{stage.name} {n + 1}/{len(calls)}")
        return bool(todo)

    def _journaled(self, stage: Stage, item: Item, result: dict, files: dict[str, bytes]) -> dict:
        """An item's journal record, its files written first."""
        rec = {
            "row": item.id,
            "key": item.key,
            "inv": self.result.inv,
            "inputs": item.inputs,
            "result": result,
        }
        kept = _write_files(self.out, files)
        if kept:
            rec["files"] = kept
        self.result.records[stage.name][item.id] = rec
        item.results[stage.name] = result
        return rec

    def _finish(self) -> RunResult:
        """Process 0 writes the final files (staged folders renamed into place), the invocation's end and run.json.
        A run computed in one go has no journal: its record describes this invocation alone."""
        spec, res = self.spec, self.result
        self._reload()
        if not self.is_main:
            return res
        files = spec.outputs(res) if spec.outputs is not None else {}
        kept = _write_files(self.out, files)
        _sweep_temporaries(self.out, files)
        for name, staged in spec.folders.items():
            _remove(self.out / name)
            os.replace(staged, self.out / name)
        info, fields = spec.record(res) if spec.record is not None else {}, {}
        if spec.stages:
            info, fields = {"fingerprint": self.fp, **info}, self._ended(kept)
        self._begun = True
        res.info = self._record(info, **fields)
        return res

    def _ended(self, kept: dict[str, list]) -> dict:
        """The invocation's end line in the log, and the record's account of every invocation (with how many
        current results each computed)."""
        res, finished = self.result, utc_now()
        last = res.records[self.spec.stages[-1].name].values()
        failed = any((rec["result"] or {}).get("error") for rec in last)
        repaired = {"repaired": res.repairs} if res.repairs else {}
        how = f"finished with failed {self.spec.unit}s" if failed else "finished"
        end = {"exit": how, "recomputed_changed_inputs": len(res.changed), **repaired}
        self._log("end", res.inv, finished=finished, outputs=kept, state=self._state(), **end)
        rows_by_inv, history = Counter(int(rec.get("inv") or 0) for rec in last), {}
        for e in self._log_entries():
            inv = int(e.get("inv") or 0)
            entry = history.setdefault(
                inv, {"invocation": inv, "exit": "interrupted", "rows_done": rows_by_inv[inv]}
            )
            entry.update({k: v for k, v in e.items() if k not in ("event", "inv", "outputs", "state")})
        first = history[min(history)]
        return {
            "started": first.get("started", self.started),
            "finished": finished,
            "resumed": len(history) > 1,
            "invocations": [history[k] for k in sorted(history)],
            "processes": self.world,
        }

    def _begin(self) -> int:
        if self.overwrite and self.is_main:
            for name in ("journal", RECORD, *KIND_OUTPUTS[self.kind]):
                _remove(self.out / name)
        self.wait()
        inv = sum(1 for e in self._log_entries() if e.get("event") == "start")
        self.wait()  # every rank has read the log's length before process 0 appends to it
        if self.is_main:
            self._log("start", inv, started=self.started, argv=self.argv, processes=self.world)
        self._begun = True
        return inv

    # -- journal/invocations.jsonl: a "start" line per invocation, an "end" line when it finished (process 0) --
    def _log_entries(self, *, repair: bool = False) -> list[dict]:
        return read_jsonl(self.log_path, repair=repair, is_record=_is_log_line, restart=self.restart)

    def _log(self, event: str, inv: int, **info) -> None:
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        self._log_entries(repair=True)  # a torn last line from a killed writer is cut off
        _append_lines(self.log_path, [{"event": event, "inv": inv, **info}])

    def _record(self, info: dict, **fields) -> dict:
        """The one shape of a run's record: the kind, the command's fields, `meaningless` (also when an upstream run
        was) and `upstream`."""
        ups = [str(Path(u).resolve()) for u in self.spec.upstream]
        from recon_score.synthetic import uses_synthetic_models

        meaningless = uses_synthetic_models(info) or any(
            read_record(Path(u) / RECORD).get("meaningless") for u in ups
        )
        run_info = {
            "command": self.kind,
            **info,
            "meaningless": meaningless,
            "upstream": ups,
            "started": info.get("started", self.started),
            "finished": utc_now(),
            **fields,
            "provenance": {**provenance(), "argv": list(self.argv)},
        }
        write_json_atomic(self.record_path, run_info)
        return run_info
