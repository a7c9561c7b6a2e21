"""Best-of-N selection. A selector scores every candidate of an image; the argmax wins (ties: the first).

Selectors implement `score_many(items) -> per-candidate dicts`; the describer depends only on that protocol,
so any metric of the project's registry (eval.metrics) can select, wired in by the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from PIL import Image


class CandidateSelector(Protocol):
    name: str  # the score column, e.g. "reconscore"

    def score_many(
        self, items: Sequence[tuple[Image.Image, list[str], list[str] | None]]
    ) -> list[list[dict]]:
        """For each (image, candidates, references): one dict per candidate with `score` (float or None),
        `error` (None or a message) and any extra columns."""

    def config(self) -> dict: ...

    def unload(self) -> None: ...


def select_best(scores: Sequence[float | None]) -> int | None:
    """Index of the highest finite score; ties go to the first candidate; None when no candidate has a score."""
    best, best_i = -math.inf, None
    for i, s in enumerate(scores):
        if s is not None and math.isfinite(s) and s > best:
            best, best_i = s, i
    return best_i


class ReconScoreSelector:
    """Selection by ReconScore: every candidate of an image is rendered with the same seed (the preset's), so
    candidates differ only by their text. (The authors seeded candidate k with 42 + k.)"""

    name = "reconscore"

    def __init__(self, scorer):
        self.scorer = scorer

    def score_many(self, items):
        pairs, owners = [], []
        for i, (image, cands, _refs) in enumerate(items):
            for k, c in enumerate(cands):
                pairs.append((image, c))
                owners.append((i, k))
        out: list[list[dict]] = [[{} for _ in cands] for _, cands, _ in items]
        if pairs:
            results = self.scorer.score_pairs(pairs)
            for (i, k), r in zip(owners, results):
                out[i][k] = {
                    "score": r.recon_score,
                    "error": r.error,
                    "reconscore_cosine": r.cosine,
                    "truncated": r.truncated,
                    "_image": r.reconstruction,  # saved by the run as reconstructions/*.png
                }
        return out

    def config(self) -> dict:
        return {"metric": "reconscore", **self.scorer.config()}

    def unload(self) -> None:
        from recon_score.encoders import release_encoders

        self.scorer.renderer.unload()
        self.scorer._encoder = None
        release_encoders()
