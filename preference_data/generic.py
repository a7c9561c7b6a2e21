"""Generic scored captions: a CSV with columns `image, caption, score` (higher = better), optionally `references`
(a JSON array of strings), `rater`, `model`, `candidate_id`. One row per judgment; several raters of the same
caption are several rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from preference_data import _io
from preference_data.schema import PreferenceFormatError, make_table

REQUIRED = ("image", "caption", "score")
OPTIONAL = ("references", "rater", "model", "candidate_id")


def load_scores_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    rows = []
    for lineno, rec in _io.csv_records(path, required=REQUIRED, optional=OPTIONAL):
        rows.append(
            {
                "image": _io.text_field(path, lineno, rec["image"], "image"),
                "candidate": _io.text_field(path, lineno, rec["caption"], "caption"),
                "references": _io.references_value(path, lineno, rec.get("references")),
                "judgment": _io.number(path, lineno, rec["score"], "score"),
                "judgment_kind": "score",
                "rater": _io.optional_text(path, lineno, rec.get("rater"), "rater"),
                "model": _io.optional_text(path, lineno, rec.get("model"), "model"),
                "candidate_id": _io.optional_text(path, lineno, rec.get("candidate_id"), "candidate_id"),
                "source": f"{path.name}:{lineno}",
            }
        )
    if not rows:
        raise PreferenceFormatError(path, None, "no rows after the header")
    return make_table(rows, fmt="csv", path=path, notes=[f"{len(rows)} scored captions"])
