"""The one tidy table every loader returns (one row per human judgment, never averaged over raters: the CLIPScore
protocol correlates every row), and the error every loader raises."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from recon_score.textfiles import TextFileError

COLUMNS = (
    "image",  # image id or path relative to an images root
    "candidate",  # the caption being judged
    "references",  # list[str]: the image's reference captions after the dataset's protocol (may be empty)
    "judgment",  # float: the human judgment of this (image, candidate) by one rater
    "judgment_kind",  # one of JUDGMENT_KINDS
    "rater",  # rater id (str) or None
    "model",  # the system that produced the candidate (str) or None
    "candidate_id",  # the dataset's id of the candidate (caption id, system name, ...) or None
    "source",  # "file:line" the judgment came from
)

# judgment kind -> does a larger value mean a better caption?
JUDGMENT_KINDS: dict[str, bool] = {
    "rank": False,  # 1 = best (ranking format, UCM-preference)
    "rating": True,  # Flickr8K-Expert 1-4
    "yes_fraction": True,  # Flickr8K-CrowdFlower share of "describes the image" votes
    "score": True,  # THumB human_score, generic CSV
}


class PreferenceFormatError(TextFileError):
    """A preference file's record breaks its format's rules (a field, a column, a duplicate); names the file and
    line. What makes a file unreadable as text, JSON or CSV is the `TextFileError` it derives from."""


def normalize_space(text: str) -> str:
    """Collapse runs of whitespace, as Hessel et al.'s Flickr8K code does before scoring (`' '.join(s.split())`)."""
    return " ".join(str(text).split())


def make_table(
    rows: Iterable[dict], *, fmt: str, path: str | Path, notes: list[str] | None = None
) -> pd.DataFrame:
    """Rows (dicts with COLUMNS) -> the tidy DataFrame, with `attrs` saying where it came from. Candidates and
    references are whitespace-normalised here, for every loader."""
    df = pd.DataFrame(list(rows), columns=list(COLUMNS))
    df["candidate"] = df["candidate"].map(normalize_space)
    df["references"] = df["references"].map(lambda refs: [normalize_space(r) for r in refs])
    unknown = set(df["judgment_kind"]) - set(JUDGMENT_KINDS)
    if unknown:
        raise ValueError(f"unknown judgment kinds {sorted(unknown)}; known: {sorted(JUDGMENT_KINDS)}")
    df["judgment"] = df["judgment"].astype(float)
    for col in ("rater", "model", "candidate_id"):  # missing = None, not NaN, in these string columns
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df.attrs.update({"format": fmt, "path": str(path), "notes": list(notes or [])})
    return df


def higher_is_better(kind: str) -> bool:
    try:
        return JUDGMENT_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown judgment kind {kind!r}; known: {', '.join(JUDGMENT_KINDS)}") from None
