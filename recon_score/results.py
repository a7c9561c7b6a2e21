"""The one results writer: append-only JSONL journals while a run works, atomic final files when it ends.

Layout of a run folder:
    journal/rank-<k>.jsonl  one per process; line 1 = {"fingerprint", "header"}, then one line per finished
                            item, each written with a single write() + flush + fsync. A SIGKILL can only leave
                            a torn *last* line, which the next open truncates away.
    <final>.jsonl, run.json written to a temporary file in the same folder, then os.replace'd: readers never
                            see half a file.

    journal/invocations.jsonl  one "start" line per invocation that had work to do, one "end" line when it
                            finished (an invocation killed mid-way has a start and no end): run.json's history.
    .lock                   fcntl lock held by the run's process 0 while it works (RunLock).

A resumed run reads every journal (so a run may resume with another number of processes), refuses to mix
configurations (fingerprint mismatch), and skips finished items whose inputs are unchanged: each record carries
its resume key (`resume_key`: id, caption, the sha256 of the image file's bytes, ...) and the inputs it was
computed from, so a replaced image or an edited caption is recomputed (see docs/runs.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from recon_score.cache import atomic_write_text, sha256_json
from recon_score.errors import ReconScoreError, ResumeMismatchError
from recon_score.textfiles import TextFileError


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)


def read_jsonl(path: Path, *, repair: bool = False) -> list[dict]:
    """Records of a JSONL file. A torn final line (no newline, or not valid JSON) is dropped, and with
    `repair=True` truncated from the file so appends continue on a clean line."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = len(data)
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    lines = data[:keep].splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:  # invalid JSON or invalid UTF-8
            if i == len(lines) - 1:  # torn by a crash between write and newline: drop it
                keep -= len(line) + 1
                break
            raise TextFileError(
                path, i + 1, "not a valid JSON line; the file is corrupt (restore it, or pass --overwrite)"
            ) from None
    if repair and keep != len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
    return records


class Journal:
    """Append-only JSONL of finished items for one process."""

    def __init__(self, path: Path, *, fingerprint: str, header: dict):
        self.path, self.fingerprint = path, fingerprint
        path.parent.mkdir(parents=True, exist_ok=True)
        records = read_jsonl(path, repair=True)
        if records:
            found = records[0].get("fingerprint")
            if found != fingerprint:
                raise ResumeMismatchError(str(path.parent.parent), found=str(found), wanted=fingerprint)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if not records:
            self._append([{"fingerprint": fingerprint, "header": header}])

    def _append(self, records: Iterable[dict]) -> None:
        for rec in records:
            os.write(
                self._fd, (_dumps(rec) + "\n").encode("utf-8")
            )  # one write per record: whole or torn-last
        os.fsync(self._fd)

    def write(self, records: list[dict]) -> None:
        self._append(records)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def diff_settings(old: dict | None, new: dict | None) -> list[str]:
    """`key: old -> new` for every leaf setting that differs (dotted keys), in sorted order; [] if either is
    unknown (journals written before settings were recorded)."""
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
        f"{k}: {_dumps(a.get(k)) if k in a else '(unset)'} -> {_dumps(b.get(k)) if k in b else '(unset)'}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k, missing) != b.get(k, missing)
    ]


def load_journals(
    folder: Path,
    *,
    fingerprint: str,
    prefix: str = "",
    keys: dict[int, str] | None = None,
    settings: dict | None = None,
) -> dict[int, dict]:
    """Finished records by row index, from every `{prefix}rank-*.jsonl` journal in `folder` (any number of past
    processes).

    A row may have several records (recomputed after its inputs changed or with --retry-errors, possibly by
    another rank after a resume with another process count): a record whose key matches `keys[row]` wins over
    one that does not, then the later invocation (`inv`), then the later line.

    Raises:
        ResumeMismatchError: a journal was written by a run with another configuration (naming the settings
            that changed when both runs recorded `settings`, the dict the fingerprint hashes).
    """
    done: dict[int, dict] = {}

    def rank(rec: dict) -> tuple[bool, int]:
        row = int(rec["row"])
        return (keys is not None and rec.get("key") == keys.get(row), int(rec.get("inv") or 0))

    if not folder.is_dir():
        return done
    for path in sorted(folder.glob(f"{prefix}rank-*.jsonl")):
        records = read_jsonl(path)
        if not records:
            continue
        found = records[0].get("fingerprint")
        if found != fingerprint:
            before = (records[0].get("header") or {}).get("settings")
            raise ResumeMismatchError(
                str(folder.parent),
                found=str(found),
                wanted=fingerprint,
                changes=diff_settings(before, settings),
            )
        for rec in records[1:]:
            row = int(rec["row"])
            if row not in done or rank(rec) >= rank(done[row]):
                done[row] = rec
    return done


