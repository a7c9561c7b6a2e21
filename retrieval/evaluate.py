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
    (retrieval.index.INDEX_KINDS) over the composed query vectors of linear methods. Metrics are always exact.
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
    q_total, n_total = data.n_queries, data.n_database
    per_query: dict[str, np.ndarray] = {}
    details: list[str] | None = None
    notes: list[str] = []
    k = min(topk, n_total)
    top_ids = np.full((q_total, k), -1, dtype=np.int64) if k else None
    top_scores = np.full((q_total, k), np.nan, dtype=np.float32) if k else None

    from tqdm.auto import tqdm

    bar = tqdm(total=q_total, unit="query", desc=method.name, disable=not progress, leave=False)
    for _group, qi, di in data.db_groups():
        if len(qi) == 0:
            continue
        if len(di) == 0:
            raise InputError(f"database group {_group!r} has queries but no database items")
        q_map = torch.full((q_total,), -1, dtype=torch.long)
        q_map[qi] = torch.arange(len(qi))
        d_map = torch.full((n_total,), -1, dtype=torch.long)
        d_map[di] = torch.arange(len(di))
        pos, pos_ptr = _local_pairs(data.positives, q_map, d_map, len(qi))
        exc, exc_ptr = _local_pairs(data.exclude, q_map, d_map, len(qi))
        sub, sub_ptr = _local_pairs(data.subset if subset_ks else None, q_map, d_map, len(qi))
        ctx = MethodContext(
            query_image=data.query_image[qi],
            query_text=data.query_text[qi],
            database=data.database[di],
            query_index=qi,
            resources=resources,
        )
        prepared = method.prepare(ctx)
        for note in prepared.notes:
            if note not in notes:
                notes.append(note)
        if prepared.details is not None:
            details = details if details is not None else [""] * q_total
            for j, text in zip(qi.tolist(), prepared.details):
                details[j] = text
        n = len(di)
        approximate = bool(k) and index != "exact"
        if approximate and prepared.query_vectors is None:
            approximate = False
            note = f"{method.name} is not linear (no composed query vector): top-{k} from exact scores"
            if note not in notes:
                notes.append(note)
        if approximate:
            ids, sc = _index_topk(prepared.query_vectors, ctx.database, exc, exc_ptr, k, index)
            _store_topk(top_ids, top_scores, qi.numpy(), di, ids, sc)
        step = chunk_size or max(1, min(4096, CHUNK_ENTRIES // max(n, 1)))
        for start in range(0, len(qi), step):
            stop = min(start + step, len(qi))
            scores = prepared.score(torch.arange(start, stop))
            if scores.shape != (stop - start, n):
                raise RuntimeError(
                    f"{method.name} returned scores of shape {tuple(scores.shape)}, expected {(stop - start, n)}"
                )
            if torch.isnan(scores).any():
                raise RuntimeError(
                    f"{method.name} produced NaN scores (queries {start}..{stop - 1} of a group)"
                )
            relevant = _dense(pos, pos_ptr, start, stop, n)
            if len(exc):
                excluded = _dense(exc, exc_ptr, start, stop, n)
                scores = scores.masked_fill(excluded, float("-inf"))
                relevant &= ~excluded
            try:
                metrics = query_metrics(scores, relevant, ap=ap, ks=ks, map_at=map_at, ties=ties)
            except ValueError as err:  # NaN scores: name the method; the run records it as failed
                raise ReconScoreError(
                    f"{method.name}: {err} (queries {start}..{stop - 1} of a group)"
                ) from err
            if len(sub):
                member = _dense(sub, sub_ptr, start, stop, n)
                in_subset = query_metrics(
                    scores.masked_fill(~member, float("-inf")),
                    relevant & member,
                    ap=ap,
                    ks=subset_ks,
                    ties=ties,
                )
                metrics.update({f"subset_{m}": in_subset[m] for m in (f"hit@{c}" for c in subset_ks)})
            rows = qi[start:stop].numpy()
            if k and not approximate:
                order = torch.sort(scores, dim=1, descending=True, stable=True)
                _store_topk(top_ids, top_scores, rows, di, order.indices[:, :k], order.values[:, :k])
            for name, values in metrics.items():
                if name not in per_query:
                    per_query[name] = np.full(q_total, np.nan)
                per_query[name][rows] = values.numpy()
            bar.update(stop - start)
    bar.close()
    return EvalResult(
        method=method.name,
        config=method.describe()["config"],
        per_query=per_query,
        ap_variant=ap,
        ties=ties,
        details=details,
        notes=notes,
        seconds=time.perf_counter() - started,
        topk_ids=top_ids,
        topk_scores=top_scores,
    )


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
