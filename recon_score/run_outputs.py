"""Each kind of run folder's output files, declared once, with the readers other commands use: the report, the
studies, `pairs` and `metrics add` read a score or describe run through these, never by naming its files
(docs/runs.md). The run engine reads `KIND_OUTPUTS` to tell a folder's kind and to guard a run's own files."""

from __future__ import annotations

from pathlib import Path

from recon_score.errors import ReconScoreError
from recon_score.textfiles import json_objects

SCORES = "scores.jsonl"  # score: one row per caption (ReconScore, cosine, error, ...)
CAPTIONS = "captions.jsonl"  # describe: the chosen caption per image
CANDIDATES = "candidates.jsonl"  # describe: every candidate caption with its selection score

# the final files each kind of run folder writes besides run.json; the first one tells a folder's kind when it
# has no run.json yet (a run killed before its first finish), except for kinds in KIND_BY_RECORD_ONLY
KIND_OUTPUTS = {
    "score": (SCORES, "reconstructions", "explain"),
    "describe": (CAPTIONS, CANDIDATES, "reconstructions", "explain"),
    "retrieve": ("per_query.csv", "per_query.parquet", "methods"),
    "generate": ("generated.jsonl", "triplets.jsonl"),
    "correlate": ("correlations.csv", "per_item.parquet"),
    "evaluate": ("per_image.jsonl", "summary.csv", "summary.md"),
    "pairs": ("data",),
    "study": ("table.csv", "table.md"),
}
KIND_BY_RECORD_ONLY = ("pairs", "study")  # `data/`, `table.csv`: names a user's own folder may hold


def scores_file(folder: Path) -> Path:
    """Where a score run keeps its rows (for a reader with its own line handling, or a message)."""
    return Path(folder) / SCORES


def captions_file(folder: Path) -> Path:
    """Where a describe run keeps its chosen captions."""
    return Path(folder) / CAPTIONS


def candidates_file(folder: Path) -> Path:
    """Where a describe run keeps every candidate (`pairs` reads it line by line, keeping the good lines)."""
    return Path(folder) / CANDIDATES


def _rows(path: Path) -> list[dict]:
    """Every line of a run's JSONL output as an object, read with the size bound of every text file.

    Raises:
        ReconScoreError: the file is missing; TextFileError naming file:line for a line that is not an object.
    """
    if not path.exists():
        raise ReconScoreError(f"{path} not found")
    return [obj for _, obj in json_objects(path)]


def score_rows(folder: Path) -> list[dict]:
    """A score run's rows (scores.jsonl), in order."""
    return _rows(scores_file(folder))


def describe_captions(folder: Path) -> list[dict]:
    """A describe run's chosen caption per image (captions.jsonl), in order."""
    return _rows(captions_file(folder))


def describe_candidates(folder: Path) -> list[dict]:
    """A describe run's candidates (candidates.jsonl), in order."""
    return _rows(candidates_file(folder))
