"""Caption files: JSONL, CSV or TSV with columns `image` and `caption`, optional `id`.

A malformed line (or text that could never be written to the results, a lone surrogate) becomes an error row
naming the file and line; only a file that cannot be a captions table at all is fatal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from recon_score.errors import EmptyInputError, InputError, ReconScoreError
from recon_score.images import resolve_under
from recon_score.textfiles import csv_dicts, file_problem, json_lines, safe_text, unencodable

REQUIRED = ("image", "caption")


@dataclass
class InputRow:
    index: int  # 0-based position among data rows: the output order
    line: int  # 1-based line in the file (CSV: the line where the record ends)
    id: str
    image: str | None
    caption: object
    image_path: Path | None = None
    error: str | None = None
    extra: dict | None = None
    where: str = ""  # "FILE:LINE", prefixed to errors found after reading (image, scoring)
    image_error: bool = False  # `error` is only about the image path (text-only commands ignore it)


def _fail(path: Path, line: int, msg: str) -> str:
    return f"{path.name}:{line}: {msg}"


def _read_jsonl(path: Path) -> list[tuple[int, dict | None, str | None]]:
    out = []
    for lineno, obj, err in json_lines(path):
        if err is None and not isinstance(obj, dict):
            err = _fail(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        raw_id = obj.get("id") if err is None else None
        if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, (str, int))):
            # str() would not give back what was written: 1e400 -> 'inf', 1.50 -> '1.5', true -> 'True'
            err = _fail(
                path,
                lineno,
                f"`id` must be text or a whole number, got {type(raw_id).__name__} (read as {raw_id!r}); "
                'write it in quotes ("...") to keep it as written',
            )
        out.append((lineno, obj if err is None else None, err))
    objects = [(lineno, obj) for lineno, obj, err in out if err is None]
    # no line with any required field: the field names are wrong (a file-level error), not some rows
    if objects and not any(c in obj for _, obj in objects for c in REQUIRED):
        lineno, obj = objects[0]
        raise ReconScoreError(
            f"{path}: no line has the fields {', '.join(REQUIRED)} (optional: id); "
            f"line {lineno} has {', '.join(map(str, obj)) or 'no fields'}"
        )
    return out


def _read_csv(path: Path) -> list[tuple[int, dict | None, str | None]]:
    out = []
    unreadable: list[tuple[int, str]] = []
    fields, records = csv_dicts(path, errors=unreadable)
    missing = [c for c in REQUIRED if c not in fields]
    if missing:
        raise ReconScoreError(
            f"{path}: header must have columns {', '.join(REQUIRED)} (optional: id); "
            f"missing {', '.join(missing)}; found {', '.join(fields) or 'no header'}"
        )
    for lineno, rec in records:
        if None in rec:  # more fields than the header: keep the id for the error row, drop the rest
            extra = rec.pop(None)
            msg = _fail(
                path,
                lineno,
                f"{len(fields) + len(extra)} fields, header has {len(fields)} "
                "(quote fields that contain the delimiter)",
            )
            out.append((lineno, {"id": rec.get("id")}, msg))
            continue
        out.append((lineno, dict(rec), None))
    out += [
        (lineno, None, _fail(path, lineno, why)) for lineno, why in unreadable
    ]  # one row each, in line order
    return sorted(out, key=lambda r: r[0])


def _automatic_id(index: int, line: int, explicit: set[str]) -> str:
    """A row without an id gets its 0-based position, or, where another row uses that as its explicit id,
    `line{N}` (then `line{N}~2`, ...): an automatic id never collides with an explicit one."""
    candidate, k = str(index), 1
    while candidate in explicit:
        k += 1
        candidate = f"line{line}" if k == 2 else f"line{line}~{k - 1}"
    return candidate


def read_caption_rows(path: str | Path, *, root: str | Path | None = None) -> list[InputRow]:
    """Rows of a captions file, with `image_path` resolved under `root` (default: the file's folder); raises for a
    file that cannot be a captions table (ReconScoreError) or holds no rows (EmptyInputError)."""
    path = Path(path)
    problem = file_problem(path)
    if problem:
        raise ReconScoreError(f"captions file {path} {problem}")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        records = _read_jsonl(path)
    elif suffix in (".csv", ".tsv"):
        records = _read_csv(path)
    else:
        raise ReconScoreError(f"captions file {path}: unknown format {suffix!r}; use .jsonl, .csv or .tsv")
    if not records:
        raise EmptyInputError(
            f"{path}: no rows ({'a header and nothing else' if suffix in ('.csv', '.tsv') else 'no data lines'}); "
            "nothing to do"
        )
    base = Path(root) if root is not None else path.parent
    if not base.is_dir():
        raise ReconScoreError(f"image root {base} is not a folder")
    rows: list[InputRow] = []
    first_line_of_id: dict[str, int] = {}
    explicit = {str(rec["id"]) for _, rec, _ in records if rec and rec.get("id") not in (None, "")}
    for index, (lineno, rec, err) in enumerate(records):
        raw_id = rec.get("id") if rec else None
        row_id = str(raw_id) if raw_id not in (None, "") else _automatic_id(index, lineno, explicit)
        bad_text = next(
            (
                m
                for k, v in (rec or {}).items()
                if (m := unencodable(k, "a field name") or unencodable(v, f"`{safe_text(k)}`"))
            ),
            None,
        )
        if bad_text:  # validated on read: such text could never be written to the results
            rec, row_id = safe_text(rec), str(safe_text(row_id))
            err = err or _fail(path, lineno, bad_text)
        row = InputRow(
            index=index,
            line=lineno,
            id=row_id,
            image=None,
            caption=None,
            error=err,
            where=f"{path.name}:{lineno}",
        )
        if rec is not None and (err is None or bad_text):
            row.image = rec.get("image")
            row.caption = rec.get("caption")
            row.extra = {k: v for k, v in rec.items() if k not in ("id", "image", "caption")} or None
        jsonl = suffix in (".jsonl", ".ndjson")
        if rec is not None and err is None and jsonl and not ({"image", "caption"} <= rec.keys()):
            missing = [c for c in REQUIRED if c not in rec]
            row.error = _fail(path, lineno, f"missing field(s) {', '.join(missing)}")
        if row.error is None and row_id in first_line_of_id:
            row.error = _fail(
                path, lineno, f"duplicate id {row_id!r} (first used on line {first_line_of_id[row_id]})"
            )
        first_line_of_id.setdefault(row_id, lineno)
        if row.error is None:
            if not isinstance(row.image, str) or not row.image.strip():
                row.error = _fail(path, lineno, "empty or non-text `image` field")
            else:
                try:  # the path as given: "a.png " is not a.png
                    row.image_path = resolve_under(base, row.image)
                except InputError as e:
                    row.error = _fail(path, lineno, str(e))
            row.image_error = row.error is not None
        rows.append(row)
    return rows
