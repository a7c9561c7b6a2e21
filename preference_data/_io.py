"""Line-numbered JSONL and CSV reading shared by the loaders: every problem names the file and line."""

from __future__ import annotations

import csv
import difflib
import json
import math
from collections.abc import Iterator
from pathlib import Path

from preference_data.schema import PreferenceFormatError


def read_text(path: Path) -> str:
    """The project's text policy (`recon_score.textfiles`, which this package may not import): strict UTF-8,
    a leading BOM dropped, an invalid byte reported with its file:line, never replaced by U+FFFD."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise PreferenceFormatError(path, None, f"cannot be read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise PreferenceFormatError(
            path,
            line,
            f"not valid utf-8 text (byte 0x{data[err.start]:02x} at column {column}); save the file as UTF-8",
        ) from None


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) for every line, numbered by "\\n" as editors do."""
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        yield lineno, line.removesuffix("\r")


def loads(path: Path, lineno: int | None, text: str):
    """json.loads with every failure as a PreferenceFormatError naming the line: a syntax error, nesting deeper
    than the recursion limit, an integer of more digits than Python converts."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(path, lineno, pairs))
    except json.JSONDecodeError as err:
        raise PreferenceFormatError(path, lineno, f"invalid JSON ({err.msg} at column {err.colno})") from None
    except PreferenceFormatError:
        raise
    except RecursionError:
        raise PreferenceFormatError(path, lineno, "JSON nested too deeply (thousands of [ or {)") from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        why = str(err).split(";")[0]
        raise PreferenceFormatError(
            path, lineno, f"JSON holds a number that cannot be read ({why})"
        ) from None


def _unique_keys(path: Path, lineno: int | None, pairs: list[tuple[str, object]]) -> dict:
    """An object naming a key twice is refused, as `recon_score.textfiles.unique_keys` does (json.loads would
    keep the second value silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise PreferenceFormatError(path, lineno, f"key {twice!r} appears twice in one JSON object; keep one")
    return obj


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line."""
    for lineno, raw in text_lines(path):
        if not raw.strip():
            continue
        obj = loads(path, lineno, raw)
        if not isinstance(obj, dict):
            raise PreferenceFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def csv_records(
    path: Path, *, required: tuple[str, ...], optional: tuple[str, ...]
) -> Iterator[tuple[int, dict]]:
    """(line where the record starts, record) for every CSV record; the header must name every required column.

    The project's one CSV policy (`recon_score.textfiles.csv_dicts`, which this package may not import; a shared
    test holds the two to the same answers): lines split on "\\n" only, strict quoting, a field of any length
    (the csv module's field limit is raised for the file), every line number where the record starts."""
    text = read_text(path)
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, len(text) + 1))
    try:
        yield from _csv_dicts(path, csv.reader(iter(lines), strict=True), required, optional)
    finally:
        csv.field_size_limit(old_limit)


def _csv_dicts(path: Path, reader, required: tuple[str, ...], optional: tuple[str, ...]):
    done = 0  # lines consumed by complete records
    try:
        fields = next((row for row in reader if row), [])
        done = reader.line_num
        missing = [c for c in required if c not in fields]
        if missing:
            raise PreferenceFormatError(
                path,
                done or 1,
                f"the CSV header must have columns {', '.join(required)} (optional: {', '.join(optional)}); "
                f"missing {', '.join(missing)}; found {', '.join(fields) or 'no header'}",
            )
        check_keys(path, done, fields, (*required, *optional), what="column")
        twice = sorted({c for c in fields if fields.count(c) > 1})
        if twice:
            raise PreferenceFormatError(path, done, f"column {twice[0]!r} appears twice in the header")
        for row in reader:
            first, done = done + 1, reader.line_num
            if not row:
                continue
            if len(row) > len(fields):
                raise PreferenceFormatError(path, first, f"more fields than the header's {len(fields)}")
            rec = dict(zip(fields, row))
            if any(c not in rec for c in required):
                raise PreferenceFormatError(path, first, f"fewer fields than the header's {len(fields)}")
            yield first, {**{c: None for c in fields}, **rec}
    except csv.Error as err:
        why = "a quote is never closed" if "unexpected end of data" in str(err) else str(err)
        raise PreferenceFormatError(path, done + 1, f"malformed CSV ({why})") from None


def check_keys(path: Path, lineno: int, keys, allowed: tuple[str, ...], *, what: str = "key") -> None:
    """Unknown keys are an error, not silently ignored: a misspelt `refrences` would drop the references."""
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PreferenceFormatError(
                path, lineno, f"unknown {what} {key!r}{hint}; allowed: {', '.join(allowed)}"
            )


def text_field(path: Path, lineno: int, value, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PreferenceFormatError(path, lineno, f"{name!r} must be a non-empty string, got {value!r}")
    return value


def optional_text(path: Path, lineno: int, value, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PreferenceFormatError(path, lineno, f"{name!r} must be a string, got {value!r}")
    return value


def references_value(path: Path, lineno: int, value) -> list[str]:
    """A JSON list of strings (JSONL value, or a CSV cell holding one); empty/missing -> []."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise PreferenceFormatError(
                path, lineno, 'references must be a JSON array of strings, e.g. ["a farm", "fields"]'
            ) from None
    if not isinstance(value, list) or not all(isinstance(r, str) and r.strip() for r in value):
        raise PreferenceFormatError(path, lineno, "references must be a list of non-empty strings")
    return value


def number(path: Path, lineno: int, value, name: str) -> float:
    if isinstance(value, bool):
        raise PreferenceFormatError(path, lineno, f"{name!r} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PreferenceFormatError(path, lineno, f"{name!r} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise PreferenceFormatError(path, lineno, f"{name!r} must be finite, got {value!r}")
    return x


def rank(path: Path, lineno: int, value, name: str = "rank") -> int:
    x = number(path, lineno, value, name)
    if x != int(x) or x < 1:
        raise PreferenceFormatError(
            path, lineno, f"{name!r} must be a whole number >= 1 (1 = best), got {value!r}"
        )
    return int(x)


def suffix_format(path: Path) -> str:
    ext = path.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if ext == ".csv":
        return "csv"
    raise PreferenceFormatError(
        path, None, f"cannot tell JSONL from CSV by the suffix {ext!r}; use .jsonl or .csv"
    )
