"""The one policy for reading the user's text files (captions, lists, annotations, run outputs): strict
UTF-8, BOM dropped, lines counted by ``\\n``, unencodable text found when read (docs/bad-inputs.md, "One text
policy").

Every problem is a :class:`TextFileError` (an :class:`~recon_score.errors.InputError`): the CLI prints its one
line and exits 1 when the whole file is unusable; per-row readers keep its message in the row's ``error``.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recon_score.errors import InputError


class TextFileError(InputError):
    """A text file (or one of its lines) cannot be read as its format says; the message names file and line."""

    def __init__(self, path: str | Path, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


# the largest file read whole (captions, tables, run outputs, journals): a larger one is refused with its size,
# never read into memory until the process dies
MAX_FILE_BYTES = 2 << 30


def read_bytes(path: str | Path, *, what: str = "file", limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (default MAX_FILE_BYTES), else TextFileError. Opened
    without blocking and checked after opening, so a FIFO is refused instead of waiting forever for a writer, a
    device (/dev/zero) instead of filling memory, and a file that grows while read stops at the bound."""
    path, limit = Path(path), MAX_FILE_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise TextFileError(path, None, f"{what} not found") from None
    except OSError as err:
        raise TextFileError(path, None, f"{what} cannot be read ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kinds = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a device",
                     stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}  # fmt: skip
            kind = kinds.get(stat.S_IFMT(st.st_mode), "a special file")
            raise TextFileError(path, None, f"{what} is {kind}, not a regular file")
        if st.st_size > limit:
            raise TextFileError(path, None, f"{what} is {st.st_size:,} bytes, over the {limit:,}-byte limit")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 24, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TextFileError(path, None, f"{what} grew past the {limit:,}-byte limit while read")
        return b"".join(chunks)
    except OSError as err:
        raise TextFileError(path, None, f"{what} cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, *, encoding: str = "utf-8", what: str = "file") -> str:
    """The whole file, decoded strictly, without a leading BOM; TextFileError names the first invalid byte."""
    path = Path(path)
    data = read_bytes(path, what=what)
    try:
        text = data.decode(encoding)
    except LookupError:
        raise TextFileError(path, None, f"unknown text encoding {encoding!r}") from None
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise TextFileError(
            path,
            line,
            f"not valid {encoding} text (byte 0x{data[err.start]:02x} at column {column}); "
            f"save the file as {encoding.upper()}",
        ) from None
    return text.removeprefix("\ufeff")


def read_lines(path: str | Path, **kwargs) -> list[tuple[int, str]]:
    """(1-based line number, line without its end) for every line, blank ones included."""
    lines = read_text(path, **kwargs).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [(i, line.removesuffix("\r")) for i, line in enumerate(lines, start=1)]


class _DuplicateKey(ValueError):
    pass


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's `object_pairs_hook`: an object naming a key twice is refused (json.loads would keep the second
    value silently, and which one the writer meant is unknown)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _DuplicateKey(f"key {safe_text(twice)!r} appears twice in one JSON object; keep one")
    return obj


def parse_json(text: str) -> tuple[object | None, str | None]:
    """(value, None), or (None, why) for text that is not JSON Python can hold: a syntax error, a repeated key,
    nesting past the recursion limit, an integer of more digits than Python converts."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys), None
    except json.JSONDecodeError as err:
        return None, f"invalid JSON ({err.msg} at column {err.colno})"
    except _DuplicateKey as err:
        return None, str(err)
    except RecursionError:
        return None, "JSON nested too deeply (thousands of [ or {); not a record"
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        return None, f"JSON holds a number that cannot be read ({str(err).split(';')[0]})"


def json_lines(path: str | Path, **kwargs) -> Iterator[tuple[int, object | None, str | None]]:
    """(line, value, None) for each non-blank JSONL line, or (line, None, "NAME:LINE: why") where it is not JSON;
    whether a bad line is fatal is the caller's choice."""
    path = Path(path)
    for lineno, raw in read_lines(path, **kwargs):
        if not raw.strip():
            continue
        value, why = parse_json(raw)
        yield lineno, value, None if why is None else f"{path.name}:{lineno}: {why}"


def json_objects(path: str | Path, **kwargs) -> Iterator[tuple[int, dict]]:
    """(line, object) for each non-blank line of a JSONL file whose every line must be a JSON object
    (TextFileError at the first that is not)."""
    path = Path(path)
    for lineno, value, err in json_lines(path, **kwargs):
        if err is None and not isinstance(value, dict):
            err = f"{path.name}:{lineno}: expected a JSON object, got {type(value).__name__}"
        if err is not None:
            raise TextFileError(path, lineno, err.split(": ", 1)[1])
        yield lineno, value


