"""The field checks the preference loaders share, each problem naming the file and line. Reading the files is
`recon_score.textfiles`' (strict UTF-8, lines by "\\n", JSON objects without a repeated key, one CSV policy)."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from pathlib import Path

from preference_data.schema import PreferenceFormatError
from recon_score.textfiles import csv_dicts


def csv_records(
    path: Path, *, required: tuple[str, ...], optional: tuple[str, ...]
) -> Iterator[tuple[int, dict]]:
    """(line where the record starts, record) for every record of a CSV read by the project's one CSV policy
    (`recon_score.textfiles.csv_dicts`); the header names every required column and no unknown one, and every
    record has the header's width."""
    header, records = csv_dicts(path)
    missing = [c for c in required if c not in header]
    if missing:
        raise PreferenceFormatError(
            path,
            1,
            f"the CSV header must have columns {', '.join(required)} (optional: {', '.join(optional)}); "
            f"missing {', '.join(missing)}; found {', '.join(header) or 'no header'}",
        )
    check_keys(path, 1, header, (*required, *optional), what="column")
    for line, rec in records:
        if None in rec:
            raise PreferenceFormatError(path, line, f"more fields than the header's {len(header)}")
        if any(rec[c] is None for c in required):
            raise PreferenceFormatError(path, line, f"fewer fields than the header's {len(header)}")
        yield line, rec


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


def companion_file(path: Path, given: str | Path | None, default: str, what: str) -> Path:
    """The file a format reads beside its judgments (`what`: "references file (mscoco_references.json from
    THumB)"): `given`, else `default` next to `path`; a missing one is named with how to give it."""
    found = Path(given) if given is not None else path.parent / default
    if not found.is_file():
        raise PreferenceFormatError(
            path,
            None,
            f"needs the {what} {found}; put it next to {path.name} or pass its path (--references)",
        )
    return found
