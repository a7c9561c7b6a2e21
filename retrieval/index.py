"""Top-k search for linear methods (score = q·x): exact dense search in chunks, or a FAISS index (an optional
extra, imported only here) for archives whose similarity matrix does not fit in memory, and `topk_recall` to
measure an index against exact search. See docs/retrieval.md, "Archive scale: FAISS"."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from recon_score.errors import ReconScoreError
from retrieval.choices import INDEX_KINDS, check_choice


def import_faiss():
    try:
        import faiss
    except ImportError as err:
        raise ReconScoreError(
            "FAISS indexes need the faiss package: pip install faiss-cpu (or faiss-gpu), or "
            "pip install 'reconscore[faiss]'; exact search (--index exact) needs nothing extra"
        ) from err
    return faiss


def exact_topk(
    queries: Tensor, database: Tensor, k: int, *, chunk_entries: int = 1 << 23
) -> tuple[Tensor, Tensor]:
    """(Q, k) best scores and database indices by exact dot product, ties broken by database index."""
    k = min(k, database.shape[0])
    step = max(1, chunk_entries // max(database.shape[0], 1))
    values, indices = [], []
    for start in range(0, queries.shape[0], step):
        scores = queries[start : start + step] @ database.T
        order = torch.sort(scores, dim=1, descending=True, stable=True)
        values.append(order.values[:, :k])
        indices.append(order.indices[:, :k])
    if not values:
        return torch.zeros(0, k), torch.zeros(0, k, dtype=torch.long)
    return torch.cat(values), torch.cat(indices)


class FaissIndex:
    """An inner-product FAISS index over `database` (N, D) float32.

    kinds: ``faiss-flat`` (exact, IndexFlatIP), ``faiss-ivf`` (IndexIVFFlat; nlist ≈ 4·sqrt(N) lists by
    default, `nprobe` probed), ``faiss-hnsw`` (IndexHNSWFlat with `m` links, `ef_search`).
    """

    def __init__(
        self,
        database: Tensor,
        kind: str = "faiss-hnsw",
        *,
        nlist: int | None = None,
        nprobe: int = 16,
        m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
        seed: int = 0,
    ):
        check_choice("FAISS index kind", kind, INDEX_KINDS[1:])
        faiss = import_faiss()
        x = np.ascontiguousarray(database.float().numpy())
        n, d = x.shape
        if kind == "faiss-flat":
            index = faiss.IndexFlatIP(d)
        elif kind == "faiss-ivf":
            nlist = nlist or max(1, min(n // 39, int(4 * np.sqrt(n))))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            clustering_seed = np.random.default_rng(seed)
            sample = x[clustering_seed.choice(n, size=min(n, nlist * 64), replace=False)]
            index.train(sample)
            index.nprobe = min(nprobe, nlist)
        else:
            index = faiss.IndexHNSWFlat(d, m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
            index.hnsw.efSearch = ef_search
        index.add(x)
        self.index = index

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """(Q, k) scores and database indices (−1 where the index found fewer than k)."""
        scores, idx = self.index.search(np.ascontiguousarray(queries.float().numpy()), k)
        return torch.from_numpy(scores), torch.from_numpy(idx.astype(np.int64))


def topk_recall(approx: Tensor, exact: Tensor) -> float:
    """Mean over queries of |approx top-k ∩ exact top-k| / k (recall@k of the index against exact search)."""
    if approx.shape != exact.shape:
        raise ValueError(f"expected equal shapes, got {tuple(approx.shape)} and {tuple(exact.shape)}")
    if approx.numel() == 0:
        return float("nan")
    hits = (approx.unsqueeze(2) == exact.unsqueeze(1)).any(dim=2).sum(dim=1).double()
    return float((hits / exact.shape[1]).mean())