def read_json(path: str | Path, *, expect: type = object, what: str = "file", **kwargs):
    """A whole JSON document, checked to be an `expect` (dict or list): a wrong type is a clear error here."""
    path = Path(path)
    text = read_text(path, what=what, **kwargs)
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as err:
        raise TextFileError(path, err.lineno, f"invalid JSON ({err.msg} at column {err.colno})") from None
    except (RecursionError, ValueError):  # a repeated key, too deep, too many digits: parse_json's words
        raise TextFileError(path, None, parse_json(text)[1]) from None
    if expect is not object and not isinstance(value, expect):
        raise TextFileError(
            path,
            None,
            f"expected a JSON {'object' if expect is dict else expect.__name__}, got {type(value).__name__}",
        )
    return value


def _physical_lines(text: str) -> list[str]:
    """The text's lines split on "\n" only, each with its end kept (the csv module wants them so)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _csv_records(
    path: Path, text: str, delimiter: str, quoted: bool, width: int | None
) -> Iterator[tuple[int, list[str] | None, str | None]]:
    """(first line, fields, None) per record, or (line, None, why) where a record cannot be read; reading goes on
    from the next line, so one bad quote costs one row, never the rows after it. A quoted field may span lines,
    unless a line it swallows would be a record of `width` fields on its own (then its quote is unbalanced)."""
    lines = _physical_lines(text)
    options = {"delimiter": delimiter, "strict": True}
    if not quoted:
        options["quoting"] = csv.QUOTE_NONE
    i = 0
    while i < len(lines):
        reader = csv.reader(iter(lines[i:]), **options)
        done = 0  # lines of lines[i:] consumed by complete records
        try:
            for fields in reader:
                first, last = i + done + 1, i + reader.line_num
                swallowed = lines[first:last]  # lines after the first, inside one quoted field
                if width and any(
                    len(next(csv.reader([x], delimiter=delimiter), [])) == width for x in swallowed
                ):
                    yield (
                        first,
                        None,
                        (
                            "a quote opened on this line is not closed on it (an unbalanced quote?); the lines "
                            "after it are read as rows of their own"
                        ),
                    )
                    i, done = first, 0
                    break
                done = reader.line_num
                if fields:
                    yield first, fields, None
            else:
                return
        except csv.Error as err:
            first = i + done + 1
            why = "a quote is never closed" if "unexpected end of data" in str(err) else str(err)
            yield (
                first,
                None,
                f'malformed CSV ({why}); quote a field that holds a quote or the delimiter as "..."',
            )
            i = first
            continue


def csv_dicts(
    path: str | Path,
    *,
    delimiter: str | None = None,
    quoted: bool | None = None,
    errors: list[tuple[int, str]] | None = None,
    **kwargs,
) -> tuple[list[str], list[tuple[int, dict]]]:
    """(header, [(line where the record starts, record)]) of a CSV file (a TSV for ``.tsv`` paths, whose quotes
    are literal text unless `quoted`). Extra fields go under the key None (csv.DictReader's way), missing ones are
    None. Unreadable records go to `errors` as (line, message), or the first is raised as TextFileError."""
    path = Path(path)
    tsv = path.suffix.lower() == ".tsv"
    delimiter = delimiter or ("\t" if tsv else ",")
    quoted = (delimiter != "\t") if quoted is None else quoted
    text = read_text(path, **kwargs)
    lines = _physical_lines(text)
    start = next((n for n, ln in enumerate(lines) if ln.strip("\r\n")), None)
    if start is None:
        return [], []
    header_line = lines[start].removesuffix("\n").removesuffix("\r")
    options = {"delimiter": delimiter} if quoted else {"delimiter": delimiter, "quoting": csv.QUOTE_NONE}
    header = next(csv.reader([header_line], **options))
    seen: dict[str, int] = {}
    for k, name in enumerate(header, start=1):
        if name in seen:
            raise TextFileError(
                path, start + 1, f"column {name!r} appears twice in the header (columns {seen[name]} and {k})"
            )
        seen[name] = k
    records = []
    with _field_limit(len(text)):
        for line, fields, why in _csv_records(
            path, "".join(lines[start + 1 :]), delimiter, quoted, len(header)
        ):
            line += start + 1
            if why is not None:
                if errors is None:
                    raise TextFileError(path, line, why)
                errors.append((line, why))
                continue
            rec = dict(zip(header, fields))
            for name in header[len(fields) :]:
                rec[name] = None
            if len(fields) > len(header):
                rec[None] = fields[len(header) :]
            records.append((line, rec))
    return header, records


@contextmanager
def _field_limit(size: int) -> Iterator[None]:
    """csv's field size limit raised to `size` for one file (the default 131,072 characters would stop a file
    at a long caption and name the wrong line)."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, size + 1))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def csv_rows(path: str | Path, **kwargs) -> list[tuple[int, list[str]]]:
    """(line where the row starts, fields) per non-empty row of a header-less CSV file, read as `csv_dicts`."""
    path = Path(path)
    text = read_text(path, **kwargs)
    rows = []
    with _field_limit(len(text)):
        for line, fields, why in _csv_records(path, text, ",", True, None):
            if why is not None:
                raise TextFileError(path, line, why)
            rows.append((line, fields))
    return rows


