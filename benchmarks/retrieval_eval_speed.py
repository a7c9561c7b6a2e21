"""Composed-retrieval evaluation speed on a PatternCom-sized synthetic bundle, and FAISS top-k recall vs exact.

The bundle mimics PatternCom's shape (the RS-CIR benchmark paper, A.1): 38 classes x 800 = 30,400 database items, 21,566 composed
queries over 6 attribute types, D = 768, L2-normalised (the scale is a flag: --queries/--database/--dim); each query's positives are the items of its class with
the target attribute value (about 270 per query, 5.4M pairs). Features are random but structured (class
centroid + attribute direction + noise), so rankings are neither trivial nor random.

For every method, prints:
  vectorised   seconds for the full mAP evaluation (retrieval.evaluate: chunked scores, one sort per query row,
               metrics from cumulative hit counts) over all queries
  rscir loop   rscir's per-query evaluation (evaluate.py calculate_rankings + metrics_calc, commit 1560858,
               re-written operation for operation): argsort the query's scores into a CPU tensor and iterate
               that tensor (not a list) taking the basename of each ranked item's path, look it up in the
               attribute file's filename -> row dict, compare the row's value string with the prompt and its
               class, merged through apply_class_mapping, with the query's; then AP, P@K, R@K rounded to 2
               decimals. Timed on --rscir-queries queries, extrapolated linearly. Not included: rscir's
               per-query tqdm bar and its text encoding (cached after a prompt's first query), so the
               ratio is still a slight lower bound
  light loop   a lighter per-query loop (argsort, walk the ranking testing membership in a set of positive
               indices), timed on --loop-queries queries and extrapolated
  x rscir, x light   the two loops' time / vectorised
  peak MB      the peak resident memory during each method's vectorised evaluation minus the resident memory
               just before it (the kernel's peak counter is reset first, see PeakMemory)
  |dAP| same   the largest AP difference between the loop and our vectorised metrics on the same score rows
               (must be < 1e-6); |dAP| batch: against the full evaluation's APs, whose batched matrix products may
               round differently from one-query products (a few near-equal items swap)
Then, for the linear method `sum` (query vector = image + text embedding), the recall@K of FAISS indexes
against exact top-K search, with build and search times.

Prints figures, asserts nothing; the machine may be shared, so read ratios rather than seconds.

Usage: .venv/bin/python benchmarks/retrieval_eval_speed.py [--queries 21566] [--database 30400] [--dim 768]
       [--loop-queries 1000] [--rscir-queries 200] [--methods text,image,sum,product,weicom,basic]
       [--faiss-queries 2000] [--k 10,100]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass


def make_bundle(n_queries: int, n_database: int, dim: int, seed: int):
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
    labels = RscirLabels.build(cls, val, ref, target, attr_of_class, attributes)
    return data, resources, labels


@dataclass
class RscirLabels:
    """What rscir's metrics_calc reads per database item: its path, the attribute file's filename -> row map,
    each row's value string and raw class label (merged through a class-mapping dict), per query the prompt
    (target value string) and class string."""

    paths: list[str]
    row_of: dict[str, int]
    row_values: list[str]
    row_labels: list[str]
    prompts: list[str]
    query_classes: list[str]

    @classmethod
    def build(cls_, cls, val, ref, target, attr_of_class, attributes) -> RscirLabels:
        names = [f"class{c:02d}{i:04d}.jpg" for i, c in enumerate(cls.tolist())]
        paths = [f"/data/PatternNet/images/class{c:02d}/{n}" for c, n in zip(cls.tolist(), names)]
        value_name = lambda a, v: f"{attributes[a]}-value{v}"  # noqa: E731
        row_values = [value_name(attr_of_class[c].item(), v) for c, v in zip(cls.tolist(), val.tolist())]
        return cls_(
            paths=paths,
            row_of={n: i for i, n in enumerate(names)},
            row_values=row_values,
            row_labels=[f"class{c:02d}" for c in cls.tolist()],
            prompts=[
                value_name(attr_of_class[cls[r]].item(), t) for r, t in zip(ref.tolist(), target.tolist())
            ],
            query_classes=[f"class{c:02d}" for c in cls[ref].tolist()],
        )


CLASS_MAPPING = {
    "class00": "class00",
    "class01": "class01",
}  # rscir's class merge (utils.py class_mapping, read through its apply_class_mapping function)
AT = (5, 10, 15, 20)


def apply_class_mapping(label: str, mapping: dict) -> str:
    return mapping.get(label, label)


def rscir_loop(prepared, queries, labels: RscirLabels):
    """rscir's per-query cost, operation for operation as its evaluate.py (calculate_rankings + metrics_calc at
    commit 1560858): the ranking stays a CPU tensor (`torch.argsort(...).detach().cpu()`) and is iterated
    element by element (each element a 0-d tensor indexing the path list), then per ranked item a basename, a
    dict look-up, a value compare and two class-mapping calls; AP, then P@K and R@K rounded to 2 decimals."""
    import os

    import torch

    t0 = time.perf_counter()
    aps = []
    for q in queries:
        scores = prepared.score(torch.tensor([q]))[0]
        rankings = torch.argsort(scores, descending=True).detach().cpu()
        prompt, query_class = labels.prompts[q], labels.query_classes[q]
        retrieved_names = [os.path.basename(labels.paths[idx]) for idx in rankings]
        retrieved = [labels.row_of.get(name, -1) for name in retrieved_names]
        query_class_mapped = apply_class_mapping(query_class, CLASS_MAPPING)
        relevant = [
            labels.row_values[idx] == prompt
            and apply_class_mapping(labels.row_labels[idx], CLASS_MAPPING) == query_class_mapped
            if idx != -1
            else False
            for idx in retrieved
        ]
        precisions, hits = [], 0
        for k, rel in enumerate(relevant, start=1):
            if rel:
                hits += 1
                precisions.append(hits / k)
        ap = sum(precisions) / len(precisions) if precisions else 0
        aps.append(round(ap * 100, 2) / 100)
        total = sum(relevant)
        for k in AT:
            at_k = sum(relevant[:k])
            _ = (round(at_k / k * 100, 2), round((at_k / total if total else 0) * 100, 2))
    return time.perf_counter() - t0, aps


class PeakMemory:
    """Peak resident memory of a block above the resident memory at its start (MB).

    Linux keeps a process-lifetime peak (VmHWM); writing "5" to /proc/self/clear_refs resets it to the current
    RSS, so the block's own peak is read, not an earlier one. Where that is not allowed, a thread samples the
    current RSS every 2 ms (a lower bound: a spike between samples is missed); `how` says which."""

    def __init__(self) -> None:
        self.how = "VmHWM reset"
        self.peak_mb = 0.0

    @staticmethod
    def _status_mb(field: str) -> float:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
        raise RuntimeError(f"{field} not in /proc/self/status")

    def __enter__(self) -> PeakMemory:
        import threading

        self.start = self._status_mb("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self._thread = None
        except OSError:
            self.how, self._stop, self._sampled = (
                "RSS sampled every 2 ms (lower bound)",
                threading.Event(),
                self.start,
            )
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._sampled = max(self._sampled, self._status_mb("VmRSS"))

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            top = self._status_mb("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
            top = max(self._sampled, self._status_mb("VmRSS"))
        self.peak_mb = top - self.start


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


def compare_loops(prepared, res, loop_queries, rscir_queries, pos_ptr, pos_sorted, labels):
    """Both loops on the prepared method: (light s, rscir s, |dAP| same rows, |dAP| batch, |dAP| rscir)."""
    import numpy as np
    import torch

    from retrieval.metrics import query_metrics

    loop_s, loop_aps, loop_scores = loop_ap(prepared, loop_queries, pos_ptr, pos_sorted)
    rscir_s, rscir_aps = rscir_loop(prepared, rscir_queries, labels)
    # rscir rounds each AP to 2 decimals of a percent: agreement within 5e-5 (plus near-tie swaps)
    diff_rscir = float(np.max(np.abs(np.asarray(rscir_aps) - res.per_query["ap"][rscir_queries])))
    relevant = torch.zeros(loop_scores.shape, dtype=torch.bool)
    for i, q in enumerate(loop_queries):
        relevant[i, pos_sorted[pos_ptr[q] : pos_ptr[q + 1]]] = True
    same = query_metrics(loop_scores, relevant)["ap"].numpy()
    diff_same = float(np.max(np.abs(np.asarray(loop_aps) - same)))
    diff_batched = float(np.max(np.abs(np.asarray(loop_aps) - res.per_query["ap"][loop_queries])))
    return loop_s, rscir_s, diff_same, diff_batched, diff_rscir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=21566, help="PatternCom: 21,566 composed queries")
    ap.add_argument("--database", type=int, default=30400)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--loop-queries", type=int, default=1000, help="queries timed in the light loop")
    ap.add_argument("--rscir-queries", type=int, default=200, help="queries timed in rscir's loop")
    ap.add_argument("--methods", default="text,image,sum,product,weicom,basic")
    ap.add_argument("--faiss-queries", type=int, default=2000, help="0 skips the FAISS comparison")
    ap.add_argument("--k", default="10,100", help="cut-offs for FAISS recall@K")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import numpy as np
    import torch

    from retrieval.evaluate import evaluate
    from retrieval.methods import build_method
    from retrieval.methods.base import MethodContext

    t0 = time.perf_counter()
    data, resources, labels = make_bundle(args.queries, args.database, args.dim, args.seed)
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
    spaced = lambda n: (  # noqa: E731
        np.linspace(0, data.n_queries - 1, min(n, data.n_queries)).round().astype(int).tolist()
    )
    loop_queries, rscir_queries = spaced(args.loop_queries), spaced(args.rscir_queries)

    print()
    print(
        f"{'method':<9} {'vectorised s':>12} {'rscir s (extr.)':>15} {'light s (extr.)':>15} {'x rscir':>8} "
        f"{'x light':>8} {'peak MB':>8} {'|dAP| same':>10} {'|dAP| batch':>11} {'|dAP| rscir':>11} {'mAP':>7}"
    )
    for name in args.methods.split(","):
        overrides = {"contextualize": "false"} if name == "basic" else {}
        method = build_method(name, overrides)
        with PeakMemory() as memory:
            res = evaluate(method, data, resources=resources)
        peak = memory.peak_mb
        summary = res.summary(data)
        ctx = MethodContext(
            data.query_image, data.query_text, data.database, torch.arange(data.n_queries), resources
        )
        prepared = method.prepare(ctx)
        loop_s, rscir_s, diff_same, diff_batched, diff_rscir = compare_loops(
            prepared, res, loop_queries, rscir_queries, pos_ptr, pos_sorted, labels
        )
        extrapolated = loop_s * data.n_queries / len(loop_queries)
        rscir_extra = rscir_s * data.n_queries / len(rscir_queries)
        print(
            f"{name:<9} {res.seconds:>12.1f} {rscir_extra:>15.1f} {extrapolated:>15.1f} "
            f"{rscir_extra / res.seconds:>7.1f}x {extrapolated / res.seconds:>7.1f}x {peak:>8.0f} "
            f"{diff_same:>10.1e} {diff_batched:>11.1e} {diff_rscir:>11.1e} {summary.overall:>7.4f}"
        )
    print(
        f"(rscir loop timed on {len(rscir_queries)} and light loop on {len(loop_queries)} evenly spaced queries, "
        f"extrapolated to {data.n_queries}; rscir: {1000 * rscir_s / len(rscir_queries):.0f} ms/query on the "
        f"last method; |dAP| same: our metrics on the light loop's own score rows; "
        "|dAP| batch: against the full evaluation, whose batched matrix products may round differently from "
        "one-query products and so swap near-equal items)"
    )
    print(f"(peak MB: {memory.how}, above the resident memory just before each evaluation)")

    if args.faiss_queries:  # --faiss-queries 0: evaluation timings only
        faiss_comparison(data, args)


def faiss_comparison(data, args) -> None:
    """Recall@K of FAISS indexes against exact top-K for `sum`, with build and search times."""
    import torch

    from retrieval.index import FaissIndex, exact_topk, topk_recall

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
