"""Per-query ranking metrics (AP variants, Recall@K, hit@K, Precision@K, mAP@K, tie bounds) read from the
positives' ranks, vectorised over a chunk of queries without materialising a ranking. NaN marks a query without
positives; `retrieval.aggregate` decides what it adds to a mean. See docs/retrieval.md, "Metrics".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from retrieval.choices import AP_VARIANTS, TIES, check_choice
from retrieval.data import as_numpy

if TYPE_CHECKING:
    from torch import Tensor


def _check(scores: Tensor, relevant: Tensor) -> None:
    if scores.ndim != 2 or relevant.shape != scores.shape:
        raise ValueError(
            f"expected scores and relevant of the same shape (B, N), got {tuple(scores.shape)} and "
            f"{tuple(relevant.shape)}"
        )
    if str(relevant.dtype).removeprefix("torch.") != "bool":
        raise TypeError(f"relevant must be a bool tensor, got {relevant.dtype}")


def scores_array(scores: np.ndarray | Tensor) -> np.ndarray:
    """A method's (B, N) scores as float32 numpy (a view where it can be): the metrics run on numpy whatever
    the method computes in, so a bundle's evaluation never loads torch."""
    if isinstance(scores, np.ndarray):
        return scores.astype(np.float32, copy=False)
    return scores.detach().float().cpu().numpy()


_INDEX_BITS = 30  # the tie-break key holds the database index in its low 30 bits, the score above bit 30


def _check_width(n: int) -> None:
    if n >= 1 << _INDEX_BITS:
        raise ValueError(f"at most 2^{_INDEX_BITS} database items per ranking, got {n}")


def _float32(scores: np.ndarray | Tensor) -> np.ndarray:
    """(B, N) float32 copy of the scores with −0.0 made +0.0 (their bits then order as the values)."""
    _check_width(scores.shape[-1])
    x = scores_array(scores) + np.float32(0.0)
    if np.isnan(x).any():
        raise ValueError("scores contain NaN; a method produced undefined similarities")
    return x


