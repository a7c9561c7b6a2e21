"""Human-judgment sets (rankings, ratings) as one tidy pandas table; generated robustness sets (the ReconScore paper's Tables 4 and 5).

Every loader returns one row per human judgment with the columns in `schema.COLUMNS`: image, candidate,
references, judgment, judgment_kind, rater, model, candidate_id, source. Pure data loading: this package imports
nothing from recon_score, describer, retrieval or eval.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from preference_data.flickr8k import load_flickr8k_crowdflower, load_flickr8k_expert
from preference_data.generic import load_scores_csv
from preference_data.ranking import load_ranking
from preference_data.references import load_references
from preference_data.schema import COLUMNS, JUDGMENT_KINDS, PreferenceFormatError, higher_is_better
from preference_data.thumb import load_thumb

__all__ = [
    "COLUMNS",
    "FORMATS",
    "JUDGMENT_KINDS",
    "PreferenceFormatError",
    "higher_is_better",
    "load_flickr8k_crowdflower",
    "load_flickr8k_expert",
    "load_preferences",
    "load_ranking",
    "load_references",
    "load_scores_csv",
    "load_thumb",
]

# format name -> loader(path, references) ; `references` is the separate caption/reference file where a format
# keeps one (Flickr8k.token.txt, mscoco_references.json), else it must be None
FORMATS: dict[str, Callable[[Path, Path | None], pd.DataFrame]] = {
    "ranking": lambda p, r: _no_refs("ranking", r) or load_ranking(p),
    "flickr8k-expert": load_flickr8k_expert,
    "flickr8k-crowdflower": load_flickr8k_crowdflower,
    "thumb": load_thumb,
    "csv": lambda p, r: _no_refs("csv", r) or load_scores_csv(p),
}


def _no_refs(fmt: str, references) -> None:
    if references is not None:
        raise ValueError(
            f"format {fmt!r} keeps references inside the file; a separate references file is not used"
        )


def load_preferences(path: str | Path, fmt: str, *, references: str | Path | None = None) -> pd.DataFrame:
    """Load `path` as format `fmt` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown preference format {fmt!r}; known: {', '.join(FORMATS)}")
    path = Path(path)
    if not path.is_file():  # never opened: a FIFO or a device would block the read
        why = "is not a regular file (a folder, FIFO or device)" if path.exists() else "not found"
        raise PreferenceFormatError(path, None, f"file {why}")
    return FORMATS[fmt](path, Path(references) if references is not None else None)
