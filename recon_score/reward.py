"""ReconScore as an online reward: a callable with the signature TRL's GRPOTrainer and RLOOTrainer call.

    reward = ReconScoreReward.from_preset("paper", device="cuda:1")   # a second GPU beside the policy
    GRPOTrainer(model=..., reward_funcs=reward, train_dataset=ds)     # ds: prompt + image columns

TRL calls `reward(prompts=..., completions=..., completion_ids=..., **columns)` with one entry per completion and
every dataset column (but `prompt`) as a list; the image comes from the `image` column (or the first of
`images`). Completions are plain strings or, for conversational datasets, assistant messages. All completions
of a call are rendered as one batch through `ReconScorer` (its `batch_size`, its artifact cache: a completion
seen before costs nothing).

Render seeds: by default seeds derived from 0 that exclude the preset's seed (42 in `paper`), so a policy trained
on this reward can still be evaluated on the paper's held-out render without having been optimised on it.

A completion that cannot be scored (empty text, an unreadable image, a non-finite similarity) gets `None`, with
the reason logged, never 0: TRL ignores `None` (NaN) rewards, whereas 0 would be a real, very bad score.

Length-independent normalisation (`normalize="length"`): ReconScore can reward longer captions simply for
naming more things. With it, each call fits score = a + b * log(words) by least squares over the call's scored
completions and returns the residuals, so within a batch the reward is uncorrelated with log length and only
what a caption says beyond its length is rewarded. Fewer than three scored completions, or all of one length:
the batch mean is subtracted instead. Off by default (the raw ReconScore in [0, 100]).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from recon_score.artifact_cache import ArtifactCache
from recon_score.errors import InputError
from recon_score.presets import ReconPreset, get_preset
from recon_score.scorer import ReconScorer
from recon_score.seeds import derive_seeds

log = logging.getLogger(__name__)

NORMALIZE = (None, "length")


def completion_text(completion) -> str | None:
    """The text of one completion: a string, or the last assistant message of a conversational completion
    (its content a string or a list of typed parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list):
        for msg in reversed(completion):
            if isinstance(msg, dict) and msg.get("role", "assistant") == "assistant":
                content = msg.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "".join(
                        p.get("text") or ""
                        for p in content
                        if isinstance(p, dict) and p.get("type") == "text"
                    )
    return None


class ReconScoreReward:
    """`reward(prompts, completions, **columns) -> list[float | None]`: the ReconScore of each completion
    against its row's image."""

    def __init__(
        self,
        scorer: ReconScorer,
        *,
        seeds: Sequence[int] | None = None,
        image_column: str = "image",
        normalize: str | None = None,
    ):
        if normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
        self.scorer = scorer
        self.seeds = list(seeds) if seeds else derive_seeds(0, 1, exclude={scorer.preset.seed})
        self.image_column = image_column
        self.normalize = normalize
        self.__name__ = "recon_score" if normalize is None else f"recon_score_{normalize}"  # TRL's log key
        self.failures: list[str] = []  # the reason of every None returned so far

    @classmethod
    def from_preset(
        cls,
        preset: str | ReconPreset = "paper",
        *,
        device: str | None = None,
        batch_size: int = 8,
        cache_dir: str | Path | None = None,
        seeds: Sequence[int] | None = None,
        image_column: str = "image",
        normalize: str | None = None,
        **scorer_kwargs,
    ) -> ReconScoreReward:
        """A reward on its own ReconScorer: `device` is where the T2I model and encoder run."""
        p = get_preset(preset) if isinstance(preset, str) else preset
        cache = ArtifactCache(Path(cache_dir)) if cache_dir else None
        scorer = ReconScorer(p, device=device, batch_size=batch_size, cache=cache, **scorer_kwargs)
        return cls(scorer, seeds=seeds, image_column=image_column, normalize=normalize)

    def __call__(self, prompts=None, completions=None, **columns) -> list[float | None]:
        completions = list(completions or [])
        images = self._images(columns, len(completions))
        pairs, errors = [], {}
        for i, (img, comp) in enumerate(zip(images, completions)):
            text = completion_text(comp)
            if img is None:
                errors[i] = f"no image in column {self.image_column!r}"
            elif not text or not text.strip():
                errors[i] = "empty completion"
            pairs.append((img if img is not None else InputError("no image"), text or ""))
        todo = [i for i in range(len(pairs)) if i not in errors]
        scores: list[float | None] = [None] * len(pairs)
        if todo:
            results = self.scorer.score_seeds([pairs[i] for i in todo], self.seeds)
            for i, r in zip(todo, results):
                if r.error or r.recon_score is None or not math.isfinite(r.recon_score):
                    errors[i] = r.error or "no score"
                else:
                    scores[i] = float(r.recon_score)
        for i in sorted(errors):
            self.failures.append(errors[i])
            log.warning("recon_score reward: completion %d has no reward (None): %s", i, errors[i])
        if self.normalize == "length":
            return length_residuals(scores, [completion_text(c) or "" for c in completions])
        return scores

    def _images(self, columns: dict, n: int) -> list:
        """One image per completion from the `image` column, or the first of each row's `images`."""
        if self.image_column in columns and columns[self.image_column] is not None:
            return list(columns[self.image_column])
        if "images" in columns and columns["images"] is not None:
            return [imgs[0] if imgs else None for imgs in columns["images"]]
        return [None] * n


def length_residuals(scores: Sequence[float | None], texts: Sequence[str]) -> list[float | None]:
    """Residuals of score ~ a + b * log(words) over the scored entries (None stays None); the mean is
    subtracted instead when there are fewer than three or every length is the same."""
    idx = [i for i, s in enumerate(scores) if s is not None]
    out: list[float | None] = [None] * len(scores)
    if not idx:
        return out
    y = np.array([scores[i] for i in idx], dtype=np.float64)
    x = np.log(np.array([max(1, len(texts[i].split())) for i in idx], dtype=np.float64))
    if len(idx) < 3 or np.ptp(x) == 0:
        fitted = np.full_like(y, y.mean())
    else:
        b, a = np.polyfit(x, y, 1)
        fitted = a + b * x
    for i, r in zip(idx, (y - fitted).tolist()):
        out[i] = r
    return out