def _keys(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """int64 keys ascending in ranking order: the score's descending-order bits above bit 30, then the
    database `index`."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.int32)
    key32 = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # int32 ordered as the floats
    np.invert(key32, out=key32)  # descending scores first
    key = key32.astype(np.int64)
    key <<= 31
    key |= index
    return key


def top_k(scores: np.ndarray | Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, k) database indices and their scores, best first, ties by database index (as the metrics' default
    rule), from one partition of each row: only the k kept items are sorted."""
    x = _float32(scores)
    n = x.shape[1]
    k = min(k, n)
    key = _keys(x, np.arange(n, dtype=np.int64))
    if k < n:
        key = np.take_along_axis(key, np.argpartition(key, k - 1, axis=1)[:, :k], axis=1)
    key.sort(axis=1)
    ids = key & ((1 << _INDEX_BITS) - 1)
    return ids, np.take_along_axis(scores_array(scores), ids, axis=1)


@dataclass
class PositiveRanks:
    """The positives of a chunk, row by row in ranking order (score descending, then database index), with
    their 0-based rank under each tie rule. `hits` is j + 1 for the j-th positive of its row (the same under
    every rule: tie rules only move positives against negatives). Every metric is read from these in
    O(#positives)."""

    b: int
    rows: np.ndarray  # (P,) ascending
    hits: np.ndarray  # (P,) float64
    n_pos: np.ndarray  # (B,) float64
    ranks: dict[str, np.ndarray]  # tie rule -> (P,) int64
    tied: np.ndarray  # (P,) bool: a negative has the positive's score
    _within: dict[tuple[int, str], np.ndarray] = field(default_factory=dict, repr=False)

    def _undefined_where_empty(self, values: np.ndarray) -> np.ndarray:
        return np.where(self.n_pos > 0, values, np.nan)

    def _per_row(self, weights: np.ndarray | None = None, where: np.ndarray | None = None) -> np.ndarray:
        rows = self.rows if where is None else self.rows[where]
        w = weights if where is None or weights is None else weights[where]
        return np.bincount(rows, weights=w, minlength=self.b).astype(np.float64)

    def _at(self, k: int, rule: str) -> np.ndarray:
        """(B,) number of positives within the top k (counted once per (k, rule): recall, hit and precision
        read the same counts)."""
        if k < 1:
            raise ValueError(f"cut-off k must be >= 1, got {k}")
        if (k, rule) not in self._within:
            self._within[k, rule] = self._per_row(where=self.ranks[rule] < k)
        return self._within[k, rule]

    def average_precision(self, variant: str = "non-interpolated", rule: str = "index") -> np.ndarray:
        check_choice("AP variant", variant, AP_VARIANTS)
        r = self.ranks[rule].astype(np.float64)
        p1 = self.hits / (r + 1.0)
        if variant == "non-interpolated":
            contrib = p1
        else:
            p0 = np.where(r == 0, 1.0, (self.hits - 1.0) / np.maximum(r, 1.0))
            contrib = (p0 + p1) / 2.0
        total = self._per_row(contrib)
        denominator = self.n_pos + 1e-5 if variant == "trapezoidal-eps" else np.maximum(self.n_pos, 1.0)
        return self._undefined_where_empty(total / denominator)

    def recall_at(self, k: int, rule: str = "index") -> np.ndarray:
        """Fraction of the query's positives within the top k (rscir's R@k)."""
        return self._undefined_where_empty(self._at(k, rule) / np.maximum(self.n_pos, 1.0))

    def hit_at(self, k: int, rule: str = "index") -> np.ndarray:
        """1 if any positive is within the top k (Recall@K of CIRR, FashionIQ, EDIR: one target per query)."""
        return self._undefined_where_empty((self._at(k, rule) > 0).astype(np.float64))

    def precision_at(self, k: int, rule: str = "index") -> np.ndarray:
        """Positives within the top k, divided by k (rscir's P@k)."""
        return self._undefined_where_empty(self._at(k, rule) / float(k))

    def ap_at(self, k: int, rule: str = "index") -> np.ndarray:
        """CIRCO's AP@k: sum of precision at the positives within the top k, over min(n positives, k)
        (miccunifi/CIRCO src/evaluation.py)."""
        if k < 1:
            raise ValueError(f"cut-off k must be >= 1, got {k}")
        inside = self.ranks[rule] < k
        p1 = self.hits / (self.ranks[rule].astype(np.float64) + 1.0)
        total = self._per_row(p1, where=inside)
        return self._undefined_where_empty(total / np.clip(self.n_pos, 1.0, float(k)))


def positive_ranks(
    scores: Tensor, rows: np.ndarray, cols: np.ndarray, *, ties: str = "index", work: np.ndarray | None = None
) -> PositiveRanks:
    """Rank every positive (row `rows[i]`, database item `cols[i]`; each pair once) by counting the items
    that outscore it and those that tie with it, under the pessimistic and optimistic rules and under `ties`.

    A positive's rank is (items scored higher) + (positives of equal score and lower index) + (negatives of
    equal score that the rule puts first: none when optimistic, all when pessimistic, those of lower index
    under ``index``; counted only for the positives that have such a negative). `work`, a float32 array of
    at least (B, N), holds the sorted rows (a caller scoring chunk after chunk reuses one; fresh memory costs
    page faults comparable to the sort)."""
    check_choice("ties", ties, TIES)
    _check_width(scores.shape[-1])
    x = scores_array(scores)  # a view where it can be: the sort below copies
    b = x.shape[0]
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    s = x[rows, cols] + np.float32(0.0)  # -0.0 becomes +0.0 (the tie keys compare bits)
    order = _row_then_key(rows, _keys(s, cols))  # ranking order among the positives of each row
    rows, cols, s = rows[order], cols[order], s[order]
    counts = np.bincount(rows, minlength=b)
    first = np.cumsum(counts) - counts
    at = np.arange(len(rows))
    fits = work is not None and work.shape[0] >= b and work.shape[1] >= x.shape[1]
    ascending = work[:b, : x.shape[1]] if fits else np.empty(x.shape, dtype=np.float32)
    np.copyto(ascending, x)
    ascending.sort(axis=1)  # -0.0 and +0.0 compare equal here, as in every comparison below
    if b and x.shape[1] and np.isnan(ascending[:, -1]).any():  # NaN sorts last
        raise ValueError("scores contain NaN; a method produced undefined similarities")
    higher, equal = _count_above_and_equal(ascending, rows, s, first, counts)
    new_run = np.ones(len(rows), dtype=bool)  # runs of positives of one row sharing one score
    new_run[1:] = (rows[1:] != rows[:-1]) | (s[1:] != s[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, at, 0))
    run_id = np.cumsum(new_run) - 1
    equal_before = at - run_start  # the positives of equal score and lower index
    before = higher + equal_before
    tied_negatives = equal - np.bincount(run_id)[run_id]
    ranks = {"optimistic": before, "pessimistic": before + tied_negatives}
    tied = tied_negatives > 0
    if ties == "index":
        index = before.copy()
        if tied.any():
            index[tied] += _tied_negatives_below(x, rows[tied], cols[tied], s[tied], equal_before[tied])
        ranks["index"] = index
    return PositiveRanks(
        b=b,
        rows=rows,
        hits=(at - first[rows] + 1).astype(np.float64),
        n_pos=counts.astype(np.float64),
        ranks=ranks,
        tied=tied,
    )


def _row_then_key(rows: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The permutation sorting by row, then by the unique int64 `key` (two integer argsorts: np.lexsort is
    30x slower here)."""
    by_key = np.argsort(key)
    rank = np.empty(len(key), dtype=np.int64)
    rank[by_key] = np.arange(len(key))
    return np.argsort(rows * max(len(key), 1) + rank)


def _count_above_and_equal(
    sorted_rows: np.ndarray, rows: np.ndarray, s: np.ndarray, first: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per positive: the items of its row scored above it, and those scored equal (itself included). One binary
    search of its score in the row's ascending values gives the first; a second search runs only for the
    positives whose lower neighbour in that order has their score (a tie, rare with continuous scores)."""
    n = sorted_rows.shape[1]
    up_to = np.empty(len(rows), dtype=np.int64)
    for r in np.flatnonzero(counts):
        part = slice(first[r], first[r] + counts[r])
        up_to[part] = np.searchsorted(sorted_rows[r], s[part], side="right")
    equal = np.ones(len(rows), dtype=np.int64)  # the positive itself, the last item <= its score
    below = sorted_rows[rows, np.maximum(up_to - 2, 0)]
    tied = np.flatnonzero((up_to >= 2) & (below == s))  # in row order, as the positives
    for part in np.split(tied, np.flatnonzero(np.diff(rows[tied])) + 1) if len(tied) else ():
        equal[part] = up_to[part] - np.searchsorted(sorted_rows[rows[part[0]]], s[part], side="left")
    return n - up_to, equal


def _tied_negatives_below(
    x: np.ndarray, rows: np.ndarray, cols: np.ndarray, s: np.ndarray, positives_below: np.ndarray
) -> np.ndarray:
    """For positives that share their score with a negative: the items of equal score and lower database index
    less `positives_below` (the positives among them, already counted), i.e. the tied negatives ranked before
    them by the ``index`` rule. A row's positives of one score are tied all together or not at all, so
    `positives_below` is the same whether counted among all positives or the tied ones."""
    out = np.empty(len(rows), dtype=np.int64)
    bounds = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1], True])
    for lo, hi in itertools.pairwise(bounds):
        row = x[rows[lo]] + np.float32(0.0)  # -0.0 becomes +0.0: the keys compare bits
        members = np.flatnonzero(np.isin(row, s[lo:hi]))  # items sharing a tied score, ascending index
        keys = np.sort(_keys(row[members], members))
        mine = _keys(s[lo:hi], cols[lo:hi])
        # equal-score items of lower index = keys below mine minus the keys of strictly higher score
        below = np.searchsorted(keys, mine) - np.searchsorted(keys, mine >> 31 << 31)
        out[lo:hi] = below
    return out - positives_below


