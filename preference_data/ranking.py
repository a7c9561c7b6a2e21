"""Ranking format for UCM-preference-style sets (the ReconScore paper, section 5.1): per image (and rater), 3 or
more candidate captions with their human rank (1 = best). The JSONL and CSV layouts are in docs/correlate.md,
"Ranking format"; preference_data/examples/ has a complete file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from preference_data import _io
from preference_data.schema import PreferenceFormatError, make_table
from recon_score.textfiles import json_objects

MIN_CANDIDATES = 2  # a ranking needs at least one pair; UCM-preference has 3 per image
LINE_KEYS = ("image", "references", "candidates", "rater", "id")
CANDIDATE_KEYS = ("caption", "rank", "model", "id")
CSV_REQUIRED = ("image", "caption", "rank")
CSV_OPTIONAL = ("model", "rater", "candidate_id", "references")


def load_ranking(path: str | Path) -> pd.DataFrame:
    """A ranking file (.jsonl or .csv) -> the tidy table, one row per (image, rater, candidate)."""
    path = Path(path)
    kind = _io.suffix_format(path)
    groups = _read_jsonl(path) if kind == "jsonl" else _read_csv(path)
    rows = []
    refs_by_image: dict[str, tuple[int, list[str]]] = {}
    seen: dict[tuple[str, str | None], int] = {}
    for lineno, image, rater, refs, cands in groups:
        key = (image, rater)
        if key in seen:
            who = f"rater {rater!r}" if rater else "no rater"
            raise PreferenceFormatError(
                path,
                lineno,
                f"image {image!r} ({who}) was already ranked at line {seen[key]}; give each "
                "rater's ranking once (use `rater` to tell raters apart)",
            )
        seen[key] = lineno
        if len(cands) < MIN_CANDIDATES:
            raise PreferenceFormatError(
                path,
                lineno,
                f"image {image!r} has {len(cands)} candidate(s); a ranking needs at least {MIN_CANDIDATES}",
            )
        if image in refs_by_image and refs and refs_by_image[image][1] and refs != refs_by_image[image][1]:
            raise PreferenceFormatError(
                path,
                lineno,
                f"references of image {image!r} differ from those at line {refs_by_image[image][0]}",
            )
        if refs or image not in refs_by_image:
            refs_by_image[image] = (lineno, refs)
        for c_line, caption, rank, model, cid in cands:
            rows.append(
                {
                    "image": image,
                    "candidate": caption,
                    "references": None,
                    "judgment": float(rank),
                    "judgment_kind": "rank",
                    "rater": rater,
                    "model": model,
                    "candidate_id": cid,
                    "source": f"{path.name}:{c_line}",
                }
            )
    if not rows:
        raise PreferenceFormatError(path, None, "no rankings found")
    for row in rows:
        row["references"] = refs_by_image[row["image"]][1]
    notes = [f"{len(rows)} ranked candidates over {len(refs_by_image)} images ({len(seen)} rankings)"]
    return make_table(rows, fmt="ranking", path=path, notes=notes)


def _read_jsonl(path: Path):
    for lineno, obj in json_objects(path):
        _io.check_keys(path, lineno, obj, LINE_KEYS)
        image = _io.text_field(path, lineno, obj.get("image"), "image")
        rater = _io.optional_text(path, lineno, obj.get("rater"), "rater")
        refs = _io.references_value(path, lineno, obj.get("references"))
        cands = obj.get("candidates")
        if not isinstance(cands, list):
            raise PreferenceFormatError(
                path, lineno, "'candidates' must be a list of {caption, rank[, model]}"
            )
        parsed = []
        for i, c in enumerate(cands):
            what = f"candidates[{i}]"
            if not isinstance(c, dict):
                raise PreferenceFormatError(path, lineno, f"{what} must be an object with caption and rank")
            _io.check_keys(path, lineno, c, CANDIDATE_KEYS, what=f"key in {what}")
            caption = _io.text_field(path, lineno, c.get("caption"), f"{what}.caption")
            rank = _io.rank(path, lineno, c.get("rank"), f"{what}.rank")
            model = _io.optional_text(path, lineno, c.get("model"), f"{what}.model")
            cid = c.get("id")
            parsed.append((lineno, caption, rank, model, None if cid is None else str(cid)))
        yield lineno, image, rater, refs, parsed


def _read_csv(path: Path):
    # (image, rater) -> its first line and its candidates, in the order first seen
    groups: dict[tuple[str, str | None], dict] = {}
    refs_at: dict[str, tuple[int, list[str]]] = {}
    for lineno, rec in _io.csv_records(path, required=CSV_REQUIRED, optional=CSV_OPTIONAL):
        image = _io.text_field(path, lineno, rec["image"], "image")
        caption = _io.text_field(path, lineno, rec["caption"], "caption")
        rank = _io.rank(path, lineno, rec["rank"])
        model = _io.optional_text(path, lineno, rec.get("model"), "model")
        rater = _io.optional_text(path, lineno, rec.get("rater"), "rater")
        cid = _io.optional_text(path, lineno, rec.get("candidate_id"), "candidate_id")
        refs = _io.references_value(path, lineno, rec.get("references"))
        if refs:
            if image in refs_at and refs_at[image][1] != refs:
                raise PreferenceFormatError(
                    path,
                    lineno,
                    f"references of image {image!r} differ from those at line {refs_at[image][0]}",
                )
            refs_at[image] = (lineno, refs)
        group = groups.setdefault((image, rater), {"line": lineno, "cands": []})
        group["cands"].append((lineno, caption, rank, model, cid))
    for (image, rater), g in groups.items():
        yield g["line"], image, rater, refs_at.get(image, (0, []))[1], g["cands"]