class FileDigests:
    """sha256 of image files' bytes, memoised per (path, size, mtime_ns) within one run: a file shared by many
    rows is read once, and a file replaced in place (new size or mtime) is hashed again."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int, int], str] = {}

    def __call__(self, path: Path | None) -> str | None:
        """Hex digest, or None when there is no file to read (the row's load will report why)."""
        if path is None:
            return None
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would be read forever; the load says why
                return None
            memo_key = (str(path), st.st_size, st.st_mtime_ns)
            if memo_key not in self._memo:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                self._memo[memo_key] = h.hexdigest()
            return self._memo[memo_key]
        except OSError:
            return None


def resume_key(inputs: dict) -> str:
    """The one resume key: a journaled result is reused only for exactly these inputs (id, image path, caption,
    image_sha256, ... whatever the command computes from)."""
    return sha256_json({"kind": "resume", **inputs})[:24]


def changed_fields(old: dict | None, new: dict) -> list[str]:
    """Which inputs differ between a journaled record's `inputs` and the row's current ones."""
    if not isinstance(old, dict):
        return ["journal written before inputs were recorded"]
    return [k for k in new if old.get(k) != new.get(k)] or ["resume key"]


class RunLock:
    """Exclusive fcntl lock on `out/.lock` for the lifetime of a run (taken by process 0 only, so the ranks of
    one `accelerate launch` never trip it). The kernel releases it when the process dies, even on SIGKILL.

    Raises:
        ReconScoreError: another process holds it (a second command on the same --out).
    """

    def __init__(self, out: Path, *, enabled: bool = True):
        self.path, self.enabled, self._fd = out / ".lock", enabled, -1

    def __enter__(self) -> RunLock:
        if not self.enabled:
            return self
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
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


class InvocationLog:
    """journal/invocations.jsonl: one line when an invocation starts working, one when it ends. Written by
    process 0 only; rows done per invocation come from the `inv` field of the journal records."""

    def __init__(self, folder: Path):
        self.path = folder / "invocations.jsonl"

    def entries(self) -> list[dict]:
        return read_jsonl(self.path)

    def next_index(self) -> int:
        return sum(1 for e in self.entries() if e.get("event") == "start")

    def _append(self, rec: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        read_jsonl(self.path, repair=True)  # a torn line from a killed writer
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (_dumps(rec) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def start(self, inv: int, **info) -> None:
        self._append({"event": "start", "inv": inv, **info})

    def end(self, inv: int, **info) -> None:
        self._append({"event": "end", "inv": inv, **info})

    def history(self, records: Iterable[dict]) -> list[dict]:
        """One entry per invocation: start/end, argv, processes, exit state, and `rows_done`: how many of the
        journal `records` (the current result of each row) it computed."""
        rows_by_inv: dict[int, int] = {}
        for rec in records:
            inv = int(rec.get("inv") or 0)
            rows_by_inv[inv] = rows_by_inv.get(inv, 0) + 1
        out: dict[int, dict] = {}
        for e in self.entries():
            inv = int(e.get("inv", 0))
            entry = out.setdefault(inv, {"invocation": inv, "exit": "interrupted"})
            fields = {k: v for k, v in e.items() if k not in ("event", "inv")}
            if e.get("event") == "end":
                entry.update(fields, exit=fields.get("exit", "finished"))
            else:
                entry.update(fields)
        for inv, entry in out.items():
            entry["rows_done"] = rows_by_inv.get(inv, 0)
        return [out[k] for k in sorted(out)]


def write_jsonl_atomic(path: Path, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(_dumps(r) + "\n" for r in rows))


def write_json_atomic(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
