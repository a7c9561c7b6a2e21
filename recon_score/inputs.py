"""Caption files: JSONL or CSV with columns `image` and `caption`, optional `id`.

A malformed line becomes an error row naming the file and line; it never stops the run. Only a file that
cannot be a captions table at all (no `image`/`caption` columns, unreadable) is fatal.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from recon_score.errors import InputError, ReconScoreError
from recon_score.images import resolve_under

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


def _fail(path: Path, line: int, msg: str) -> str:
    return f"{path.name}:{line}: {msg}"


def _read_jsonl(path: Path) -> list[tuple[int, dict | None, str | None]]:
    out = []
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as err:
                out.append(
                    (lineno, None, _fail(path, lineno, f"invalid JSON ({err.msg} at column {err.colno})"))
                )
                continue
            if not isinstance(obj, dict):
                out.append(
                    (lineno, None, _fail(path, lineno, f"expected a JSON object, got {type(obj).__name__}"))
                )
                continue
            out.append((lineno, obj, None))
    return out


def _read_csv(path: Path) -> list[tuple[int, dict | None, str | None]]:
    out = []
    with path.open("r", encoding="utf-8-sig", newline="", errors="replace") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in fields]
        if missing:
            raise ReconScoreError(
                f"{path}: CSV header must have columns {', '.join(REQUIRED)} (optional: id); "
                f"missing {', '.join(missing)}; found {', '.join(fields) or 'no header'}"
            )
        for rec in reader:
            lineno = reader.line_num
            if None in rec:  # more fields than the header: keep the id for the error row, drop the rest
                extra = rec.pop(None)
                msg = _fail(
                    path,
                    lineno,
                    f"{len(fields) + len(extra)} fields, header has {len(fields)} "
                    "(quote fields that contain commas)",
                )
                out.append((lineno, {"id": rec.get("id")}, msg))
                continue
            out.append((lineno, dict(rec), None))
    return out


def read_caption_rows(path: str | Path, *, root: str | Path | None = None) -> list[InputRow]:
    """Rows of a captions file, with `image_path` resolved under `root` (default: the file's folder).

    Raises:
        ReconScoreError: the file is missing, of unknown type, or has no image/caption columns.
    """
    path = Path(path)
    if not path.is_file():
        raise ReconScoreError(f"captions file {path} not found")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        records = _read_jsonl(path)
    elif suffix in (".csv", ".tsv"):
        records = _read_csv(path)
    else:
        raise ReconScoreError(f"captions file {path}: unknown format {suffix!r}; use .jsonl or .csv")
    base = Path(root) if root is not None else path.parent
    if not base.is_dir():
        raise ReconScoreError(f"image root {base} is not a folder")
    rows: list[InputRow] = []
    first_line_of_id: dict[str, int] = {}
    for index, (lineno, rec, err) in enumerate(records):
        raw_id = rec.get("id") if rec else None
        row_id = str(raw_id) if raw_id not in (None, "") else str(index)
        row = InputRow(index=index, line=lineno, id=row_id, image=None, caption=None, error=err)
        if rec is not None and err is None:
            row.image = rec.get("image")
            row.caption = rec.get("caption")
            row.extra = {k: v for k, v in rec.items() if k not in ("id", "image", "caption")} or None
            if suffix == ".jsonl" and not ({"image", "caption"} <= rec.keys()):
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
                try:
                    row.image_path = resolve_under(base, row.image.strip())
                except InputError as e:
                    row.error = _fail(path, lineno, str(e))
        rows.append(row)
    return rows
