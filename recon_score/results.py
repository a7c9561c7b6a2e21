"""The one results writer: append-only JSONL journals while a run works, atomic final files when it ends.

Layout of a run folder:
    journal/rank-<k>.jsonl  one per process; line 1 = {"fingerprint", "header"}, then one line per finished
                            item, each written with a single write() + flush + fsync. A SIGKILL can only leave
                            a torn *last* line, which the next open truncates away.
    <final>.jsonl, run.json written to a temporary file in the same folder, then os.replace'd: readers never
                            see half a file.

A resumed run reads every journal (so a run may resume with another number of processes), refuses to mix
configurations (fingerprint mismatch), and skips finished items.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from recon_score.cache import atomic_write_text
from recon_score.errors import ResumeMismatchError
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


def load_journals(folder: Path, *, fingerprint: str, prefix: str = "") -> dict[int, dict]:
    """Finished records by row index, from every `{prefix}rank-*.jsonl` journal in `folder` (any number of past
    processes).

    Raises:
        ResumeMismatchError: a journal was written by a run with another configuration.
    """
    done: dict[int, dict] = {}
    if not folder.is_dir():
        return done
    for path in sorted(folder.glob(f"{prefix}rank-*.jsonl")):
        records = read_jsonl(path)
        if not records:
            continue
        found = records[0].get("fingerprint")
        if found != fingerprint:
            raise ResumeMismatchError(str(folder.parent), found=str(found), wanted=fingerprint)
        for rec in records[1:]:
            done[int(rec["row"])] = rec
    return done


def write_jsonl_atomic(path: Path, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(_dumps(r) + "\n" for r in rows))


def write_json_atomic(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
