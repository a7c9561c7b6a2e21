"""The one bootstrap of the project: a percentile CI that resamples whole clusters (images).

Why clusters: the captions (and the judgments) of one image are not independent; resampling rows as if each were
an image understates the spread. (Scores over images x shared seeds are a crossed design with their own interval:
recon_score.seeds.crossed_variance.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CI_LEVEL = 0.95
CI_RESAMPLES = 2000
CI_RNG_SEED = 0


def bootstrap_replicates(
    statistic: Callable[[np.ndarray], float],
    n_clusters: int,
    *,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> np.ndarray:
    """`resamples` values of `statistic(clusters)`.

    Protocol: `rng = numpy.random.default_rng(rng_seed)`; each round draws `rng.integers(0, n_clusters,
    n_clusters)` clusters with replacement."""
    if n_clusters < 1:
        raise ValueError(f"bootstrap needs at least one cluster, got {n_clusters}")
    rng = np.random.default_rng(rng_seed)
    out = np.empty(resamples)
    for b in range(resamples):
        out[b] = statistic(rng.integers(0, n_clusters, n_clusters))
    return out


def percentile_interval(replicates: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    """(low, high): `numpy.quantile` (linear) of the finite replicates at (1 -/+ level) / 2; NaN when none is
    finite (e.g. a Kendall tau of a constant resample)."""
    finite = replicates[np.isfinite(replicates)]
    if not len(finite):
        return float("nan"), float("nan")
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float],
    n_clusters: int,
    *,
    level: float = CI_LEVEL,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> tuple[float, float]:
    """Percentile CI of `statistic` under the cluster bootstrap of `bootstrap_replicates`."""
    return percentile_interval(
        bootstrap_replicates(statistic, n_clusters, resamples=resamples, rng_seed=rng_seed), level
    )
