"""The project's intervals (recon_score.bootstrap) against outside references: a hand-worked cluster bootstrap,
scipy.stats.bootstrap on the same resamples, scipy's t interval, and clipping to a range."""

import numpy as np
import pytest
from scipy import stats

from recon_score.bootstrap import bootstrap_ci, bootstrap_draws, bootstrap_replicates, t_interval


def _cluster_mean(values, clusters_of_rows):
    """The mean over every row of the drawn clusters (a cluster drawn twice counts twice)."""
    sums = np.bincount(clusters_of_rows, values)
    counts = np.bincount(clusters_of_rows).astype(np.float64)
    return lambda drawn: float(sums[drawn].sum() / counts[drawn].sum())


def test_draws_clusters_not_rows():
    """Hand-computed: cluster A has rows 1 and 3, cluster B one row 5. Drawing 2 clusters: AA (1/4) -> mean 2,
    AB or BA (1/2) -> (1+3+5)/3 = 3, BB (1/4) -> 5. A row bootstrap would draw 3 rows and give other means."""
    stat = _cluster_mean(np.array([1.0, 3.0, 5.0]), np.array([0, 0, 1]))
    reps = bootstrap_replicates(stat, 2, resamples=20000)
    values, counts = np.unique(np.round(reps, 9), return_counts=True)
    assert values.tolist() == [2.0, 3.0, 5.0]
    assert counts / len(reps) == pytest.approx([0.25, 0.5, 0.25], abs=0.01)
    assert bootstrap_ci(stat, 2, resamples=20000, level=0.9) == (2.0, 5.0)  # 25 % of the mass on each end


def test_bootstrap_ci_equals_scipy_percentile_bootstrap():
    """scipy.stats.bootstrap(method="percentile") draws `rng.integers(0, n, (resamples, n))`, the same resamples
    as bootstrap_draws with the same seed; on unequal clusters its interval is ours (to rounding)."""
    rng = np.random.default_rng(3)
    values = 70 + 5 * rng.standard_normal(9)
    clusters = np.array([0, 0, 1, 2, 2, 2, 3, 4, 4])
    stat = _cluster_mean(values, clusters)
    ours = bootstrap_ci(stat, 5, resamples=300, level=0.9, rng_seed=11)
    ref = stats.bootstrap(
        (np.arange(5.0),),
        lambda drawn: stat(drawn.astype(int)),
        n_resamples=300,
        vectorized=False,
        confidence_level=0.9,
        method="percentile",
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), rel=1e-12)


def test_draws_are_the_documented_protocol():
    draws = list(bootstrap_draws(7, resamples=4, rng_seed=5))
    rng = np.random.default_rng(5)
    assert all((d == rng.integers(0, 7, 7)).all() for d in draws)
    with pytest.raises(ValueError, match="at least one cluster"):
        next(bootstrap_draws(0))


def test_t_interval_is_scipys_and_clips_to_the_range():
    low, high = t_interval(98.5, 0.8**2, 4.0)
    assert (float(low), float(high)) == pytest.approx(stats.t.interval(0.95, 4.0, loc=98.5, scale=0.8))
    c_low, c_high = t_interval(98.5, 0.8**2, 4.0, value_range=(0.0, 100.0))
    assert float(c_high) == 100.0 and float(c_low) == pytest.approx(float(low))  # only the side outside
    lo, hi = t_interval(np.array([-0.9, 0.0]), np.array([0.04, 0.04]), np.array([3.0, np.inf]), level=0.9,
                        value_range=(-1.0, 1.0))  # fmt: skip
    assert lo[0] == -1.0 and hi[1] == pytest.approx(stats.norm.ppf(0.95) * 0.2)  # vectorised; df inf: normal
    assert t_interval(70.0, -1e-12, 5.0) == (70.0, 70.0)  # a rounding-negative variance is 0
    assert np.isnan(t_interval(70.0, np.nan, 5.0)[0])
