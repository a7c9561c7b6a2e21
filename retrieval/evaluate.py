"""Run one method over EvalData and collect per-query metrics.

For each database group (one, or one per i-CIR instance), the method is prepared once; queries are scored in
chunks sized so a chunk's (B, N) score matrix stays near 8M entries; each chunk's relevance is built densely
from the sparse positives, and all metrics come from one sort per query row (retrieval.metrics). Excluded
(query, item) pairs get score −inf and are never positives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from recon_score.errors import InputError, ReconScoreError
from retrieval.aggregate import Summary, summarize
from retrieval.data import EvalData
from retrieval.methods.base import Method, MethodContext, Resources
from retrieval.metrics import AP_VARIANTS, TIES, query_metrics

CHUNK_ENTRIES = 1 << 23


@dataclass
class EvalResult:
    method: str
    config: dict
    per_query: dict[str, np.ndarray]  # metric -> (Q,), NaN for queries without positives
    ap_variant: str
    ties: str
    details: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    topk_ids: np.ndarray | None = None  # (Q, k) global database indices, best first; -1 pads short lists
    topk_scores: np.ndarray | None = None  # (Q, k) float32, NaN where padded

    def summary(
        self,
        data: EvalData,
        metric: str = "ap",
        *,
        empty_positives: str = "zero",
        group_mean: str = "queries",
        order: Sequence[str] | None = None,
    ) -> Summary:
        if metric not in self.per_query:
            raise KeyError(f"metric {metric!r} was not computed; available: {', '.join(self.per_query)}")
        return summarize(
            self.per_query[metric],
            data.query_group,
            subgroups=data.query_subgroup,
            empty_positives=empty_positives,
            group_mean=group_mean,
            order=order,
            what=metric,
        )

    def tie_range(
        self, data: EvalData, *, empty_positives: str = "zero", group_mean: str = "queries"
    ) -> dict | None:
        """How far mAP moves between the pessimistic and optimistic tie rules, or None when no positive
        shares its score with a negative (then AP does not depend on the database order)."""
        tied = self.per_query.get("tied_positives")
        if tied is None or not np.nansum(tied):
            return None
        bounds = {}
        for rule in ("pessimistic", "optimistic"):
            bounds[rule] = self.summary(
                data, f"ap_{rule}", empty_positives=empty_positives, group_mean=group_mean
            )
        low, high = bounds["pessimistic"], bounds["optimistic"]
        return {
            "tied_positives": int(np.nansum(tied)),
            "queries": int((np.nan_to_num(tied) > 0).sum()),
            "rule": self.ties,
            "overall": [low.overall, high.overall],
            "macro": [low.macro, high.macro],
        }


def tie_message(method: str, rng: dict) -> str:
    """One line for the console: the mAP range the tie rule spans."""
    lo, hi = rng["macro"]
    olo, ohi = rng["overall"]
    return (
        f"{method}: {rng['tied_positives']} positives of {rng['queries']} queries share their score with a "
        f"negative, so AP depends on the tie rule (--ties {rng['rule']}): macro mAP {100 * lo:.2f}-"
        f"{100 * hi:.2f}%, overall {100 * olo:.2f}-{100 * ohi:.2f}% (pessimistic-optimistic)"
    )


def _local_pairs(pairs: Tensor | None, q_map: Tensor, d_map: Tensor, n_q: int) -> tuple[Tensor, Tensor]:
    """Pairs of this group in local indices, sorted by query, and (n_q + 1,) row pointers."""
    if pairs is None or len(pairs) == 0:
        return torch.zeros(0, 2, dtype=torch.long), torch.zeros(n_q + 1, dtype=torch.long)
    lq, ld = q_map[pairs[:, 0]], d_map[pairs[:, 1]]
    keep = (lq >= 0) & (ld >= 0)
    lq, ld = lq[keep], ld[keep]
    order = torch.argsort(lq, stable=True)
    local = torch.stack([lq[order], ld[order]], dim=1)
    ptr = torch.searchsorted(local[:, 0].contiguous(), torch.arange(n_q + 1))
    return local, ptr


def _dense(local: Tensor, ptr: Tensor, start: int, stop: int, n: int) -> Tensor:
    block = local[ptr[start] : ptr[stop]]
    out = torch.zeros(stop - start, n, dtype=torch.bool)
    out[block[:, 0] - start, block[:, 1]] = True
    return out


@dataclass
class _Options:
    ap: str
    ks: Sequence[int]
    map_at: Sequence[int]
    subset_ks: Sequence[int]
    ties: str
    chunk_size: int | None
    topk: int
    index: str


@dataclass
class _Collector:
    """What every database group adds to the result."""

    q_total: int
    k: int
    per_query: dict[str, np.ndarray] = field(default_factory=dict)
    details: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    top_ids: np.ndarray | None = None
    top_scores: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.k:
            self.top_ids = np.full((self.q_total, self.k), -1, dtype=np.int64)
            self.top_scores = np.full((self.q_total, self.k), np.nan, dtype=np.float32)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def store(self, rows: np.ndarray, metrics: dict[str, Tensor]) -> None:
        for name, values in metrics.items():
            if name not in self.per_query:
                self.per_query[name] = np.full(self.q_total, np.nan)
            self.per_query[name][rows] = values.numpy()


def evaluate(
    method: Method,
    data: EvalData,
    *,
    resources: Resources | None = None,
    ap: str = "non-interpolated",
    ks: Sequence[int] = (1, 5, 10),
    map_at: Sequence[int] = (),
    subset_ks: Sequence[int] = (),
    ties: str = "index",
    chunk_size: int | None = None,
    progress: bool = False,
    topk: int = 0,
    index: str = "exact",
) -> EvalResult:
    """Per-query metrics of `method` on `data` (see retrieval.metrics for the names and variants).

    With `topk` > 0 the k best database items of every query are kept too (excluded pairs never appear):
    from the exact scores (ties by database index, as the metrics), or from a FAISS `index`
    (retrieval.choices.INDEX_KINDS) over the composed query vectors of linear methods. Metrics are always exact.
    With `subset_ks` and `data.subset`, `subset_hit@K` ranks the same scores within each query's subset
    (CIRR's Recall_subset@K: scores are never recomputed on the subset, so database-dependent methods such as
    WeiCom keep their full-gallery calibration).

    Raises:
        MethodUnavailableError: the method lacks something in `resources` (checked before any scoring).
        InputError: `data` has no queries (there is nothing to average).
    """
    if data.n_queries == 0:
        raise InputError("no queries to evaluate (0 query rows); every metric would be an empty mean")
    if ap not in AP_VARIANTS:
        raise ValueError(f"ap must be one of {', '.join(AP_VARIANTS)}, got {ap!r}")
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    resources = resources or Resources()
    method.check(resources)
    started = time.perf_counter()
    opts = _Options(ap, ks, map_at, subset_ks, ties, chunk_size, topk, index)
    out = _Collector(q_total=data.n_queries, k=min(topk, data.n_database))

    from recon_score.progress import Progress

    bar = Progress(data.n_queries, unit="query", desc=method.name, disable=not progress, leave=False)
    for group, qi, di in data.db_groups():
        if len(qi) == 0:
            continue
        if len(di) == 0:
            raise InputError(f"database group {group!r} has queries but no database items")
        _evaluate_group(method, data, resources, qi, di, opts, out, bar)
    bar.close()
    return EvalResult(
        method=method.name,
        config=method.describe()["config"],
        per_query=out.per_query,
        ap_variant=ap,
        ties=ties,
        details=out.details,
        notes=out.notes,
        seconds=time.perf_counter() - started,
        topk_ids=out.top_ids,
        topk_scores=out.top_scores,
    )


def _evaluate_group(
    method: Method,
    data: EvalData,
    resources: Resources,
    qi: Tensor,
    di: Tensor,
    opts: _Options,
    out: _Collector,
    bar,
) -> None:
    """Prepare `method` on one database group and score its queries chunk by chunk."""
    q_total, n_total = data.n_queries, data.n_database
    q_map = torch.full((q_total,), -1, dtype=torch.long)
    q_map[qi] = torch.arange(len(qi))
    d_map = torch.full((n_total,), -1, dtype=torch.long)
    d_map[di] = torch.arange(len(di))
    pos, pos_ptr = _local_pairs(data.positives, q_map, d_map, len(qi))
    exc, exc_ptr = _local_pairs(data.exclude, q_map, d_map, len(qi))
    sub, sub_ptr = _local_pairs(data.subset if opts.subset_ks else None, q_map, d_map, len(qi))
    ctx = MethodContext(
        query_image=data.query_image[qi],
        query_text=data.query_text[qi],
        database=data.database[di],
        query_index=qi,
        resources=resources,
        database_index=di,
    )
    prepared = method.prepare(ctx)
    for note in prepared.notes:
        out.note(note)
    if prepared.details is not None:
        out.details = out.details if out.details is not None else [""] * q_total
        for j, text in zip(qi.tolist(), prepared.details):
            out.details[j] = text
    n, k = len(di), out.k
    approximate = bool(k) and opts.index != "exact"
    if approximate and prepared.query_vectors is None:
        approximate = False
        out.note(f"{method.name} is not linear (no composed query vector): top-{k} from exact scores")
    if approximate:
        database = prepared.database if prepared.database is not None else ctx.database
        ids, sc = _index_topk(prepared.query_vectors, database, exc, exc_ptr, k, opts.index)
        _store_topk(out.top_ids, out.top_scores, qi.numpy(), di, ids, sc)
    step = opts.chunk_size or max(1, min(4096, CHUNK_ENTRIES // max(n, 1)))
    for start in range(0, len(qi), step):
        stop = min(start + step, len(qi))
        scores = _chunk_scores(method.name, prepared, start, stop, n)
        relevant = _dense(pos, pos_ptr, start, stop, n)
        if len(exc):
            excluded = _dense(exc, exc_ptr, start, stop, n)
            scores = scores.masked_fill(excluded, float("-inf"))
            relevant &= ~excluded
        metrics = _chunk_metrics(method.name, scores, relevant, opts, start, stop)
        if len(sub):
            member = _dense(sub, sub_ptr, start, stop, n)
            in_subset = query_metrics(
                scores.masked_fill(~member, float("-inf")),
                relevant & member,
                ap=opts.ap,
                ks=opts.subset_ks,
                ties=opts.ties,
            )
            metrics.update({f"subset_{m}": in_subset[m] for m in (f"hit@{c}" for c in opts.subset_ks)})
        rows = qi[start:stop].numpy()
        if k and not approximate:
            order = torch.sort(scores, dim=1, descending=True, stable=True)
            _store_topk(out.top_ids, out.top_scores, rows, di, order.indices[:, :k], order.values[:, :k])
        out.store(rows, metrics)
        bar.update(stop - start)


def _chunk_scores(name: str, prepared, start: int, stop: int, n: int) -> Tensor:
    scores = prepared.score(torch.arange(start, stop))
    if scores.shape != (stop - start, n):
        raise RuntimeError(
            f"{name} returned scores of shape {tuple(scores.shape)}, expected {(stop - start, n)}"
        )
    if torch.isnan(scores).any():
        raise RuntimeError(f"{name} produced NaN scores (queries {start}..{stop - 1} of a group)")
    return scores


def _chunk_metrics(
    name: str, scores: Tensor, relevant: Tensor, opts: _Options, start: int, stop: int
) -> dict[str, Tensor]:
    try:
        return query_metrics(scores, relevant, ap=opts.ap, ks=opts.ks, map_at=opts.map_at, ties=opts.ties)
    except ValueError as err:  # NaN scores: name the method; the run records it as failed
        raise ReconScoreError(f"{name}: {err} (queries {start}..{stop - 1} of a group)") from err


def _store_topk(ids_out, scores_out, rows, di: Tensor, local: Tensor, scores: Tensor) -> None:
    """Write local top-k (B, <=k) into the global arrays; -inf (excluded) and -1 (FAISS padding) become pads."""
    valid = (local >= 0) & torch.isfinite(scores)
    glob = torch.where(valid, di[local.clamp(min=0)], torch.full_like(local, -1))
    width = local.shape[1]
    ids_out[rows, :width] = glob.numpy()
    scores_out[rows, :width] = torch.where(valid, scores, torch.full_like(scores, float("nan"))).numpy()


def _index_topk(queries: Tensor, database: Tensor, exc: Tensor, exc_ptr: Tensor, k: int, kind: str):
    """(B, k) local ids and scores from a FAISS index, asking for enough extra items to drop excluded pairs."""
    from retrieval.index import FaissIndex

    extra = int((exc_ptr[1:] - exc_ptr[:-1]).max()) if len(exc) else 0
    want = min(k + extra, database.shape[0])
    scores, ids = FaissIndex(database, kind).search(queries, want)
    if extra:
        banned = torch.zeros(ids.shape, dtype=torch.bool)
        for q in range(ids.shape[0]):
            gone = exc[exc_ptr[q] : exc_ptr[q + 1], 1]
            banned[q] = torch.isin(ids[q], gone)
        order = torch.sort(banned.int(), dim=1, stable=True).indices  # kept items first, in rank order
        ids = torch.where(banned, -1, ids).gather(1, order)
        scores = scores.gather(1, order)
    return ids[:, :k], scores[:, :k]
