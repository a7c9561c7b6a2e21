"""Reading word lists: FreeDom's vocabulary and BASIC's text corpora, from .txt (one entry per line) or .csv.

A CSV whose first row names a text column (``class``, ``name``, ``object_name``, ``text``, ``word``,
``prompt``) is read from that column, skipping the header: the Open Images class list (``label,class``) gives
its human-readable names, i-CIR's generic_subjects.csv (``object_name``) its objects. Otherwise the first
column of every row is used (i-CIR's generic_styles.csv has no header). Empty entries and repeats are dropped,
keeping first occurrences: a repeated word would count twice in FreeDom's frequencies.
"""

from __future__ import annotations

from pathlib import Path

from recon_score.errors import InputError
from recon_score.textfiles import csv_rows, read_lines

TEXT_COLUMNS = ("class", "name", "object_name", "text", "word", "prompt", "concept", "label_name")


def read_text_list(path: str | Path, *, column: str | None = None) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"word list {path} does not exist")
    if path.suffix.lower() != ".csv":
        items = [line.strip() for _, line in read_lines(path)]
    else:
        rows = [r for _, r in csv_rows(path)]
        header = [c.strip().lower() for c in rows[0]] if rows else []
        wanted = column.lower() if column else next((c for c in TEXT_COLUMNS if c in header), None)
        if column and wanted not in header:
            raise InputError(f"{path}: no column {column!r} in the header {rows[0] if rows else []}")
        if wanted is not None:
            j = header.index(wanted)
            items = [r[j].strip() if j < len(r) else "" for r in rows[1:]]
        else:
            items = [r[0].strip() for r in rows]
    out = list(dict.fromkeys(x for x in items if x))
    if not out:
        raise InputError(f"word list {path} has no entries")
    return out
