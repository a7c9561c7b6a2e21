"""The registry of human-judgment formats `reconscore correlate --format` reads: each names its preference_data
loader and the facts the correlation needs. It lives in eval because preference_data imports nothing of the
project."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from recon_score.registry import Entry, Registry


class TauVariant(StrEnum):
    """scipy's `variant=`: τ-b corrects for ties in both variables; τ-c (Stuart's) for rectangular tables."""

    B = "b"
    C = "c"


@dataclass(frozen=True)
class PreferenceFormat(Entry):
    headline: TauVariant  # the Kendall variant published for this set
    ships_images: bool  # False: no image files come with the set (image metrics need --images)
    references_file: bool  # the loader takes a separate caption/reference file (Flickr8k.token.txt, ...)


FORMATS: Registry[PreferenceFormat] = Registry(
    "preference format",
    (
        PreferenceFormat(
            "ranking",
            "preference_data.ranking:load_ranking",
            "per-image rankings of candidates (JSONL or CSV; references inside)",
            TauVariant.B,
            ships_images=True,
            references_file=False,
        ),
        PreferenceFormat(
            "flickr8k-expert",
            "preference_data.flickr8k:load_flickr8k_expert",
            "Flickr8K-Expert ExpertAnnotations.txt + Flickr8k.token.txt",
            TauVariant.C,
            ships_images=False,
            references_file=True,
        ),
        PreferenceFormat(
            "flickr8k-crowdflower",
            "preference_data.flickr8k:load_flickr8k_crowdflower",
            "Flickr8K-CrowdFlower CrowdFlowerAnnotations.txt + Flickr8k.token.txt",
            TauVariant.B,
            ships_images=False,
            references_file=True,
        ),
        PreferenceFormat(
            "thumb",
            "preference_data.thumb:load_thumb",
            "THumB 1.0 human scores + mscoco_references.json",
            TauVariant.B,
            ships_images=False,
            references_file=True,
        ),
        PreferenceFormat(
            "csv",
            "preference_data.generic:load_scores_csv",
            "any CSV of image, caption, score (higher = better), optional references",
            TauVariant.B,
            ships_images=True,
            references_file=False,
        ),
    ),
)


def load_preferences(path: str | Path, fmt: str, *, references: str | Path | None = None):
    """The tidy judgment table (preference_data.schema.COLUMNS) of `path` read as format `fmt`."""
    from preference_data import PreferenceFormatError
    from recon_score.textfiles import file_problem

    entry = FORMATS[fmt]
    path = Path(path)
    problem = file_problem(path)  # never opened: a FIFO or a device would block the read
    if problem:
        raise PreferenceFormatError(path, None, f"file {problem}")
    loader = entry.load()
    if entry.references_file:
        return loader(path, Path(references) if references is not None else None)
    if references is not None:
        raise ValueError(
            f"format {fmt!r} keeps references inside the file; a separate references file is not used"
        )
    return loader(path)
