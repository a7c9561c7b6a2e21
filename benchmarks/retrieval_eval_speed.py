"""Composed-retrieval evaluation speed on a PatternCom-sized synthetic bundle, and FAISS top-k recall vs exact.

The bundle mimics PatternCom's shape (seed 000 A.1): 38 classes x 800 = 30,400 database items, 20,000 composed
queries over 6 attribute types, D = 768, L2-normalised; each query's positives are the items of its class with
the target attribute value (about 270 per query, 5.4M pairs). Features are random but structured (class
centroid + attribute direction + noise), so rankings are neither trivial nor random.

For every method, prints:
  vectorised   seconds for the full mAP evaluation (retrieval.evaluate: chunked scores, one sort per query row,
               metrics from cumulative hit counts) over all queries
  loop         a straightforward per-query loop over a sorted ranking (score the query, argsort, walk the ranking
               in Python accumulating precision at each relevant rank, as rscir's evaluate.py does), timed on
               --loop-queries queries and extrapolated linearly to all of them
  speed-up     loop / vectorised
  |dAP| same   the largest AP difference between the loop and our vectorised metrics on the same score rows
               (must be < 1e-6); |dAP| batch: against the full evaluation's APs, whose batched matrix products may
               round differently from one-query products (a few near-equal items swap)
Then, for the linear method `sum` (query vector = image + text embedding), the recall@K of FAISS indexes
against exact top-K search, with build and search times.

Prints figures, asserts nothing; the machine may be shared, so read ratios rather than seconds.

Usage: .venv/bin/python benchmarks/retrieval_eval_speed.py [--queries 20000] [--database 30400] [--dim 768]
       [--loop-queries 1000] [--methods text,image,sum,product,weicom,basic] [--faiss-queries 2000] [--k 10,100]
"""

from __future__ import annotations

import argparse
import time


def make_bundle(n_queries: int, n_database: int, dim: int, seed: int):
    import numpy as np
    import torch
    import torch.nn.functional as F

    from retrieval.data import EvalData
    from retrieval.methods.base import Resources

    g = torch.Generator().manual_seed(seed)
    n_classes, n_values, attributes = 38, 3, ("color", "context", "density", "existence", "quantity", "shape")
    per_class = n_database // n_classes
    cls = torch.arange(n_classes).repeat_interleave(per_class)
    n_database = len(cls)
    val = torch.randint(0, n_values, (n_database,), generator=g)
    attr_of_class = torch.arange(n_classes) % len(attributes)
    centroids = F.normalize(torch.randn(n_classes, dim, generator=g), dim=-1)
    # a value direction per (attribute type, value), shared by the classes of that type: the text says which
    # value, only the image says which class
    value_dirs = F.normalize(torch.randn(len(attributes), n_values, dim, generator=g), dim=-1)
    gap = F.normalize(torch.randn(dim, generator=g), dim=0)  # a modality gap: texts live off the image cone
    noise = lambda n, s: s * F.normalize(torch.randn(n, dim, generator=g), dim=-1)  # noqa: E731
    db = F.normalize(
        centroids[cls] + 0.5 * value_dirs[attr_of_class[cls], val] + noise(n_database, 3.0), dim=-1
    )

    ref = torch.randint(0, n_database, (n_queries,), generator=g)
    shift = torch.randint(1, n_values, (n_queries,), generator=g)
    target = (val[ref] + shift) % n_values
    q_img = db[ref]
    q_txt = F.normalize(
        value_dirs[attr_of_class[cls[ref]], target] + 0.8 * gap + noise(n_queries, 2.5), dim=-1
    )

    # positives: items of the query's class with the target value (CSR by query)
    members = {}
    for c, v in zip(cls.tolist(), val.tolist()):
        members.setdefault((c, v), [])
    for i, (c, v) in enumerate(zip(cls.tolist(), val.tolist())):
        members[(c, v)].append(i)
    members = {k: torch.tensor(v) for k, v in members.items()}
    rows, cols = [], []
    for q, (c, v) in enumerate(zip(cls[ref].tolist(), target.tolist())):
        m = members[(c, v)]
        rows.append(torch.full((len(m),), q))
        cols.append(m)
    positives = torch.stack([torch.cat(rows), torch.cat(cols)], dim=1)
    group_of_class = [attributes[a] for a in attr_of_class.tolist()]
    data = EvalData(
        query_image=q_img,
        query_text=q_txt,
        database=db,
        positives=positives,
        query_group=[group_of_class[c] for c in cls[ref].tolist()],
    )
    corpus_pos = F.normalize(
        torch.randn(1000, dim, generator=g) + centroids[torch.randint(0, n_classes, (1000,), generator=g)],
        dim=-1,
    )
    corpus_neg = F.normalize(torch.randn(500, dim, generator=g) + gap, dim=-1)
    resources = Resources(corpus_pos=corpus_pos, corpus_neg=corpus_neg)
    return data, resources, np.asarray


