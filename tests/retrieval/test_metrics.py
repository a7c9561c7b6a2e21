"""Metrics against hand-computed rankings and against straightforward re-implementations of the authors' loops."""

import math

import numpy as np
import pytest
import torch

from retrieval.aggregate import apply_empty_action, summarize
from retrieval.errors import EmptyPositivesError
from retrieval.metrics import average_precision, query_metrics


def ranking(n: int, positive_ranks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores n..1 (item i ranked i-th) and a relevance mask with positives at the given 1-based ranks."""
    scores = torch.arange(n, 0, -1, dtype=torch.float32).unsqueeze(0)
    rel = torch.zeros(1, n, dtype=torch.bool)
    rel[0, [r - 1 for r in positive_ranks]] = True
    return scores, rel


def rscir_ap(rel_in_rank_order: list[bool]) -> float:
    """rscir evaluate.py's metrics_calc: mean of precision at each relevant rank."""
    precisions, count = [], 0
    for k, r in enumerate(rel_in_rank_order, start=1):
        if r:
            count += 1
            precisions.append(count / k)
    return sum(precisions) / len(precisions) if precisions else 0.0


def oxford_ap(rel_in_rank_order: list[bool]) -> float:
    """Revisited-Oxford compute_ap (as in i-CIR/FreeDom utils.py, with 1/n instead of 1/(n + 1e-5))."""
    ranks = [i for i, r in enumerate(rel_in_rank_order) if r]
    ap = 0.0
    for j, rank in enumerate(ranks):
        p0 = 1.0 if rank == 0 else j / rank
        p1 = (j + 1) / (rank + 1)
        ap += (p0 + p1) / 2 / len(ranks)
    return ap


def test_hand_computed_ap_both_variants():
    """Positives at ranks 1, 3, 6 of 10. Non-interpolated: (1/1 + 2/3 + 3/6)/3 = 0.72222.
    Trapezoidal: [(1+1)/2 + (1/2+2/3)/2 + (2/5+3/6)/2]/3 = (1 + 0.583333 + 0.45)/3 = 0.677778."""
    s, r = ranking(10, [1, 3, 6])
    assert average_precision(s, r).item() == pytest.approx((1 + 2 / 3 + 3 / 6) / 3)
    assert average_precision(s, r, variant="trapezoidal").item() == pytest.approx(
        (1 + (0.5 + 2 / 3) / 2 + 0.45) / 3
    )


def test_recall_precision_hit_at_k():
    s, r = ranking(10, [1, 3, 6])
    m = query_metrics(s, r, ks=(1, 2, 5, 20))
    assert m["recall@1"].item() == pytest.approx(1 / 3) and m["recall@5"].item() == pytest.approx(2 / 3)
    assert m["recall@20"].item() == 1.0
    assert m["precision@2"].item() == 0.5 and m["precision@5"].item() == pytest.approx(2 / 5)
    assert m["hit@1"].item() == 1.0 and m["n_positives"].item() == 3
    s, r = ranking(10, [4])
    m = query_metrics(s, r, ks=(3, 4))
    assert m["hit@3"].item() == 0.0 and m["hit@4"].item() == 1.0


def test_circo_map_at_k():
    """CIRCO AP@k = sum of precision at positives within k / min(#positives, k).
    Positives at ranks 2 and 4 of 6, k = 3: (1/2)/min(2, 3) = 0.25; k = 5: (1/2 + 2/4)/2 = 0.5.
    One positive at rank 1 with k = 1: 1/1."""
    s, r = ranking(6, [2, 4])
    m = query_metrics(s, r, map_at=(1, 3, 5))
    assert (
        m["map@1"].item() == 0.0
        and m["map@3"].item() == pytest.approx(0.25)
        and m["map@5"].item() == pytest.approx(0.5)
    )


def test_all_positives_score_one():
    s, r = ranking(7, list(range(1, 8)))
    for variant in ("non-interpolated", "trapezoidal"):
        assert average_precision(s, r, variant=variant).item() == pytest.approx(1.0)
    m = query_metrics(s, r, ks=(3,))
    assert m["recall@3"].item() == pytest.approx(3 / 7) and m["precision@3"].item() == 1.0


def test_no_positives_is_undefined_until_aggregated():
    s, r = ranking(5, [])
    m = query_metrics(s, r, ks=(1,), map_at=(5,))
    assert all(math.isnan(m[k].item()) for k in ("ap", "recall@1", "hit@1", "precision@1", "map@5"))
    assert m["n_positives"].item() == 0
    values = np.array([1.0, np.nan])
    assert apply_empty_action(values, "zero").tolist() == [1.0, 0.0]
    assert summarize(values, ["a", "a"], empty_positives="skip").overall == 1.0
    assert summarize(values, ["a", "a"], empty_positives="zero").overall == 0.5
    with pytest.raises(EmptyPositivesError, match="1 of 2 queries have no positive"):
        summarize(values, ["a", "a"], empty_positives="error")


def test_ties_rules():
    """Scores [.5, .5, .5, .1, 0], positives at items 1 and 4. index: ranks 2, 5 -> (1/2 + 2/5)/2 = 0.45;
    pessimistic (tied positive after tied negatives): ranks 3, 5 -> (1/3 + 2/5)/2; optimistic: ranks 1, 5."""
    s = torch.tensor([[0.5, 0.5, 0.5, 0.1, 0.0]])
    r = torch.tensor([[False, True, False, False, True]])
    assert average_precision(s, r, ties="index").item() == pytest.approx(0.45)
    assert average_precision(s, r, ties="pessimistic").item() == pytest.approx((1 / 3 + 2 / 5) / 2)
    assert average_precision(s, r, ties="optimistic").item() == pytest.approx((1 + 2 / 5) / 2)
    with pytest.raises(ValueError, match="ties must be one of"):
        average_precision(s, r, ties="random")


def test_equals_the_authors_loops_on_random_rankings():
    """Both variants equal a per-query loop over the sorted ranking (rscir / revisited Oxford) to 1e-12."""
    g = torch.Generator().manual_seed(0)  # test results depend on this seed only through the random data
    scores = torch.rand(64, 300, generator=g)
    rel = torch.rand(64, 300, generator=g) < 0.05
    rel[0] = False
    ours = {v: average_precision(scores, rel, variant=v) for v in ("non-interpolated", "trapezoidal")}
    for i in range(64):
        order = torch.sort(scores[i], descending=True, stable=True).indices
        ranked = rel[i][order].tolist()
        expected_rscir = rscir_ap(ranked)
        got = ours["non-interpolated"][i].item()
        assert (math.isnan(got) and not any(ranked)) or got == pytest.approx(expected_rscir, abs=1e-12)
        if any(ranked):
            assert ours["trapezoidal"][i].item() == pytest.approx(oxford_ap(ranked), abs=1e-12)


def test_summaries_overall_macro_and_subgroups():
    values = np.array([1.0, 0.0, 0.5, 0.5, 1.0])
    groups = ["color", "color", "color", "shape", "shape"]
    subs = ["white", "white", "purple", "oval", "round"]
    s = summarize(values, groups, subgroups=subs, order=["shape", "color"])
    assert list(s.per_group) == ["shape", "color"]
    assert s.per_group == {"shape": 0.75, "color": 0.5} and s.overall == pytest.approx(0.6)
    assert s.macro == pytest.approx(0.625)
    by_values = summarize(values, groups, subgroups=subs, group_mean="subgroups")
    assert by_values.per_group["color"] == pytest.approx((0.5 + 0.5) / 2)  # white 0.5, purple 0.5
    assert s.group_counts == {"shape": 2, "color": 3}


def test_subset_recall_ranks_full_gallery_scores_within_the_subset():
    """CIRR's Recall_subset: the target is 2nd in the gallery (a non-member outranks it) but 1st in its img_set;
    the reference is excluded from both rankings; WeiCom keeps its full-gallery calibration."""
    import torch.nn.functional as F

    from retrieval.data import EvalData
    from retrieval.evaluate import evaluate
    from retrieval.methods import build_method

    e = torch.eye(4)
    # database: 0 reference (member, excluded), 1 target (member), 2 non-member distractor, 3 member distractor
    database = F.normalize(torch.stack([e[0], e[1] + 0.2 * e[3], e[1] + 0.1 * e[0], e[3]]), dim=-1)
    query = F.normalize(e[1] + 0.5 * e[0], dim=-1)[None]
    data = EvalData(
        query_image=query,
        query_text=query,
        database=database,
        positives=torch.tensor([[0, 1]]),
        query_group=["cirr"],
        exclude=torch.tensor([[0, 0]]),
        subset=torch.tensor([[0, 0], [0, 1], [0, 3]]),
    ).validate()
    scores = (query @ database.T)[0]
    assert scores[2] > scores[1] > scores[3]  # the planted order
    res = evaluate(build_method("image"), data, ks=(1, 2), subset_ks=(1, 2))
    assert res.per_query["hit@1"].tolist() == [0.0] and res.per_query["hit@2"].tolist() == [1.0]
    assert res.per_query["subset_hit@1"].tolist() == [1.0] and res.per_query["subset_hit@2"].tolist() == [1.0]
    plain = evaluate(build_method("image"), data, ks=(1, 2))
    assert "subset_hit@1" not in plain.per_query


def icir_compute_ap(ranks: list[int], nres: int) -> float:
    """billpsomas/icir utils.compute_ap, re-derived: recall step 1 / (nres + 1e-5)."""
    ap, step = 0.0, 1.0 / (nres + 1e-5)
    for j, rank in enumerate(ranks):
        p0 = 1.0 if rank == 0 else j / rank
        ap += (p0 + (j + 1) / (rank + 1)) * step / 2.0
    return ap


def test_trapezoidal_eps_is_icir_compute_ap_and_min_macro_is_minmap():
    g = torch.Generator().manual_seed(5)
    scores = torch.rand(12, 80, generator=g)
    rel = torch.rand(12, 80, generator=g) < 0.1
    rel[:, 0] = True  # every query has a positive
    got = average_precision(scores, rel, variant="trapezoidal-eps")
    aps = []
    for i in range(12):
        order = torch.sort(scores[i], descending=True, stable=True).indices
        ranks = [k for k, r in enumerate(rel[i][order].tolist()) if r]
        aps.append(icir_compute_ap(ranks, len(ranks)))
        assert got[i].item() == pytest.approx(aps[-1], abs=1e-12)
    plain = average_precision(scores, rel, variant="trapezoidal")
    assert (plain > got).all()
    instances = ["a"] * 5 + ["b"] * 7
    s = summarize(np.array(aps), instances)
    # run_retrieval.save_results: minmAP = mean over instances of np.min(APs of the instance)
    assert s.min_macro == pytest.approx((min(aps[:5]) + min(aps[5:])) / 2, abs=1e-12)
    assert s.macro == pytest.approx((np.mean(aps[:5]) + np.mean(aps[5:])) / 2, abs=1e-12)


def test_tie_bounds_on_a_hand_computed_ranking():
    """Scores 0.9, 0.5, 0.5, 0.5, 0.1 with positives at items 1 and 3 (both tied with the negative item 2).
    Non-interpolated AP by hand: index order ranks 2, 4 -> (1/2 + 2/4)/2 = 1/2; pessimistic ranks 3, 4 ->
    (1/3 + 2/4)/2 = 5/12; optimistic ranks 2, 3 -> (1/2 + 2/3)/2 = 7/12. A second row without ties keeps its
    AP as both bounds and counts no tied positive."""
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.5, 0.1], [0.9, 0.5, 0.5, 0.5, 0.1]])
    relevant = torch.tensor([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    out = query_metrics(scores, relevant)
    assert out["ap"].tolist() == pytest.approx([1 / 2, 1.0])
    assert out["tied_positives"].tolist() == [2.0, 0.0]
    assert out["ap_pessimistic"].tolist() == pytest.approx([5 / 12, 1.0])
    assert out["ap_optimistic"].tolist() == pytest.approx([7 / 12, 1.0])
    for rule, expected in (("pessimistic", 5 / 12), ("optimistic", 7 / 12)):  # the bounds are those rules
        assert query_metrics(scores, relevant, ties=rule)["ap"][0].item() == pytest.approx(expected)
    only_positives = query_metrics(torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool))
    assert only_positives["tied_positives"].item() == 0  # ties among positives do not move AP


def _read_from_a_sort(scores: torch.Tensor, relevant: torch.Tensor, ties: str, k: int):
    """Per row: AP, recall@k and the top k read off a plainly sorted ranking (Python's sort of (-score, tie
    flag, index)), the way the metrics were computed before they were counted."""
    aps, recalls, tops = [], [], []
    for s, r in zip(scores.tolist(), relevant.tolist()):
        flag = [0] * len(r) if ties == "index" else [x if ties == "pessimistic" else not x for x in r]
        order = sorted(range(len(s)), key=lambda i, s=s, flag=flag: (-s[i], flag[i], i))
        ranks = [pos for pos, i in enumerate(order) if r[i]]
        aps.append(sum((j + 1) / (q + 1) for j, q in enumerate(ranks)) / len(ranks) if ranks else math.nan)
        recalls.append(sum(q < k for q in ranks) / len(ranks) if ranks else math.nan)
        tops.append(sorted(range(len(s)), key=lambda i: (-s[i], i))[:k])
    return aps, recalls, tops


@pytest.mark.parametrize("ties", ["index", "pessimistic", "optimistic"])
def test_counted_ranks_equal_a_sorted_ranking_under_heavy_ties(ties):
    """Scores on 4 levels (with -0.0, +0.0 and -inf among them), so most positives tie with negatives: the
    counted ranks give what reading a sorted ranking gives, and top_k the sorted order's first k."""
    from retrieval.metrics import top_k

    g = torch.Generator().manual_seed(0)
    levels = torch.tensor([float("-inf"), -0.0, 0.0, 0.5])
    scores = levels[torch.randint(0, 4, (40, 23), generator=g)]
    relevant = torch.rand(40, 23, generator=g) < 0.3
    aps, recalls, tops = _read_from_a_sort(scores, relevant, ties, 5)
    out = query_metrics(scores, relevant, ks=(5,), ties=ties)
    assert out["ap"].tolist() == pytest.approx(aps, abs=1e-12, nan_ok=True)
    assert out["recall@5"].tolist() == pytest.approx(recalls, abs=1e-12, nan_ok=True)
    assert top_k(scores, 5)[0].tolist() == tops
    assert out["tied_positives"].sum() > 0  # the case is really about ties
