"""Durable file primitives every command's outputs use: atomic writes (temporary file in the same folder, fsync,
os.replace: readers never see half a file), JSON Lines reading that tolerates a torn last line, and the
canonical-JSON digest behind cache keys and run fingerprints."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from recon_score.errors import ReconScoreError
from recon_score.textfiles import TextFileError, entry_kind, read_bytes

if TYPE_CHECKING:  # PIL is loaded by whoever has an image to write
    from PIL import Image

SCHEMA_VERSION = 1


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_json(obj) -> str:
    return hashlib.sha256(canonical_json({"_schema": SCHEMA_VERSION, **obj}).encode()).hexdigest()


def file_digest(path: Path | None) -> str | None:
    """sha256 of a regular file, else None (the row's load says why); memoised per (path, size, mtime_ns)."""
    try:
        st = os.stat(path)
    except (OSError, TypeError):  # TypeError: no path
        return None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would be read forever
        return None
    return _memo_sha256(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1 << 16)
def _memo_sha256(path: str, size: int, mtime_ns: int) -> str | None:
    try:
        return file_sha256(Path(path))
    except OSError:
        return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dumps_line(obj) -> str:
    """One JSON Lines record (no NaN: JSON has none)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)


# a write that failed because of where it went, not what was written: one line naming the folder (WriteError)
DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
WRITE_REFUSED = (*DISK_FULL, errno.EROFS, errno.EACCES, errno.EPERM)


class WriteError(ReconScoreError):
    """A full disk, a quota, a file-size limit, a read-only or forbidden folder: `folder` and the `errno`."""

    def __init__(self, folder: Path | None, errno_: int, hint: str | None = None):
        self.folder, self.errno = folder, errno_
        why = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file size limit reached",
               errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only filesystem"}  # fmt: skip
        if hint is None:
            hint = (
                "choose another folder"
                if errno_ not in DISK_FULL
                else "free space and rerun the same command"
            )
        where = f" in {folder}" if folder is not None else ""
        super().__init__(f"cannot write{where}: {why.get(errno_, os.strerror(errno_))}; {hint}")


def write_error(err: OSError, folder: Path | str | None = None, hint: str | None = None) -> WriteError:
    """The one line for a write refused by the disk (`err.filename`'s folder, else `folder`)."""
    if isinstance(err, WriteError):
        return WriteError(err.folder, err.errno, hint)
    where = Path(err.filename).parent if err.filename else folder
    return WriteError(None if where is None else Path(where), err.errno, hint)


class NotAFileError(ReconScoreError):
    """Where a command writes a file, something else stands (a folder, a symlink, a device, a FIFO): it is never
    replaced, and the message names it."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = Path(path), kind
        super().__init__(
            f"{path} is {kind}, not a regular file, where a file is written; move it away and rerun"
        )


def refuse_non_file(path: Path) -> None:
    """Raises NotAFileError when `path` exists and is not a regular file."""
    kind = entry_kind(path)
    if kind is not None:
        raise NotAFileError(path, kind)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Raises WriteError (one line naming the folder) when the disk refuses the write, NotAFileError when
    something other than a regular file stands at `path`."""
    tmp = stage_bytes(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stage_bytes(path: Path, data: bytes) -> Path:
    """`data` in a synced temporary beside `path` (.NAME.XXXXXXXX.tmp), for the caller to `os.replace` into place:
    files that change together are all staged before any is replaced. Raises as `atomic_write_bytes`."""
    refuse_non_file(path)
    try:
        return _stage(path, data)
    except OSError as err:
        if err.errno not in WRITE_REFUSED:
            raise
        raise write_error(err, path.parent) from err


def _stage(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide results from the rest of a team
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # a failed write names the file it was writing
        raise
    return Path(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def jsonl_bytes(rows: Iterable[dict]) -> bytes:
    return "".join(dumps_line(r) + "\n" for r in rows).encode("utf-8")


def write_json_atomic(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def png_bytes(img: Image.Image) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=4)
    return buf.getvalue()


def read_jsonl(
    path: Path,
    *,
    repair: bool = False,
    is_record: Callable[[object], bool] | None = None,
    restart: str = "pass --overwrite",
) -> list:
    """Records of a JSONL file. A torn final line (not valid JSON, or JSON `is_record` rejects) is dropped, and
    with `repair=True` truncated so appends continue on a clean line; any other bad line is an error naming it
    (and `restart`: how the command starts again without the file)."""
    if not path.exists():
        return []
    data = read_bytes(path)  # a FIFO, a device or an oversized file: a clear error, never a hang
    keep = len(data)
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    lines, offset, spans = data[:keep].split(b"\n")[:-1], 0, []
    for line in lines:
        spans.append(offset)
        offset += len(line) + 1
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        why = "not a valid JSON line"
        try:
            rec = json.loads(line)
            ok = is_record is None or is_record(rec)
            why = "valid JSON but not a record of this file"
        except (ValueError, RecursionError):  # invalid JSON, invalid UTF-8, absurdly deep nesting
            ok = False
        if ok:
            records.append(rec)
        elif i == last:  # torn by a crash between write and newline: drop it
            keep = spans[i]
            break
        else:
            raise TextFileError(path, i + 1, f"{why}; the file is corrupt (restore it, or {restart})")
    if repair and keep != len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
    return records
