"""Agreement statistics against outside references: Kendall's W from scipy's Friedman test (W = chi2 / (m (n - 1)),
tie-corrected on both sides) and a hand-worked example; Krippendorff's alpha against the `krippendorff` package
and Krippendorff's own worked example."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest
from scipy.stats import friedmanchisquare, rankdata

from preference_data.annotate import (
    agreement,
    consensus,
    kendall_w,
    krippendorff_alpha,
    pairwise_agreement,
    reliability_matrix,
)


def _no_ci(statistic, n):
    return (float("nan"), float("nan"))


def test_kendall_w_hand_worked():
    """3 judges, 4 objects: rank sums 4, 6, 8, 12 (mean 7.5), S = 35, W = 12 S / (m^2 (n^3 - n)) = 420 / 540."""
    ranks = np.array([[1, 2, 3, 4], [1, 3, 2, 4], [2, 1, 3, 4]])
    assert abs(kendall_w(ranks) - 7 / 9) < 1e-12
    assert kendall_w(np.array([[1, 2, 3]] * 4)) == 1.0
    assert kendall_w(np.array([[1, 2, 3], [3, 2, 1]])) == 0.0


@pytest.mark.parametrize("ties", [False, True])
def test_kendall_w_equals_friedman_chi_square(ties):
    rng = np.random.default_rng(7)
    for _ in range(200):
        m, n = rng.integers(2, 7), rng.integers(3, 7)
        if ties:  # integer scores with repeats, ranked with ties (competition ranks, as the page writes them)
            r = np.vstack([rankdata(rng.integers(0, 3, n), method="min") for _ in range(m)])
        else:
            r = np.vstack([rng.permutation(n) + 1 for _ in range(m)])
        try:
            chi2 = friedmanchisquare(*r.T).statistic
        except ValueError:  # scipy refuses a block where everything ties
            continue
        w = kendall_w(r)
        if np.isnan(chi2):
            assert np.isnan(w)
            continue
        assert abs(w - chi2 / (m * (n - 1))) < 1e-9


def test_kendall_w_leaves_out_raters_who_did_not_rank():
    r = np.array([[1, 2, 3], [1, 3, 2], [np.nan] * 3])
    assert kendall_w(r) == kendall_w(r[:2])
    assert np.isnan(kendall_w(r[:1]))


def test_krippendorff_alpha_worked_example():
    """Krippendorff (2011), "Computing Krippendorff's alpha-reliability", 4 coders x 12 units with missing
    values: ordinal alpha 0.815 (as printed there, three decimals)."""
    nan = np.nan
    data = np.array(
        [
            [1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
            [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan],
        ]
    )
    images = [data[:, :5], data[:, 5:]]  # units split over two "images": the same units
    assert round(krippendorff_alpha(images), 3) == 0.815
    assert (
        abs(
            krippendorff_alpha(images)
            - krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal")
        )
        < 1e-9
    )


def test_alpha_layout_is_raters_by_image_candidate_units():
    a = np.array([[1, 2, 3], [1, 3, 2]])
    b = np.array([[2, 1], [np.nan, np.nan]])
    m = reliability_matrix([a, b])
    assert m.shape == (2, 5) and np.isnan(m[1, 3:]).all() and list(m[0]) == [1, 2, 3, 2, 1]


def test_pairwise_agreement_hand_worked():
    """Raters (1, 2, 3) and (1, 3, 2): of the pairs (A,B), (A,C), (B,C) they order the first two alike."""
    assert abs(pairwise_agreement(np.array([[1, 2, 3], [1, 3, 2]])) - 2 / 3) < 1e-12
    assert pairwise_agreement(np.array([[1, 1, 3], [1, 1, 2]])) == 1.0  # a tie both made agrees


def test_consensus_rules():
    stack = np.array([[1, 2, 3], [2, 1, 3], [1, 3, 2]])
    assert list(consensus(stack, "mean-rank")) == [1, 2, 3]  # means 1.33, 2, 2.67
    assert list(consensus(np.array([[1, 2, 3], [2, 1, 3]]), "mean-rank")) == [1, 1, 3]  # a tie keeps the best
    assert list(consensus(stack, "median-rank")) == [1, 2, 3]


def test_agreement_table_uses_the_given_ci_over_images():
    seen = []

    def ci(statistic, n):
        seen.append(n)
        return statistic(np.arange(n)), statistic(np.arange(n))

    images = [np.array([[1, 2, 3], [1, 2, 3]]), np.array([[1, 2, 3], [3, 2, 1]])]
    table, per_image = agreement(images, ci)
    by = {a.statistic: a for a in table}
    assert by["kendall_w"].value == 0.5 and by["kendall_w"].ci_low == 0.5 and seen == [2, 2, 2]
    assert [r["kendall_w"] for r in per_image] == [1.0, 0.0]
    assert agreement(images, _no_ci)[0][0].images == 2


def test_preference_rate_counts_a_texts_every_candidate_and_splits_a_tie_for_first():
    """An image's credit: the share of the consensus's first places the selected text holds. Two candidates of
    one text both count (list.index once took the first only: a miss when its twin was first), and a tie for
    first splits the credit as it splits a win share (it once counted a full hit)."""
    from preference_data.annotate import Item, preference_rates

    items = [
        Item("i1", "a.png", ("x", "y", "x"), ("m1", "m2", "m3"), ()),  # x's second candidate is first
        Item("i2", "b.png", ("a", "b", "c"), ("m1", "m2", "m3"), ()),  # a and b tie for first
        Item("i3", "c.png", ("p", "q", "p"), ("m1", "m2", "m3"), ()),  # both p tie for first
    ]
    final = {"i1": np.array([2, 3, 1]), "i2": np.array([1, 1, 3]), "i3": np.array([1, 3, 1])}
    picks = [("m", "a.png", "x", "s:1"), ("m", "b.png", "a", "s:2"), ("m", "c.png", "p", "s:3")]
    picks += [("other", "a.png", "y", "s:4"), ("other", "b.png", "b", "s:5")]
    rates = {r["metric"]: r for r in preference_rates(items, final, picks)}
    assert rates["m"] == {"metric": "m", "images": 3, "preferred": 2.5, "rate": 2.5 / 3}
    assert rates["other"] == {"metric": "other", "images": 2, "preferred": 0.5, "rate": 0.25}


def test_alpha_counts_the_images_two_or_more_raters_ranked():
    """An image one annotator skipped (two raters: one left) adds nothing to alpha: the table's image count is
    of those it is defined on (it once counted every image), and its value is the same either way."""
    both = [np.array([[1, 2, 3], [1, 3, 2]]), np.array([[2, 1, 3], [1, 2, 3]])]
    skipped = np.array([[3, 1, 2], [np.nan] * 3])
    by = {a.statistic: a for a in agreement([*both, skipped], _no_ci)[0]}
    assert by["krippendorff_alpha"].images == 2 == by["kendall_w"].images
    assert by["krippendorff_alpha"].value == pytest.approx(krippendorff_alpha(both))
