"""The one bootstrap of the project: a percentile CI that resamples whole clusters (images), and optionally the
columns of a shared factor (the K seeds every image was rendered with) jointly across clusters.

Why clusters: the captions (and the judgments) of one image are not independent; resampling rows as if each were
an image understates the spread. Why joint columns: every image is rendered with the same K seeds, so a seed's
effect is shared by all images; resampling seeds within each image independently averages that effect away.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CI_LEVEL = 0.95
CI_RESAMPLES = 2000
CI_RNG_SEED = 0


def bootstrap_replicates(
    statistic: Callable[[np.ndarray, np.ndarray], float],
    n_clusters: int,
    *,
    columns: int = 1,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> np.ndarray:
    """`resamples` values of `statistic(clusters, cols)`.

    Protocol: `rng = numpy.random.default_rng(rng_seed)`; each round draws `rng.integers(0, n_clusters,
    n_clusters)` clusters with replacement, then, when `columns` > 1, `rng.integers(0, columns, columns)` columns
    (the same columns for every drawn cluster); with one column `cols` is `[0]`."""
    if n_clusters < 1 or columns < 1:
        raise ValueError(f"bootstrap needs at least one cluster and one column, got {n_clusters}, {columns}")
    rng = np.random.default_rng(rng_seed)
    one = np.zeros(1, dtype=np.int64)
    out = np.empty(resamples)
    for b in range(resamples):
        clusters = rng.integers(0, n_clusters, n_clusters)
        cols = rng.integers(0, columns, columns) if columns > 1 else one
        out[b] = statistic(clusters, cols)
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
    statistic: Callable[[np.ndarray, np.ndarray], float],
    n_clusters: int,
    *,
    columns: int = 1,
    level: float = CI_LEVEL,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> tuple[float, float]:
    """Percentile CI of `statistic` under the cluster (and joint column) bootstrap of `bootstrap_replicates`."""
    reps = bootstrap_replicates(
        statistic, n_clusters, columns=columns, resamples=resamples, rng_seed=rng_seed
    )
    return percentile_interval(reps, level)