def unencodable(value: object, name: str = "value") -> str | None:
    """Where a JSON-like value holds text UTF-8 cannot encode (lone surrogates), as a message; None if clean."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            bad = value[err.start : err.end].encode("utf-8", "backslashreplace").decode("ascii")
            return (
                f"{name} holds text that is not valid Unicode ({bad} at character {err.start + 1}, a lone "
                "surrogate); fix the \\u escape in the file"
            )
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = unencodable(k, f"{name} key") or unencodable(v, f"{name}[{safe_text(k)!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = unencodable(v, f"{name}[{i}]")
            if found:
                return found
    return None


# Unicode categories that show nothing on their own: control, format (zero-width, U+FEFF), surrogate, the
# separators (white space), and the marks (a combining accent or a variation selector needs a base to show on)
_INVISIBLE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me", "Mc"))
# Letters and symbols that fonts draw as blank (the Hangul fillers, the blank Braille pattern, the null notehead)
_BLANK_CODE_POINTS = frozenset("\u115f\u1160\u3164\uffa0\u2800\U0001d159")


def has_visible_text(text: str) -> bool:
    """Whether `text` holds a character a reader would see: text of only white space, zero-width or control
    characters, lone combining marks or variation selectors, or blank-drawn letters (U+3164 HANGUL FILLER,
    U+2800 BRAILLE PATTERN BLANK) is as empty as "" and must be treated so."""
    return any(
        ch not in _BLANK_CODE_POINTS and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES for ch in text
    )


def safe_text(value: object) -> object:
    """`value` with every unencodable character written as its escape (``\\ud800``), so an error row that
    carries the user's text can still be written."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {safe_text(k): safe_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_text(v) for v in value]
    return value


_ENTRY_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(mode: int) -> str | None:
    """What a non-regular file of this `st_mode` is, in words ("a folder", "a FIFO (named pipe)", ...), None
    for a regular file or a kind without a name: the one wording for readers and writers."""
    return next((what for test, what in _ENTRY_KINDS if test(mode)), None)


def entry_kind(path: str | Path) -> str | None:
    """What is at `path` itself when it is not a regular file ("a symlink", "a folder", ...), None for a regular
    file or nothing: a writer's test before replacing `path`, since os.replace would swap a link itself."""
    try:
        mode = os.lstat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else special_kind(mode) or "a special file"


def path_problem(err: BaseException) -> str:
    """Why a path cannot be opened or looked at, in words, from the error that said so (the caller names the
    path): the one wording for text files and images."""
    import errno

    if isinstance(err, ValueError):
        return "holds a NUL byte"
    code = getattr(err, "errno", None)
    if code == errno.ELOOP or isinstance(err, RuntimeError):
        return "is a symlink loop"
    if code == errno.ENAMETOOLONG:
        return "is too long (a path component over 255 bytes, or the whole path over the system's limit)"
    if code == errno.ENOENT:
        return "not found"
    if code == errno.ENOTDIR:
        return "not found (a part of the path is a file, not a folder)"
    return f"cannot be read ({getattr(err, 'strerror', None) or err})"


def file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file, in the words recon_score.images uses for image paths, or None for a
    regular file. Never opens it: a FIFO or a device would block or never end."""
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError, RuntimeError) as err:
        return path_problem(err)
    kind = special_kind(mode)
    return f"is {kind}, not a regular file" if kind else None
