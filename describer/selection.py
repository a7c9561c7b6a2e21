"""Best-of-N selection: a selector scores every candidate of an image (`score_many`, the only protocol the describer
depends on, so any metric of eval.metrics can select); the argmax wins (ties: the first)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from PIL import Image


class CandidateSelector(Protocol):
    name: str  # the selection metric, a registry name (e.g. "recon_score")
    image_reader: str  # how the images it scores are read (recon_score.presets.reader_for of its preset)

    def score_many(
        self, items: Sequence[tuple[Image.Image, list[str], list[str] | None]]
    ) -> list[list[dict]]:
        """For each (image, candidates, references): one dict per candidate with `score` (float or None),
        `error` (None or a message) and any extra columns."""

    def config(self) -> dict: ...

    def unload(self) -> None: ...

    # optional: `use_corpus(references of every input image) -> dict | None`, for a metric whose values depend
    # on a corpus (CIDEr's IDF); describe calls it once with the whole input set (eval.selection.MetricSelector)


def select_best(scores: Sequence[float | None]) -> int | None:
    """Index of the highest finite score; ties go to the first candidate; None when no candidate has a score."""
    best, best_i = -math.inf, None
    for i, s in enumerate(scores):
        if s is not None and math.isfinite(s) and s > best:
            best, best_i = s, i
    return best_i


class ReconScoreSelector:
    """Selection by ReconScore, every candidate of an image rendered with the same selection seed(s) (the authors
    seeded candidate k with 42 + k), then `evaluate`: the chosen caption's held-out render with an independent
    seed, the score a table reports (docs/describer.md, "Selection and the held-out score")."""

    name = "recon_score"

    def __init__(self, scorer, *, selection_seed: int = 0, selection_seeds: int = 1, eval_seed: int = 42):
        from recon_score.errors import ReconScoreError
        from recon_score.seeds import derive_seeds

        if selection_seed == eval_seed:
            raise ReconScoreError(
                f"--selection-seed {selection_seed} equals --eval-seed: the reported score would be the render "
                "that selected the caption (an in-sample maximum); choose another selection seed"
            )
        from recon_score.presets import reader_for

        self.scorer = scorer
        self.image_reader = reader_for(scorer.preset)  # describe reads its images as `score` does
        self.seeds = derive_seeds(selection_seed, selection_seeds, exclude={eval_seed})
        self.eval_seed = eval_seed

    def model_needs(self) -> list:
        return self.scorer.model_needs()

    def plan(self) -> dict:
        """The seeds, for the run's fingerprint and run.json."""
        return {"selection_seeds": self.seeds, "eval_seed": self.eval_seed}

    def score_many(self, items):
        pairs, owners = [], []
        for i, (image, cands, _refs) in enumerate(items):
            for k, c in enumerate(cands):
                pairs.append((image, c))
                owners.append((i, k))
        out: list[list[dict]] = [[{} for _ in cands] for _, cands, _ in items]
        if pairs:
            results = self.scorer.score_seeds(pairs, self.seeds)
            for (i, k), r in zip(owners, results):
                out[i][k] = {
                    "score": r.recon_score,
                    "error": r.error,
                    "selection_cosine": r.cosine,
                    "truncated": r.truncated,
                    "_image": r.reconstruction,  # saved by the run as reconstructions/*.png
                }
                if len(self.seeds) > 1:
                    out[i][k]["selection_per_seed"] = r.per_seed
        return out

    def evaluate(self, pairs) -> list[dict]:
        """Held-out ReconScore of (image, caption) pairs, rendered with the evaluation seed."""
        results = self.scorer.score_pairs(list(pairs), seeds=[self.eval_seed] * len(pairs))
        return [
            {
                "score": r.recon_score,
                "cosine": r.cosine,
                "error": r.error,
                "seed": r.seed,
                "_image": r.reconstruction,
            }
            for r in results
        ]

    def config(self) -> dict:
        return {"metric": self.name, **self.plan(), **self.scorer.config()}

    def unload(self) -> None:
        self.scorer.unload()
