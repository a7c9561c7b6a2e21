"""Kendall τ-b/τ-c on flattened rows (against scipy), rank orientation, ties, pairwise accuracy, bootstrap CI."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from eval.kendall import (
    TauVariant,
    correlate,
    correlation_cis,
    flatten,
    kendall,
    pairwise_accuracy,
)


def _table(images, candidates, judgments, kind="rating"):
    n = len(images)
    return pd.DataFrame(
        {
            "image": images,
            "candidate": candidates,
            "references": [[] for _ in range(n)],
            "judgment": np.asarray(judgments, dtype=float),
            "judgment_kind": [kind] * n,
            "rater": [None] * n,
            "model": [None] * n,
            "candidate_id": [None] * n,
            "source": [f"t:{i + 1}" for i in range(n)],
        }
    )


@pytest.mark.parametrize("variant", ["b", "c"])
def test_kendall_equals_scipy_with_ties(variant):
    rng = np.random.default_rng(0)  # test values depend on this seed only through the data drawn
    human = rng.integers(1, 5, size=200).astype(float)  # 4 levels: heavy ties, as Flickr8K-Expert
    metric = np.round(human + rng.normal(0, 1.5, size=200), 1)
    metric[:20] = metric[0]  # ties in the metric too
    expected = 100 * kendalltau(metric, human, variant=variant).statistic
    assert kendall(metric, human, variant) == pytest.approx(expected, abs=1e-12)
    assert kendall(metric, human, TauVariant(variant)) == pytest.approx(expected, abs=1e-12)


def test_tau_b_and_c_differ_on_rectangular_ties_and_agree_on_permutations():
    human = [1, 1, 2, 2, 3, 3, 4, 4]
    metric = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    assert kendall(metric, human, "b") != pytest.approx(kendall(metric, human, "c"))
    perm = [3, 1, 2, 5, 4]
    assert kendall(perm, [1, 2, 3, 4, 5], "b") == pytest.approx(kendall(perm, [1, 2, 3, 4, 5], "c"))


def test_constant_or_tiny_input_is_nan_not_an_error():
    assert math.isnan(kendall([1, 1, 1], [1, 2, 3], "b"))
    assert math.isnan(kendall([1], [2], "c"))


def test_ranks_are_oriented_rank_one_best():
    table = _table(["a"] * 3 + ["b"] * 3, list("xyzxyz"), [1, 2, 3, 3, 1, 2], kind="rank")
    agrees = [0.9, 0.5, 0.1, 0.1, 0.9, 0.5]  # best-ranked caption scores highest
    out = correlate(table, {"m": agrees, "neg": [-v for v in agrees]}, n_boot=0)
    assert out.loc[0, "tau_b"] == pytest.approx(100.0) and out.loc[0, "pairwise_acc"] == 1.0
    assert out.loc[1, "tau_b"] == pytest.approx(-100.0) and out.loc[1, "pairwise_acc"] == 0.0
    lower = correlate(table, {"m": [-v for v in agrees]}, higher_is_better_by_metric={"m": False}, n_boot=0)
    assert lower.loc[0, "tau_b"] == pytest.approx(100.0)


def test_flatten_keeps_every_rater_row_and_drops_nan():
    # one candidate judged by 3 raters = 3 observations (never averaged); a NaN metric row is dropped
    table = _table(["a"] * 4, ["x", "x", "x", "y"], [4, 3, 4, 1])
    flat = flatten(table, [0.8, 0.8, 0.8, float("nan")])
    assert len(flat) == 3 and flat.rows.tolist() == [0, 1, 2]
    flat = flatten(table, [0.8, 0.8, 0.8, 0.1])
    assert len(flat) == 4
    expected = 100 * kendalltau([0.8, 0.8, 0.8, 0.1], [4, 3, 4, 1], variant="c").statistic
    assert kendall(flat.metric, flat.human, "c") == pytest.approx(expected)


def test_pairwise_accuracy_by_hand():
    # image a: ranks x=1, y=2, z=2 (tie); metric orders x>y correctly, x vs z wrong, y vs z tie (skipped: people tie)
    # image b: one candidate, no pair; rater rows of the same candidate never form a pair
    table = _table(
        ["a", "a", "a", "b", "c", "c"], ["x", "y", "z", "w", "v", "v"], [1, 2, 2, 1, 1, 2], kind="rank"
    )
    flat = flatten(table, [0.9, 0.5, 0.95, 0.3, 0.2, 0.2])
    assert pairwise_accuracy(flat) == pytest.approx(1 / 2)
    flat = flatten(table, [0.9, 0.5, 0.9, 0.3, 0.2, 0.2])  # x vs z now a metric tie: counts one half
    assert pairwise_accuracy(flat) == pytest.approx(1.5 / 2)
    assert math.isnan(pairwise_accuracy(flatten(table.iloc[3:4], [0.1])))


def test_cis_are_seeded_and_bracket_the_estimates():
    rng = np.random.default_rng(1)
    images = np.repeat(np.arange(40), 5).astype(str)
    human = rng.integers(1, 5, size=200)
    metric = human + rng.normal(0, 1, size=200)
    table = _table(list(images), [f"c{i}" for i in range(200)], human)
    flat = flatten(table, metric)
    a = correlation_cis(flat, n_boot=200, seed=3)
    assert a == correlation_cis(flat, n_boot=200, seed=3)
    assert a != correlation_cis(flat, n_boot=200, seed=4)
    point = {v: kendall(flat.metric, flat.human, v) for v in ("b", "c")}
    assert a["tau_b"][0] < point["b"] < a["tau_b"][1] and a["tau_c"][0] < point["c"] < a["tau_c"][1]
    assert a["pairwise_acc"][0] < pairwise_accuracy(flat) < a["pairwise_acc"][1]
    one_image = flatten(_table(["a"] * 3, list("xyz"), [1, 2, 3]), [1, 2, 3])
    assert all(math.isnan(v) for ci in correlation_cis(one_image, n_boot=10).values() for v in ci)


def test_cis_on_a_hand_checkable_example():
    """Image A: the metric orders its two captions as people do; image B: the other way round. Resampling the two
    images gives {A, A}: tau 100, accuracy 1; {B, B}: -100, 0; {A, B}: the pooled rows have one concordant and
    one discordant untied pair, tau 0, accuracy 1/2. Each of {A, A} and {B, B} has probability 1/4, so with 1000
    resamples the 2.5% and 97.5% quantiles are the extremes: [-100, 100] for both taus and [0, 1] for accuracy,
    around the estimates 0 and 1/2. When both images agree every resample does: degenerate intervals."""
    table = _table(["A", "A", "B", "B"], list("xyxy"), [2, 1, 2, 1])
    out = correlate(table, {"split": [0.9, 0.1, 0.1, 0.9], "agree": [0.9, 0.1, 0.9, 0.1]}, n_boot=1000)
    split, agree = out.set_index("metric").loc["split"], out.set_index("metric").loc["agree"]
    for tau in ("tau_b", "tau_c"):
        assert (split[tau], split[f"{tau}_low"], split[f"{tau}_high"]) == pytest.approx((0, -100, 100))
        assert (agree[tau], agree[f"{tau}_low"], agree[f"{tau}_high"]) == pytest.approx((100, 100, 100))
    acc = ("pairwise_acc", "pairwise_acc_low", "pairwise_acc_high")
    assert tuple(split[c] for c in acc) == pytest.approx((0.5, 0, 1))
    assert tuple(agree[c] for c in acc) == pytest.approx((1, 1, 1))


def test_headline_variants_are_the_published_ones():
    from eval.preferences import FORMATS

    assert FORMATS["flickr8k-expert"].headline is TauVariant.C
    assert FORMATS["flickr8k-crowdflower"].headline is TauVariant.B


def test_correlations_table_columns():
    table = _table(["a", "a", "b", "b"], list("xyxy"), [1, 2, 2, 1])
    out = correlate(table, {"m": [1, 2, 2, 1]}, n_boot=20)
    ci = [f"{s}{x}" for s in ("tau_b", "tau_c", "pairwise_acc") for x in ("", "_low", "_high")]
    assert list(out.columns) == ["metric", *ci, "n", "note"]
    assert out.loc[0, "n"] == 4