def query_metrics(scores: Tensor, relevant: Tensor, **options) -> dict[str, np.ndarray]:
    """`positive_metrics` (and its `options`) with the positives as a dense (B, N) bool mask."""
    _check(scores, relevant)
    rows, cols = np.nonzero(as_numpy(relevant))
    return positive_metrics(scores, rows, cols, **options)


def positive_metrics(
    scores: Tensor,
    rows: np.ndarray,
    cols: np.ndarray,
    *,
    ap: str = "non-interpolated",
    ks: Sequence[int] = (1, 5, 10),
    map_at: Sequence[int] = (),
    ties: str = "index",
    work: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Every per-query metric of a chunk from its positives' ranks: ``ap``, ``n_positives``, ``recall@k``
    (fraction of positives), ``hit@k``, ``precision@k`` for k in `ks`, ``map@k`` (CIRCO's AP@k) for k in
    `map_at`, and the tie bounds: ``tied_positives`` (positives whose score equals a negative's),
    ``ap_pessimistic`` and ``ap_optimistic`` (AP with those positives after / before the tied negatives), each
    (B,) float64, NaN for queries without positives (except the two counts). The positives are (row, database
    item) pairs, each pair once; `work` as in `positive_ranks`."""
    check_choice("AP variant", ap, AP_VARIANTS)
    ranked = positive_ranks(scores, rows, cols, ties=ties, work=work)
    out = {"ap": ranked.average_precision(ap, ties), "n_positives": ranked.n_pos}
    for k in ks:
        out[f"recall@{k}"] = ranked.recall_at(k, ties)
        out[f"hit@{k}"] = ranked.hit_at(k, ties)
        out[f"precision@{k}"] = ranked.precision_at(k, ties)
    for k in map_at:
        out[f"map@{k}"] = ranked.ap_at(k, ties)
    out["tied_positives"] = ranked._per_row(where=ranked.tied)
    out["ap_pessimistic"] = ranked.average_precision(ap, "pessimistic")
    out["ap_optimistic"] = ranked.average_precision(ap, "optimistic")
    return out


def average_precision(
    scores: Tensor, relevant: Tensor, *, variant: str = "non-interpolated", ties: str = "index"
) -> np.ndarray:
    """(B,) AP of each query over the full ranking (see the module docstring for the variants)."""
    _check(scores, relevant)
    rows, cols = np.nonzero(as_numpy(relevant))
    return positive_ranks(scores, rows, cols, ties=ties).average_precision(variant, ties)
