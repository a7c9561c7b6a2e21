"""Reading word lists (FreeDom's vocabulary, BASIC's text corpora) from .txt or .csv (a named text column, else the
first). Empty entries and repeats are dropped, first occurrences kept: a repeated word would count twice in
FreeDom's frequencies."""

from __future__ import annotations

from pathlib import Path

from recon_score.errors import InputError
from recon_score.textfiles import csv_rows, read_json, read_lines

TEXT_COLUMNS = ("class", "name", "object_name", "text", "word", "prompt", "concept", "label_name")


def read_text_list(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"word list {path} does not exist")
    if path.suffix.lower() != ".csv":
        items = [line.strip() for _, line in read_lines(path)]
    else:
        rows = [r for _, r in csv_rows(path)]
        header = [c.strip().lower() for c in rows[0]] if rows else []
        wanted = next((c for c in TEXT_COLUMNS if c in header), None)
        if wanted is not None:
            j = header.index(wanted)
            items = [r[j].strip() if j < len(r) else "" for r in rows[1:]]
        else:
            items = [r[0].strip() for r in rows]
    out = list(dict.fromkeys(x for x in items if x))
    if not out:
        raise InputError(f"word list {path} has no entries")
    return out


def read_phrases(path: str | Path) -> dict[str, list[str]]:
    """SEARLE-OTI's GPT phrases: a CSV of ``concept,phrase`` rows (a header row naming them is skipped), or
    JSON {concept: [phrases]}. A phrase that does not contain its concept is refused, naming its line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"phrases file {path} does not exist")
    out: dict[str, list[str]] = {}
    if path.suffix.lower() == ".json":
        data = read_json(path, expect=dict, what="phrases file")
        if not all(isinstance(v, list) for v in data.values()):
            raise InputError(f"{path}: expected a JSON object {{concept: [phrases]}}")
        items = [(n, str(c), str(p)) for n, (c, ps) in enumerate(data.items(), start=1) for p in ps]
    else:
        rows = csv_rows(path)
        if rows and [x.strip().lower() for x in rows[0][1][:2]] == ["concept", "phrase"]:
            rows = rows[1:]
        items = []
        for n, row in rows:
            if len(row) < 2:
                raise InputError(f"{path}: line {n} has {len(row)} column(s), expected concept,phrase")
            items.append((n, row[0].strip(), row[1].strip()))
    for n, concept, phrase in items:
        if concept not in phrase:
            raise InputError(
                f"{path}: line {n}: the phrase {phrase!r} does not contain its concept {concept!r}"
            )
        out.setdefault(concept, []).append(phrase)
    if not out:
        raise InputError(f"phrases file {path} has no entries")
    return out
