"""The project's confidence intervals: the percentile bootstrap over clusters (images) for statistics without a
variance formula (Kendall's tau, pairwise accuracy), and the t interval from a variance estimate for means.

Clusters because the captions (and judgments) of one image are not independent: resampling rows as if each were
an image understates the spread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

CI_LEVEL = 0.95
CI_RESAMPLES = 2000
CI_RNG_SEED = 0
# Below 5 degrees of freedom an interval is printed with a warning in words (recon_score.seeds.ci_notes): it is
# over 31 % wider than with a known variance, and its se uncertain by over +-32 % (docs/seeds.md).
SMALL_SAMPLE_DF = 5.0


def bootstrap_draws(
    n_clusters: int, *, resamples: int = CI_RESAMPLES, rng_seed: int = CI_RNG_SEED
) -> Iterator[np.ndarray]:
    """The clusters of each of `resamples` rounds. Protocol: `rng = numpy.random.default_rng(rng_seed)`; each
    round draws `rng.integers(0, n_clusters, n_clusters)` clusters with replacement."""
    if n_clusters < 1:
        raise ValueError(f"bootstrap needs at least one cluster, got {n_clusters}")
    rng = np.random.default_rng(rng_seed)
    for _ in range(resamples):
        yield rng.integers(0, n_clusters, n_clusters)


def bootstrap_replicates(
    statistic: Callable[[np.ndarray], float],
    n_clusters: int,
    *,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> np.ndarray:
    """`resamples` values of `statistic(clusters)`, one per round of `bootstrap_draws`."""
    draws = bootstrap_draws(n_clusters, resamples=resamples, rng_seed=rng_seed)
    return np.fromiter((statistic(clusters) for clusters in draws), dtype=np.float64, count=resamples)


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
    """Percentile CI of `statistic` under the cluster bootstrap of `bootstrap_replicates`. A percentile interval
    never leaves the range of the replicates, so it needs no clipping."""
    return percentile_interval(
        bootstrap_replicates(statistic, n_clusters, resamples=resamples, rng_seed=rng_seed), level
    )


def t_interval(
    mean: float | np.ndarray,
    variance: float | np.ndarray,
    df: float | np.ndarray,
    *,
    level: float = CI_LEVEL,
    value_range: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) = mean -/+ t(df) quantile x sqrt(variance), clipped to the statistic's `value_range` (a mean
    cannot lie outside it, so clipping never changes whether the interval holds the true mean). Vectorised; a
    negative variance counts as 0, a NaN one gives NaN bounds."""
    from scipy import stats

    half = stats.t.ppf(0.5 + level / 2, df) * np.sqrt(np.maximum(variance, 0.0))  # NaN stays NaN
    low, high = np.asarray(mean) - half, np.asarray(mean) + half
    if value_range is not None:
        low, high = np.clip(low, *value_range), np.clip(high, *value_range)
    return low, high