def loop_ap(prepared, queries, pos_ptr, pos_sorted):
    """The straightforward evaluation: per query, score, argsort, Python walk over the whole ranking.

    Returns (seconds, APs, the score rows it ranked)."""
    import torch

    t0 = time.perf_counter()
    aps, rows = [], []
    for q in queries:
        scores = prepared.score(torch.tensor([q]))[0]
        ranking = torch.argsort(scores, descending=True, stable=True).tolist()
        relevant = set(pos_sorted[pos_ptr[q] : pos_ptr[q + 1]].tolist())
        precisions, hits = [], 0
        for k, item in enumerate(ranking, start=1):
            if item in relevant:
                hits += 1
                precisions.append(hits / k)
        aps.append(sum(precisions) / len(precisions) if precisions else 0.0)
        rows.append(scores)
    return time.perf_counter() - t0, aps, torch.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--database", type=int, default=30400)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--loop-queries", type=int, default=1000, help="queries timed in the per-query loop")
    ap.add_argument("--methods", default="text,image,sum,product,weicom,basic")
    ap.add_argument("--faiss-queries", type=int, default=2000)
    ap.add_argument("--k", default="10,100", help="cut-offs for FAISS recall@K")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import numpy as np
    import torch

    from retrieval.evaluate import evaluate
    from retrieval.index import FaissIndex, exact_topk, topk_recall
    from retrieval.methods import build_method
    from retrieval.methods.base import MethodContext
    from retrieval.metrics import query_metrics

    t0 = time.perf_counter()
    data, resources, _ = make_bundle(args.queries, args.database, args.dim, args.seed)
    data.validate()
    print(
        f"bundle: {data.n_queries} queries, {data.n_database} database items, D={data.query_image.shape[1]}, "
        f"{len(data.positives)} positive pairs ({len(data.positives) / data.n_queries:.0f}/query); "
        f"built in {time.perf_counter() - t0:.1f} s; torch threads {torch.get_num_threads()}"
    )
    order = torch.argsort(data.positives[:, 0], stable=True)
    pos_sorted = data.positives[order, 1]
    pos_ptr = torch.searchsorted(
        data.positives[order, 0].contiguous(), torch.arange(data.n_queries + 1)
    ).tolist()
    loop_queries = (
        np.linspace(0, data.n_queries - 1, min(args.loop_queries, data.n_queries))
        .round()
        .astype(int)
        .tolist()
    )

    print()
    print(
        f"{'method':<9} {'vectorised s':>12} {'loop s (extrap.)':>17} {'speed-up':>9} {'|dAP| same':>10} "
        f"{'|dAP| batch':>11} {'mAP':>7} {'macro':>7}"
    )
    for name in args.methods.split(","):
        overrides = {"contextualize": "false"} if name == "basic" else {}
        method = build_method(name, overrides)
        res = evaluate(method, data, resources=resources)
        summary = res.summary(data)
        ctx = MethodContext(
            data.query_image, data.query_text, data.database, torch.arange(data.n_queries), resources
        )
        prepared = method.prepare(ctx)
        loop_s, loop_aps, loop_scores = loop_ap(prepared, loop_queries, pos_ptr, pos_sorted)
        extrapolated = loop_s * data.n_queries / len(loop_queries)
        relevant = torch.zeros(loop_scores.shape, dtype=torch.bool)
        for i, q in enumerate(loop_queries):
            relevant[i, pos_sorted[pos_ptr[q] : pos_ptr[q + 1]]] = True
        same = query_metrics(loop_scores, relevant)["ap"].numpy()
        diff_same = float(np.max(np.abs(np.asarray(loop_aps) - same)))
        diff_batched = float(np.max(np.abs(np.asarray(loop_aps) - res.per_query["ap"][loop_queries])))
        print(
            f"{name:<9} {res.seconds:>12.1f} {extrapolated:>17.1f} {extrapolated / res.seconds:>8.1f}x "
            f"{diff_same:>10.1e} {diff_batched:>11.1e} {summary.overall:>7.4f} {summary.macro:>7.4f}"
        )
    print(
        f"(loop timed on {len(loop_queries)} evenly spaced queries, extrapolated "
        f"x{data.n_queries / len(loop_queries):.0f}; |dAP| same: our metrics on the loop's own score rows; "
        "|dAP| batch: against the full evaluation, whose batched matrix products may round differently from "
        "one-query products and so swap near-equal items)"
    )

    ks = [int(k) for k in args.k.split(",")]
    kmax = max(ks)
    fq = torch.linspace(0, data.n_queries - 1, min(args.faiss_queries, data.n_queries)).round().long()
    queries = (data.query_image + data.query_text)[fq]  # `sum` is linear: one composed vector per query
    t = time.perf_counter()
    _, exact = exact_topk(queries, data.database, kmax)
    exact_s = time.perf_counter() - t
    print()
    print(
        f"FAISS vs exact top-K for `sum` ({len(fq)} queries, exact search {1000 * exact_s / len(fq):.2f} ms/query)"
    )
    print(
        f"{'index':<11} {'build s':>8} {'ms/query':>9} " + " ".join(f"{'recall@' + str(k):>10}" for k in ks)
    )
    for kind, params in (
        ("faiss-flat", {}),
        ("faiss-ivf", {"nprobe": 16}),
        ("faiss-hnsw", {"m": 32, "ef_search": 128}),
    ):
        t = time.perf_counter()
        index = FaissIndex(data.database, kind, **params)
        build = time.perf_counter() - t
        t = time.perf_counter()
        _, approx = index.search(queries, kmax)
        per_q = 1000 * (time.perf_counter() - t) / len(fq)
        recalls = " ".join(f"{topk_recall(approx[:, :k], exact[:, :k]):>10.4f}" for k in ks)
        extra = f"  (nlist {index.params['nlist']}, nprobe 16)" if kind == "faiss-ivf" else ""
        print(f"{kind:<11} {build:>8.1f} {per_q:>9.2f} {recalls}{extra}")


if __name__ == "__main__":
    main()
