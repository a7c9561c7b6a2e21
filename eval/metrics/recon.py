"""ReconScore as a caption metric: the project's `ReconScorer` (the ReconScore paper: reconstruct the caption with a T2I
model, compare with the image; 100 * (1 + cos) / 2), one seed per image so candidates differ only by their text."""

from __future__ import annotations

import os

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput, image_caption_pairs
from eval.metrics.registry import entry_of


class ReconScoreMetric(Metric):
    def __init__(
        self,
        *,
        preset: str = "paper",
        device: str | None = None,
        batch_size: int = 1,
        overrides: dict | None = None,
        scorer=None,
        seeds: int = 1,
    ):
        """`scorer`: an existing ReconScorer to reuse (its models stay loaded); otherwise built from `preset`.
        `seeds`: K renders per caption (recon_score.seeds); the value is the mean over them, and `info["ci"]`
        the CI of the mean over distinct images x seeds (recon_score.seeds.recon_score_ci)."""
        self.preset, self.device, self.batch_size, self.overrides = preset, device, batch_size, overrides
        self.seeds = seeds
        self._scorer = scorer

    def model_needs(self) -> list:
        """The preset's T2I model and encoder, for recon_score.preflight (nothing is built or loaded)."""
        from recon_score.preflight import recon_needs
        from recon_score.presets import get_preset

        if self._scorer is not None:
            return self._scorer.model_needs()
        return recon_needs(get_preset(self.preset).replace(**(self.overrides or {})))

    @property
    def scorer(self):
        if self._scorer is None:
            from recon_score.scorer import ReconScorer

            self._scorer = ReconScorer.from_preset(
                self.preset, overrides=self.overrides, device=self.device, batch_size=self.batch_size
            )
            self._scorer.preflight()  # a missing model fails here, before any rendering
        return self._scorer

    def score(self, batch: CaptionBatch) -> MetricOutput:
        from recon_score.presets import reader_for

        loaded = batch.loaded_images(reader=reader_for(self.scorer.preset))  # as `score` reads them
        # a failed image stays a pair: the scorer reports it as that row's error
        pairs, inverse, errors = image_caption_pairs(loaded, batch.candidates, skip_failed_images=False)
        from recon_score.seeds import derive_seeds, recon_score_ci

        seeds = derive_seeds(self.scorer.preset.seed, self.seeds)
        results = self.scorer.score_seeds(pairs, seeds) if pairs else []
        values = np.full(len(batch), np.nan)
        cosine: list[float | None] = [None] * len(batch)
        truncated = [False] * len(batch)
        for i, k in enumerate(inverse):
            if k < 0:
                continue
            res = results[k]
            if res.recon_score is not None:
                values[i] = res.recon_score
            cosine[i], errors[i], truncated[i] = res.cosine, res.error, res.truncated
        extra = {"recon_score_cosine": cosine, "recon_score_truncated": truncated}
        if len(seeds) > 1:
            extra["recon_score_std"] = [results[k].std if k >= 0 else None for k in inverse]
        if any(errors):
            extra["recon_score_error"] = errors
        info = {
            "distinct_pairs": len(pairs),
            "failed_rows": sum(e is not None for e in errors),
            "seeds": seeds,
        }
        scored = [
            i for i, k in enumerate(inverse) if k >= 0 and errors[i] is None and not np.isnan(values[i])
        ]
        if scored:
            per_seed = [results[inverse[i]].per_seed or [results[inverse[i]].recon_score] for i in scored]
            keys = [_image_key(batch, loaded, i) for i in scored]
            info["ci"] = recon_score_ci(
                np.asarray(per_seed), keys, value_range=entry_of(type(self)).value_range
            )
        return MetricOutput(values, extra=extra, info=info)

    def config(self) -> dict:
        from recon_score.seeds import derive_seeds

        return {**self.scorer.config(), "seeds": derive_seeds(self.scorer.preset.seed, self.seeds)}


def _image_key(batch: CaptionBatch, loaded: list, i: int):
    """Which image row i shows, for the CI's clusters: its path, else the loaded image object."""
    src = batch.images[i] if batch.images is not None else None
    return str(src) if isinstance(src, (str, os.PathLike)) else id(loaded[i])
