"""Run one method over EvalData and collect per-query metrics, chunk by chunk (about 8M scores each), so memory does
not grow with the number of queries. See docs/retrieval.md, "Evaluation speed and memory"."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from recon_score.errors import InputError, ReconScoreError
from retrieval.aggregate import Summary, summarize
from retrieval.choices import AP_VARIANTS, TIES, check_choice
from retrieval.data import EvalData, as_numpy, as_torch
from retrieval.methods.base import Buffers, Method, MethodContext, Resources
from retrieval.metrics import positive_metrics, top_k

if TYPE_CHECKING:
    from torch import Tensor

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

    def tie_range(self, data: EvalData, **averaging) -> dict | None:
        """How far mAP (averaged as `summary`'s `averaging` options say) moves between the pessimistic and
        optimistic tie rules, or None when no positive shares its score with a negative (then AP does not
        depend on the database order)."""
        tied = self.per_query.get("tied_positives")
        if tied is None or not np.nansum(tied):
            return None
        low, high = (self.summary(data, f"ap_{rule}", **averaging) for rule in ("pessimistic", "optimistic"))
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


@dataclass
class _Pairs:
    """(query, database item) pairs as rows over queries: query q's items are items[ptr[q]:ptr[q + 1]], each
    pair once (a repeated pair would count twice as a positive)."""

    items: np.ndarray
    ptr: np.ndarray

    @classmethod
    def of(cls, pairs: Tensor | None, n_queries: int, n_items: int) -> _Pairs:
        if pairs is None or len(pairs) == 0:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(n_queries + 1, dtype=np.int64))
        p = as_numpy(pairs).astype(np.int64, copy=False)
        key = p[:, 0] * n_items
        key += p[:, 1]
        key.sort()
        repeated = key[1:] == key[:-1]
        if repeated.any():  # np.unique is 100x slower here (numpy 2.4)
            key = key[np.r_[True, ~repeated]]
        ptr = np.searchsorted(key, np.arange(n_queries + 1) * n_items)  # query q's keys: [q n, (q + 1) n)
        key %= n_items
        return cls(key, ptr)

    def __len__(self) -> int:
        return len(self.items)

    def local(self, qi: np.ndarray, d_map: np.ndarray) -> _Pairs:
        """The pairs of queries `qi`, in that order, with items in a group's local indices (`d_map`, -1 outside
        the group): work proportional to these queries' pairs, not to all pairs."""
        lengths = self.ptr[qi + 1] - self.ptr[qi]
        owner = np.repeat(np.arange(len(qi)), lengths)
        offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        local = d_map[self.items[self.ptr[qi][owner] + offset]]
        keep = local >= 0
        ptr = np.zeros(len(qi) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner[keep], minlength=len(qi)), out=ptr[1:])
        return _Pairs(local[keep], ptr)

    def block(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows relative to `start`, items) of queries start..stop-1."""
        counts = np.diff(self.ptr[start : stop + 1])
        return np.repeat(np.arange(stop - start), counts), self.items[self.ptr[start] : self.ptr[stop]]


@dataclass
class _AllPairs:
    """Positives, exclusions and subsets indexed once per evaluation; each group takes its slice."""

    pos: _Pairs
    exc: _Pairs
    sub: _Pairs
    d_map: np.ndarray  # -1 except inside the group being evaluated

    def local(self, q: np.ndarray, d: np.ndarray) -> tuple[_Pairs, _Pairs, _Pairs]:
        if _is_range(q, len(self.pos.ptr) - 1) and _is_range(d, len(self.d_map)):  # one group: all of it
            return self.pos, self.exc, self.sub
        self.d_map[d] = np.arange(len(d))
        try:
            return self.pos.local(q, self.d_map), self.exc.local(q, self.d_map), self.sub.local(q, self.d_map)
        finally:
            self.d_map[d] = -1


def _is_range(indices: np.ndarray, n: int) -> bool:
    """Whether `indices` is 0, 1, ..., n - 1."""
    return len(indices) == n and (n == 0 or (indices[0] == 0 and bool((np.diff(indices) == 1).all())))


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

    def store(self, rows: np.ndarray, metrics: dict[str, np.ndarray]) -> None:
        for name, values in metrics.items():
            if name not in self.per_query:
                self.per_query[name] = np.full(self.q_total, np.nan)
            self.per_query[name][rows] = values


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
    """Per-query metrics of `method` on `data` (retrieval.metrics names them); MethodUnavailableError, before any
    scoring, when the method lacks something in `resources`. With `topk` > 0 each query's k best database items
    too (never an excluded pair), from the exact scores or from a FAISS `index` over a linear method's composed
    query vectors; metrics are always exact. `subset_hit@K` (CIRR's Recall_subset@K) ranks the same scores
    within each query's subset, so database-dependent methods such as WeiCom keep their full-gallery
    calibration."""
    if data.n_queries == 0:
        raise InputError("no queries to evaluate (0 query rows); every metric would be an empty mean")
    check_choice("ap", ap, AP_VARIANTS)
    check_choice("ties", ties, TIES)
    resources = resources or Resources()
    method.check(resources)
    # numpy for the methods that take it, also in a run (whose features are tensors): one code path for both
    # commands, so copies of one database image tie exactly (dot_scores' distinct rows) in either
    data, resources = (
        (data.arrays(), resources.arrays()) if method.takes_numpy else (data.tensors(), resources.tensors())
    )
    started = time.perf_counter()
    opts = _Options(ap, ks, map_at, subset_ks, ties, chunk_size, topk, index)
    out = _Collector(q_total=data.n_queries, k=min(topk, data.n_database))

    from recon_score.progress import Progress

    bar = Progress(data.n_queries, unit="query", desc=method.name, disable=not progress, leave=False)
    pairs = _AllPairs(
        pos=_Pairs.of(data.positives, data.n_queries, data.n_database),
        exc=_Pairs.of(data.exclude, data.n_queries, data.n_database),
        sub=_Pairs.of(data.subset if subset_ks else None, data.n_queries, data.n_database),
        d_map=np.full(data.n_database, -1, dtype=np.int64),
    )
    for group, qi, di in data.db_groups():
        if len(qi) == 0:
            continue
        if len(di) == 0:
            raise InputError(f"database group {group!r} has queries but no database items")
        _evaluate_group(method, data, resources, qi, di, pairs.local(qi, di), opts, out, bar)
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
    qi: np.ndarray,
    di: np.ndarray,
    pairs: tuple[_Pairs, _Pairs, _Pairs],
    opts: _Options,
    out: _Collector,
    bar,
) -> None:
    """Prepare `method` on one database group and score its queries chunk by chunk."""
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
        out.details = out.details if out.details is not None else [""] * data.n_queries
        for j, text in zip(qi.tolist(), prepared.details):
            out.details[j] = text
    k = out.k
    approximate = bool(k) and opts.index != "exact"
    if approximate and prepared.query_vectors is None:
        approximate = False
        out.note(f"{method.name} is not linear (no composed query vector): top-{k} from exact scores")
    if approximate:
        database = prepared.database if prepared.database is not None else ctx.database
        ids, sc = _index_topk(prepared.query_vectors, database, pairs[1], k, opts.index)
        _store_topk(out.top_ids, out.top_scores, qi, di, ids, sc)
    _score_chunks(
        method.name, prepared, qi, di, pairs, opts, out, bar, exact_topk=bool(k) and not approximate
    )


def _score_chunks(name, prepared, qi, di, pairs, opts: _Options, out: _Collector, bar, *, exact_topk: bool):
    """Score the group's queries in chunks of about CHUNK_ENTRIES scores and store their metrics. Every (B, N)
    array is allocated once per group and reused chunk after chunk: the scores, the sorted rows and, with
    subsets, the subset's scores and mask (peak memory flat in the number of queries)."""
    pos, exc, sub = pairs
    n = len(di)
    step = opts.chunk_size or max(1, min(4096, CHUNK_ENTRIES // max(n, 1)))
    buffers = Buffers()
    for start in range(0, len(qi), step):
        stop = min(start + step, len(qi))
        scores = _chunk_scores(name, prepared, start, stop, buffers.get("scores", (stop - start, n)))
        work = buffers.get("sorted", (stop - start, n))  # the sorted rows of every chunk
        rows, items = pos.block(start, stop)
        if len(exc):  # excluded pairs score -inf and are never positives
            e_rows, e_items = exc.block(start, stop)
            scores[e_rows, e_items] = -np.inf
            keep = ~np.isin(rows * n + items, e_rows * n + e_items)
            rows, items = rows[keep], items[keep]
        metrics = positive_metrics(  # never NaN: _chunk_scores refused it
            scores, rows, items, ap=opts.ap, ks=opts.ks, map_at=opts.map_at, ties=opts.ties, work=work
        )
        if len(sub):
            metrics.update(_subset_metrics(scores, rows, items, sub.block(start, stop), opts, work, buffers))
        block = qi[start:stop]
        if exact_topk:
            ids, top = top_k(scores, out.k)
            _store_topk(out.top_ids, out.top_scores, block, di, ids, top)
        out.store(block, metrics)
        bar.update(stop - start)


def _subset_metrics(scores, rows, items, subset, opts: _Options, work, buffers) -> dict[str, np.ndarray]:
    """subset_hit@K: the chunk's scores ranked within each query's subset (-inf outside it)."""
    member = buffers.like("member", scores, bool)
    member[...] = False
    member[subset] = True
    inside = member[rows, items]
    within = buffers.like("subset", scores)
    within[...] = -np.inf
    np.copyto(within, scores, where=member)
    in_subset = positive_metrics(
        within, rows[inside], items[inside], ap=opts.ap, ks=opts.subset_ks, ties=opts.ties, work=work
    )
    return {f"subset_{m}": in_subset[m] for m in (f"hit@{c}" for c in opts.subset_ks)}


def _chunk_scores(name: str, prepared, start: int, stop: int, out: np.ndarray) -> np.ndarray:
    """The chunk's (B, N) float32 scores, written by the method into `out`."""
    if prepared.width != out.shape[1]:
        raise RuntimeError(f"{name} scores {prepared.width} database items, expected {out.shape[1]}")
    prepared.score(np.arange(start, stop), out)
    if out.size and np.isnan(out.max()):  # max propagates NaN: one pass, no (B, N) mask
        # the method's failure, recorded as such: the run goes on with the other methods
        raise ReconScoreError(f"{name} produced NaN scores (queries {start}..{stop - 1} of a group)")
    return out


def _store_topk(ids_out, scores_out, rows, di: np.ndarray, local: np.ndarray, scores: np.ndarray) -> None:
    """Write local top-k (B, <=k) into the global arrays; -inf (excluded) and -1 (FAISS padding) become pads."""
    valid = (local >= 0) & np.isfinite(scores)
    glob = np.where(valid, di[np.maximum(local, 0)], -1)
    width = local.shape[1]
    ids_out[rows, :width] = glob
    scores_out[rows, :width] = np.where(valid, scores, np.nan)


def _index_topk(queries, database, exc: _Pairs, k: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(B, k) local ids and scores from a FAISS index, asking for enough extra items to drop excluded pairs."""
    from retrieval.index import FaissIndex

    extra = int(np.diff(exc.ptr).max()) if len(exc) else 0
    want = min(k + extra, database.shape[0])
    scores, ids = (as_numpy(t) for t in FaissIndex(as_torch(database), kind).search(as_torch(queries), want))
    if extra:
        banned = np.zeros(ids.shape, dtype=bool)
        for q in range(ids.shape[0]):
            banned[q] = np.isin(ids[q], exc.items[exc.ptr[q] : exc.ptr[q + 1]])
        order = np.argsort(banned, axis=1, kind="stable")  # kept items first, in rank order
        ids = np.take_along_axis(np.where(banned, -1, ids), order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
    return ids[:, :k], scores[:, :k]
