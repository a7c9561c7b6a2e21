"""ReconScore as a torchmetrics `Metric`: stateful, DDP-aware, in a training or evaluation loop.

Scoring is delegated to one `ReconScorer`; this class only keeps the states torchmetrics syncs, so `compute()` on
N processes equals one process over all items. See docs/python-api.md, "torchmetrics".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

try:
    from torchmetrics import Metric
    from torchmetrics.utilities.data import dim_zero_cat
except ImportError as err:  # optional dependency: only this adapter needs it
    raise ImportError(
        "recon_score.torchmetrics needs torchmetrics: pip install 'reconscore[torchmetrics]'"
    ) from err

from recon_score.artifact_cache import ArtifactCache
from recon_score.errors import InputError
from recon_score.presets import ReconPreset
from recon_score.scorer import ReconResult, ReconScorer

ON_ERROR = ("raise", "skip")


class ReconScore(Metric):
    """Mean ReconScore (0..100, higher = the caption lets a T2I model redraw the image) of (image, caption) pairs.

    `scorer` (shares its models and cache) or one built from `preset`, `overrides` and the scorer options.
    on_error: "raise" (default) raises the item's InputError, as a metric in a loop should; "skip" leaves the
    item out and counts it in `n_failed`. kwargs: torchmetrics options (sync_on_compute, process_group, ...).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0
    plot_upper_bound = 100.0

    def __init__(
        self,
        preset: str | ReconPreset = "paper",
        *,
        overrides: dict | None = None,
        scorer: ReconScorer | None = None,
        scorer_device: str | None = None,
        batch_size: int = 1,
        cache: ArtifactCache | None = None,
        weights_dir: str | Path | None = None,
        on_error: str = "raise",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        self.on_error = on_error
        self.scorer = scorer or ReconScorer.from_preset(
            preset,
            overrides=overrides,
            device=scorer_device,
            batch_size=batch_size,
            cache=cache,
            weights_dir=weights_dir,
        )
        self.add_state("score_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("n_scored", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("n_failed", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        # float64 everywhere (counts too: exact below 2**53), including the empty tensor torchmetrics gathers
        # for a process that saw no data, so every process all-gathers the same dtype
        self.set_dtype(torch.float64)

    def update(self, images, captions: str | Sequence[str]) -> None:
        """Score a batch: `images` is a (B, C, H, W) tensor, a list of CHW tensors / arrays / PIL images /
        paths, or one image for several captions; `captions` a string or B strings."""
        results = self.scorer.score(images, captions)
        if isinstance(results, ReconResult):  # one image, one caption
            results = [results]
        ok = []
        for i, r in enumerate(results):
            if r.ok:
                ok.append(r.recon_score)
            elif self.on_error == "raise":
                raise InputError(f"item {i} of the batch: {r.error}")
        values = torch.tensor(ok, dtype=torch.float64, device=self.score_sum.device)
        self.scores.append(values)
        self.score_sum += values.sum()
        self.n_scored += len(ok)
        self.n_failed += len(results) - len(ok)

    def compute(self) -> torch.Tensor:
        """Mean ReconScore over every scored item on every process (NaN before any item was scored)."""
        if int(self.n_scored) == 0:
            return torch.tensor(float("nan"), dtype=torch.float64, device=self.score_sum.device)
        return self.score_sum / self.n_scored

    def per_item(self) -> torch.Tensor:
        """Every scored item's ReconScore, synced across processes (rank 0's items first, then rank 1's, ...);
        each process's items in update order. Pair it with `compute()` as pycocoevalcap pairs (corpus, items)."""
        with self.sync_context(should_sync=self._to_sync, should_unsync=True):
            if isinstance(self.scores, list) and not self.scores:
                return torch.zeros(0, dtype=torch.float64, device=self.score_sum.device)
            return dim_zero_cat(self.scores)
