"""Agreement among annotators who ranked the same candidates: Kendall's W per image (tie-corrected), Krippendorff's
alpha (ordinal, the `krippendorff` package), pairwise agreement, each with a bootstrap CI over images supplied by
the caller (the project's one CI routine lives in recon_score.bootstrap, which this package may not import).

Ranks are 1 = best; ties carry the same rank. One image's judgments are an (m, n) array: m annotators, n
candidates, NaN for an annotator who did not rank that image.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

# ci(statistic, n_images) -> (low, high): statistic(images) takes an array of image indices (drawn with
# replacement) and returns the statistic over those images
CI = Callable[[Callable[[np.ndarray], float], int], tuple[float, float]]


def complete_rows(ranks: np.ndarray) -> np.ndarray:
    """The raters (rows) who ranked every candidate."""
    r = np.asarray(ranks, dtype=float)
    return r[~np.isnan(r).any(axis=1)]


def kendall_w(ranks: np.ndarray) -> float:
    """Kendall's coefficient of concordance W of m raters over n objects, ranks (m, n), with the correction for
    ties (Siegel & Castellan, 1988, eq. 9.16): W = 12 S / (m^2 (n^3 - n) - m sum(t^3 - t)), where S is the sum of
    squared deviations of the objects' rank sums from their mean and t runs over each rater's groups of ties.
    Rows with a NaN are left out; NaN when fewer than two raters remain or every rater tied everything."""
    r = complete_rows(ranks)
    m, n = r.shape if r.ndim == 2 else (0, 0)
    if m < 2 or n < 2:
        return float("nan")
    mid = np.vstack([rankdata(row) for row in r])  # tied objects share the mean of the ranks they span
    sums = mid.sum(axis=0)
    s = float(((sums - sums.mean()) ** 2).sum())
    ties = sum(float((c**3 - c).sum()) for row in mid for c in [np.unique(row, return_counts=True)[1]])
    denom = m**2 * (n**3 - n) - m * ties
    return float("nan") if denom <= 0 else 12.0 * s / denom


def pairwise_agreement(ranks: np.ndarray) -> float:
    """Share of (rater pair, candidate pair) comparisons on which the two raters agree: both prefer the same
    candidate, or both tie the pair. Rows with a NaN are left out; NaN when fewer than two raters remain."""
    r = complete_rows(ranks)
    if len(r) < 2 or r.shape[1] < 2:
        return float("nan")
    i, j = np.triu_indices(r.shape[1], k=1)
    signs = np.sign(r[:, i] - r[:, j])  # (m, pairs)
    agree = [float((signs[a] == signs[b]).mean()) for a, b in itertools.combinations(range(len(r)), 2)]
    return float(np.mean(agree))


def reliability_matrix(images: Sequence[np.ndarray]) -> np.ndarray:
    """Krippendorff's layout: one row per rater, one column per (image, candidate) unit, NaN where a rater gave
    no value. Every image's array has the same raters in the same order."""
    return np.hstack([np.asarray(r, dtype=float) for r in images]) if images else np.zeros((0, 0))


def krippendorff_alpha(images: Sequence[np.ndarray]) -> float:
    """Krippendorff's alpha, ordinal, over every (image, candidate) unit (the `krippendorff` package); NaN when
    no unit has two values."""
    import krippendorff

    data = reliability_matrix(images)
    if data.size == 0 or (np.sum(~np.isnan(data), axis=0) >= 2).sum() == 0:
        return float("nan")
    if len(np.unique(data[~np.isnan(data)])) < 2:
        return float("nan")  # one value everywhere: alpha is undefined (0 / 0)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal"))


@dataclass(frozen=True)
class Agreement:
    """One statistic over the images, with its 95% bootstrap CI over images."""

    statistic: str
    value: float
    ci_low: float
    ci_high: float
    images: int  # images the statistic is defined on
    definition: str


def agreement(images: Sequence[np.ndarray], ci: CI) -> tuple[list[Agreement], list[dict]]:
    """The agreement table (overall W, pairwise agreement and alpha, each with `ci` over images) and the
    per-image values (W, pairwise agreement, how many raters ranked it)."""
    w = np.array([kendall_w(r) for r in images])
    pw = np.array([pairwise_agreement(r) for r in images])
    per_image = [
        {"kendall_w": w[k], "pairwise": pw[k], "raters": len(complete_rows(r))} for k, r in enumerate(images)
    ]
    table = []
    for name, values, what in (
        ("kendall_w", w, "mean over images of Kendall's W (tie-corrected) among the raters of each image"),
        ("pairwise", pw, "share of (rater pair, candidate pair) comparisons ordered alike, mean over images"),
    ):
        ok = values[~np.isnan(values)]
        lo, hi = ci(lambda idx, ok=ok: float(np.mean(ok[idx])), len(ok)) if len(ok) else (np.nan, np.nan)
        table.append(Agreement(name, float(np.mean(ok)) if len(ok) else np.nan, lo, hi, len(ok), what))
    # alpha is defined on the images at least two raters ranked (a unit with one value adds nothing to it): its
    # count, and its CI resampling them, as W's and pairwise agreement's are over the images each is defined on
    paired = [r for r in images if len(complete_rows(r)) >= 2]
    alpha = krippendorff_alpha(paired)
    lo, hi = (
        ci(lambda idx: krippendorff_alpha([paired[k] for k in idx]), len(paired)) if paired else (np.nan,) * 2
    )
    what = "Krippendorff's alpha, ordinal, over every (image, candidate) unit of the images two or more rated"
    table.append(Agreement("krippendorff_alpha", alpha, lo, hi, len(paired), what))
    return table, per_image
