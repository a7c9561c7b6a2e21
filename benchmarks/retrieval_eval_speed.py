"""Composed-retrieval evaluation speed and memory: the whole `reconscore retrieve-eval` CLI against its limit
(start-up + load + one matrix product), a naive numpy argsort loop and rscir's own per-query evaluation, on a generated
PatternCom-sized bundle; writes its figures into docs/performance.md.

The bundle mimics PatternCom's shape (the RS-CIR benchmark paper, A.1): 38 classes x 800 = 30,400 database
items, 6 attribute types, D = 256, L2-normalised; --queries composed queries (default 3,000); each query's
positives are the items of its class with the target attribute value (about 270 per query). Features are random
but structured (class centroid + attribute direction + noise), so rankings are neither trivial nor random.

Every figure comes from its own subprocess, so each has its own peak resident memory (the kernel's ru_maxrss
of that child, read with os.wait4) and its own start-up:
  cli      `python -m eval retrieve-eval --bundle B --method sum --json`, the whole command, wall clock
  limit    python + import numpy + np.load of the bundle + the `sum` score matrix (query image + text) x
           database in numpy, in the evaluator's chunks: what any evaluation must pay (the CLI loads no
           torch on a bundle)
  naive    python + import numpy + np.load + per query: its score row (numpy matrix-vector product), a stable
           np.argsort of the row, AP, R@K, P@K from the relevance read in ranking order
  rscir    rscir's evaluate.py (billpsomas/rscir at 1560858, `calculate_rankings` + `metrics_calc`) operation
           for operation, per (query, prompt): the ranking as a CPU tensor (`torch.argsort(...).detach().cpu()`),
           iterated element by element: basename of each ranked path, look-up in `filename_to_index_map`, which
           holds only the rows of the query's attribute file (the images of that attribute's classes; other
           items map to -1 and are not relevant), value and class compare through apply_class_mapping, then AP,
           P@K, R@K rounded to 2 decimals. rscir ranks on CUDA (its features are moved `.to('cuda')`): with a
           GPU here the ranking runs there and is timed; without one, the ranking is computed beforehand and
           NOT timed, so rscir's per-query cost is a lower bound (the ratio is conservative). Timed on
           --rscir-queries queries; its tqdm bars and cached text encoding are left out.
A second CLI run on a bundle with a third of the queries checks that peak memory is flat in the queries.

Goals (same bundle): the CLI >= 5x faster than the naive loop and within 3x of the limit; >= 50x rscir's
per-query cost (shown two ways: the whole CLI's seconds / queries, and its marginal cost per query from the two
CLI runs, which is what rscir's in-loop figure is); peak RSS <= 900 MB and flat in the number of queries. The
machine may be shared: all figures come from one run, read the ratios; the load average is written with them.

Usage: python benchmarks/retrieval_eval_speed.py [--queries 3000] [--rscir-queries 100] [--naive-queries 0 (all)]
       [--no-write] [--faiss-queries 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- retrieval_eval_speed: begin -->", "<!-- retrieval_eval_speed: end -->"
ATTRIBUTES = ("color", "context", "density", "existence", "quantity", "shape")
N_CLASSES, N_VALUES = 38, 3
CHUNK_ENTRIES = 1 << 23  # the evaluator's chunk (retrieval.evaluate.CHUNK_ENTRIES)
AT = (5, 10, 15, 20)  # rscir's cut-offs


def make_bundle(n_queries: int, n_database: int, dim: int, seed: int):
    """(EvalData, Resources, labels): labels hold each item's class and value and each query's reference
    item, target value and attribute type, for the loops that read labels rather than positives."""
    import torch
    import torch.nn.functional as F

    from retrieval.data import EvalData
    from retrieval.methods.base import Resources

    g = torch.Generator().manual_seed(seed)
    cls = torch.arange(N_CLASSES).repeat_interleave(n_database // N_CLASSES)
    n_database = len(cls)
    val = torch.randint(0, N_VALUES, (n_database,), generator=g)
    attr_of_class = torch.arange(N_CLASSES) % len(ATTRIBUTES)
    centroids = F.normalize(torch.randn(N_CLASSES, dim, generator=g), dim=-1)
    # a value direction per (attribute type, value): the text says which value, only the image which class
    value_dirs = F.normalize(torch.randn(len(ATTRIBUTES), N_VALUES, dim, generator=g), dim=-1)
    gap = F.normalize(torch.randn(dim, generator=g), dim=0)  # a modality gap: texts live off the image cone
    noise = lambda n, s: s * F.normalize(torch.randn(n, dim, generator=g), dim=-1)  # noqa: E731
    db = F.normalize(
        centroids[cls] + 0.5 * value_dirs[attr_of_class[cls], val] + noise(n_database, 3.0), dim=-1
    )
    ref = torch.randint(0, n_database, (n_queries,), generator=g)
    target = (val[ref] + torch.randint(1, N_VALUES, (n_queries,), generator=g)) % N_VALUES
    q_txt = F.normalize(
        value_dirs[attr_of_class[cls[ref]], target] + 0.8 * gap + noise(n_queries, 2.5), dim=-1
    )
    key = cls * N_VALUES + val  # positives: the items of the query's class with the target value
    order = torch.argsort(key, stable=True)
    bounds = torch.searchsorted(key[order], torch.arange(N_CLASSES * N_VALUES + 1))
    want = cls[ref] * N_VALUES + target
    counts = bounds[want + 1] - bounds[want]
    rows = torch.arange(n_queries).repeat_interleave(counts)
    offsets = torch.arange(int(counts.sum())) - (counts.cumsum(0) - counts).repeat_interleave(counts)
    cols = order[bounds[want].repeat_interleave(counts) + offsets]
    names = [ATTRIBUTES[a] for a in attr_of_class.tolist()]
    data = EvalData(
        query_image=db[ref],
        query_text=q_txt,
        database=db,
        positives=torch.stack([rows, cols], dim=1),
        query_group=[names[c] for c in cls[ref].tolist()],
    )
    labels = {"cls": cls, "val": val, "ref": ref, "target": target, "attr_of_class": attr_of_class}
    return data, Resources(), {k: v.numpy() for k, v in labels.items()}


def worker_bundle(path: str, n_queries: int, seed: int = 0) -> dict:
    """The bundle for the CLI and the labels (an .npz beside it) for the loops. A worker too: the parent must
    stay small, because a child's peak RSS (ru_maxrss) counts the parent's pages it was forked with."""
    import numpy as np

    from retrieval.bundle import save_bundle

    data, resources, labels = make_bundle(n_queries, 30400, 256, seed)
    save_bundle(path, data, resources)
    np.savez(Path(path).with_suffix(".labels.npz"), **labels)
    return {"positives": len(data.positives)}


def _load(bundle: str):
    import numpy as np

    with np.load(bundle) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays


def worker_limit(bundle: str, _n: int) -> dict:
    """import numpy + load + the `sum` score matrix in the evaluator's chunks."""
    t0 = time.perf_counter()
    import numpy  # noqa: F401  (timed: the CLI's one heavy import)

    arrays = _load(bundle)
    t1 = time.perf_counter()
    q = arrays["query_image"] + arrays["query_text"]
    db = arrays["database"]
    step = max(1, min(4096, CHUNK_ENTRIES // db.shape[0]))
    for start in range(0, len(q), step):
        q[start : start + step] @ db.T
    return {"import_load_s": t1 - t0, "matmul_s": time.perf_counter() - t1}


def worker_naive(bundle: str, n: int) -> dict:
    """Per query: numpy score row, stable argsort, metrics from the relevance in ranking order."""
    t0 = time.perf_counter()
    import numpy as np

    arrays = _load(bundle)
    q = arrays["query_image"] + arrays["query_text"]
    db = arrays["database"]
    pos = arrays["positives"][np.argsort(arrays["positives"][:, 0], kind="stable")]
    ptr = np.searchsorted(pos[:, 0], np.arange(len(q) + 1))
    queries = range(len(q)) if not n else np.linspace(0, len(q) - 1, min(n, len(q))).round().astype(int)
    t1 = time.perf_counter()
    aps = []
    for i in queries:
        order = np.argsort(-(db @ q[i]), kind="stable")
        relevant = np.zeros(len(db), dtype=bool)
        relevant[pos[ptr[i] : ptr[i + 1], 1]] = True
        ranks = np.flatnonzero(relevant[order])
        if not len(ranks):
            aps.append(0.0)
            continue
        aps.append(float(np.mean(np.arange(1, len(ranks) + 1) / (ranks + 1))))
        _ = [(np.count_nonzero(ranks < k) / k, np.count_nonzero(ranks < k) / len(ranks)) for k in (1, 5, 10)]
    loop = time.perf_counter() - t1
    return {"load_s": t1 - t0, "loop_s": loop, "queries": len(aps), "of": len(q), "map": float(np.mean(aps))}


def _apply_class_mapping(label: str, mapping: dict) -> str:  # rscir utils.apply_class_mapping
    return mapping.get(label, label)


def _rscir_metrics(
    rankings, prompt, paths, filename_to_index_map, attribute_values, query_class, query_labels
):
    """rscir evaluate.py metrics_calc, operation for operation (class_mapping: rscir merges a few classes;
    an empty mapping costs the same calls)."""
    class_mapping: dict = {}
    retrieved_filenames = [os.path.basename(paths[idx]) for idx in rankings]
    retrieved_indices = [filename_to_index_map.get(filename, -1) for filename in retrieved_filenames]
    query_class_mapped = _apply_class_mapping(query_class, class_mapping)
    is_relevant = [
        attribute_values[idx] == prompt
        and _apply_class_mapping(query_labels[idx], class_mapping) == query_class_mapped
        if idx != -1
        else False
        for idx in retrieved_indices
    ]
    precisions, relevant_count = [], 0
    for k, rel in enumerate(is_relevant, start=1):
        if rel:
            relevant_count += 1
            precisions.append(relevant_count / k)
    ap = sum(precisions) / len(precisions) if precisions else 0
    metrics = {"AP": round(ap * 100, 2)}
    total_relevant = sum(is_relevant)
    for k in AT:
        relevant_at_k = sum(is_relevant[:k])
        metrics[f"P@{k}"] = round(relevant_at_k / k * 100, 2)
        metrics[f"R@{k}"] = round((relevant_at_k / total_relevant if total_relevant else 0) * 100, 2)
    return metrics


def worker_rscir(bundle: str, n: int) -> dict:
    """rscir's per-(query, prompt) evaluation; the ranking on CUDA and timed when there is a GPU, else
    computed beforehand and not timed (a lower bound on rscir's cost)."""
    import numpy as np
    import torch

    arrays, lab = _load(bundle), _load(str(Path(bundle).with_suffix(".labels.npz")))
    cls, val, ref, target, attr = (lab[k] for k in ("cls", "val", "ref", "target", "attr_of_class"))
    names = [f"class{c:02d}" for c in range(N_CLASSES)]
    paths = [f"/data/PatternNet/images/{names[c]}/{names[c]}{i:05d}.jpg" for i, c in enumerate(cls.tolist())]
    files = {}  # per attribute type: rscir's read_csv of <attribute>.csv -> filenames, values, labels
    for a, attribute in enumerate(ATTRIBUTES):
        rows = np.flatnonzero(attr[cls] == a)
        files[a] = (
            {os.path.basename(paths[i]): j for j, i in enumerate(rows)},  # filename_to_index_map
            [f"{attribute}-value{val[i]}" for i in rows],
            [names[cls[i]] for i in rows],
        )
    queries = np.linspace(0, len(ref) - 1, min(n, len(ref))).round().astype(int)
    device = "cuda" if torch.cuda.is_available() else None
    db = torch.from_numpy(arrays["database"]).to(device or "cpu")
    qi, qt = (torch.from_numpy(arrays[k]).to(device or "cpu") for k in ("query_image", "query_text"))

    def rank(i: int):  # calculate_rankings, "Add Similarities"
        return torch.argsort(qi[i] @ db.t() + qt[i] @ db.t(), descending=True).detach().cpu()

    ready = {} if device else {int(i): rank(int(i)) for i in queries}  # no GPU: ranking not timed
    t0 = time.perf_counter()
    aps = []
    for i in queries.tolist():
        rankings = rank(i) if device else ready[i]
        a = int(attr[cls[ref[i]]])
        index_map, values, labels = files[a]
        prompt = f"{ATTRIBUTES[a]}-value{target[i]}"
        aps.append(
            _rscir_metrics(rankings, prompt, paths, index_map, values, names[cls[ref[i]]], labels)["AP"]
        )
    seconds = time.perf_counter() - t0
    return {
        "loop_s": seconds,
        "queries": len(queries),
        "of": len(ref),
        "ranking": device or "untimed (no GPU)",
    }


def worker_faiss(bundle: str, n: int) -> dict:
    """Recall@10 and @100 of FAISS indexes against exact top-K for `sum`'s composed query vectors."""
    import torch

    from retrieval.index import FaissIndex, exact_topk, topk_recall

    arrays = _load(bundle)
    q = torch.from_numpy(arrays["query_image"] + arrays["query_text"])
    q = q[torch.linspace(0, len(q) - 1, min(n, len(q))).round().long()]
    db = torch.from_numpy(arrays["database"])
    _, exact = exact_topk(q, db, 100)
    out = {}
    for kind, params in (("faiss-ivf", {"nprobe": 16}), ("faiss-hnsw", {"m": 32, "ef_search": 128})):
        t = time.perf_counter()
        index = FaissIndex(db, kind, **params)
        build = time.perf_counter() - t
        _, approx = index.search(q, 100)
        out[kind] = {
            "build_s": build,
            **{f"recall@{k}": topk_recall(approx[:, :k], exact[:, :k]) for k in (10, 100)},
        }
    return {"queries": len(q), "indexes": out}


WORKERS = {
    "bundle": worker_bundle,
    "limit": worker_limit,
    "naive": worker_naive,
    "rscir": worker_rscir,
    "faiss": worker_faiss,
}


def measure(kind: str, bundle: Path, n: int = 0) -> dict:
    """Run one measurement in a fresh process: wall clock from the parent, peak RSS from os.wait4."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    if kind == "cli":
        cmd = [
            sys.executable,
            "-m",
            "eval",
            "retrieve-eval",
            "--bundle",
            str(bundle),
            "--method",
            "sum",
            "--json",
        ]
    else:
        cmd = [sys.executable, __file__, "--worker", kind, "--bundle", str(bundle), "--n", str(n)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the running maximum
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(f"{kind} failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result.update(wall_s=wall, peak_mb=usage.ru_maxrss / 1024)  # Linux: kilobytes
    return result


def run_all(args) -> dict:
    """Every measurement of one run, in a temporary folder removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="retrieval_eval_speed_"))
    try:
        return _measure_all(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure_all(args, tmp: Path) -> dict:
    """CLI and limit interleaved --rounds times (the fastest round is used), then the loops."""
    t = time.perf_counter()
    big, small = tmp / "bundle.npz", tmp / "bundle_third.npz"
    measure("bundle", big, args.queries)
    measure("bundle", small, max(1, args.queries // 3))
    print(
        f"bundles written in {time.perf_counter() - t:.1f} s ({args.queries} and {args.queries // 3} queries)"
    )
    load = [os.getloadavg()[0]]
    r = {"cli": [], "limit": []}
    for _ in range(args.rounds):
        for kind in ("cli", "limit"):
            r[kind].append(measure(kind, big))
            print(
                f"  {kind}: {r[kind][-1]['wall_s']:.2f} s, peak {r[kind][-1]['peak_mb']:.0f} MB", flush=True
            )
    r["naive"] = measure("naive", big, args.naive_queries)
    print(f"  naive: {r['naive']['wall_s']:.2f} s, peak {r['naive']['peak_mb']:.0f} MB", flush=True)
    r["rscir"] = measure("rscir", big, args.rscir_queries)
    print(f"  rscir: {r['rscir']['loop_s']:.2f} s on {r['rscir']['queries']} queries", flush=True)
    r["cli_third"] = measure("cli", small)
    if args.faiss_queries:  # printed only: recall of approximate top-K, not a speed goal
        for kind, v in measure("faiss", big, args.faiss_queries)["indexes"].items():
            recalls = ", ".join(f"{k} {x:.3f}" for k, x in v.items() if k.startswith("recall"))
            print(
                f"  {kind} vs exact top-K ({args.faiss_queries} queries of `sum`): {recalls}, built in {v['build_s']:.1f} s"
            )
    load.append(os.getloadavg()[0])
    r["load"] = load
    return r


def summarise(r: dict, args) -> tuple[list[str], list[str]]:
    """Table rows and goal lines (markdown), ratios computed from this run only."""
    cli = min(r["cli"], key=lambda x: x["wall_s"])
    limit = min(r["limit"], key=lambda x: x["wall_s"])
    naive, rscir = r["naive"], r["rscir"]
    q = args.queries
    naive_s = naive["load_s"] + naive["loop_s"] * naive["of"] / naive["queries"]
    naive_wall = naive["wall_s"] - naive["loop_s"] + naive["loop_s"] * naive["of"] / naive["queries"]
    rscir_ms = 1000 * rscir["loop_s"] / rscir["queries"]
    cli_ms = 1000 * cli["wall_s"] / q
    third = r["cli_third"]
    # the CLI's cost per additional query (start-up and loading cancel out): rscir's figure is its loop alone
    marginal_ms = 1000 * (cli["wall_s"] - third["wall_s"]) / max(1, q - q // 3)
    rows = [
        "| what | seconds (whole process) | per query (ms) | peak RSS (MB) | note |",
        "|---|---:|---:|---:|---|",
        f"| `retrieve-eval --method sum` (whole CLI) | {cli['wall_s']:.2f} | {cli_ms:.2f} | {cli['peak_mb']:.0f} "
        f"| fastest of {len(r['cli'])}: "
        + ", ".join(f"{x['wall_s']:.2f}" for x in r["cli"])
        + f"; mAP {cli['map_overall']:.4f} |",
        f"| limit: python + numpy + load + score matrix | {limit['wall_s']:.2f} | {1000 * limit['wall_s'] / q:.2f} "
        f"| {limit['peak_mb']:.0f} | import + load {limit['import_load_s']:.2f} s, matrix product "
        f"{limit['matmul_s']:.2f} s |",
        f"| naive numpy argsort loop | {naive_wall:.2f} | {1000 * naive['loop_s'] / naive['queries']:.2f} "
        f"| {naive['peak_mb']:.0f} | {naive['queries']} of {naive['of']} queries timed"
        + ("" if naive["queries"] == naive["of"] else ", extrapolated")
        + f"; mAP {naive['map']:.4f} |",
        f"| rscir's loop (metrics_calc per query) | {rscir_ms * q / 1000:.1f} (extrap.) | {rscir_ms:.1f} "
        f"| {rscir['peak_mb']:.0f} | {rscir['queries']} queries; ranking {rscir['ranking']} |",
        f"| `retrieve-eval`, a third of the queries | {r['cli_third']['wall_s']:.2f} | "
        f"{1000 * r['cli_third']['wall_s'] / max(1, q // 3):.2f} | {r['cli_third']['peak_mb']:.0f} | "
        f"{q // 3} queries: memory flat in the queries |",
    ]
    flat = abs(cli["peak_mb"] - r["cli_third"]["peak_mb"])
    goals = [
        ("whole CLI >= 5x faster than the naive loop", naive_wall / cli["wall_s"], 5, ">="),
        (
            "whole CLI within 3x of the limit (load + matrix product)",
            cli["wall_s"] / limit["wall_s"],
            3,
            "<=",
        ),
        ("per query >= 50x cheaper than rscir's loop (whole CLI / queries)", rscir_ms / cli_ms, 50, ">="),
        (
            f"per query >= 50x cheaper than rscir's loop (CLI's marginal cost, {marginal_ms:.2f} ms/query: "
            f"{q:,} vs {q // 3:,} queries)",
            rscir_ms / marginal_ms if marginal_ms > 0 else float("nan"),
            50,
            ">=",
        ),
        ("peak RSS <= 900 MB", cli["peak_mb"], 900, "<="),
        ("peak RSS flat in the queries (MB apart, 3x the queries)", flat, 50, "<="),
    ]
    lines = []
    for what, value, bound, op in goals:
        met = value >= bound if op == ">=" else value <= bound
        lines.append(f"- {what}: **{value:.2f}** ({'met' if met else 'NOT met'}; goal {op} {bound})")
    lines.append(f"- naive loop in-process (load + loop, no interpreter start): {naive_s:.2f} s")
    return rows, lines


def write_doc(rows: list[str], goals: list[str], r: dict, args) -> None:
    """Replace the block between the markers in docs/performance.md with this run's figures."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cmd = "python benchmarks/retrieval_eval_speed.py" + "".join(
        f" --{k.replace('_', '-')} {v}"
        for k, v in (
            ("queries", args.queries),
            ("rscir_queries", args.rscir_queries),
            ("rounds", args.rounds),
        )
    )
    block = [
        BEGIN,
        f"Written by `{cmd}` on {stamp}, {os.cpu_count()} CPU cores, load average "
        f"{r['load'][0]:.1f} at the start and {r['load'][1]:.1f} at the end (a shared machine: read the ratios).",
        f"Bundle: {args.queries:,} queries x 30,400 items, D = 256, about 270 positives per query.",
        "",
        *rows,
        "",
        *goals,
        END,
    ]
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block to write into")
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + "\n".join(block) + rest.split(END, 1)[1])
    print(f"figures written to {DOC.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=3000, help="composed queries in the bundle (3,000)")
    ap.add_argument("--rscir-queries", type=int, default=100, help="queries timed in rscir's loop")
    ap.add_argument("--naive-queries", type=int, default=0, help="queries timed in the naive loop (0: all)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds of the CLI and the limit (the fastest is used)",
    )
    ap.add_argument(
        "--faiss-queries", type=int, default=0, help="also FAISS IVF/HNSW recall@K vs exact (0: no)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/performance.md alone")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(WORKERS[args.worker](args.bundle, args.n)))
        return
    r = run_all(args)
    rows, goals = summarise(r, args)
    print("\n".join(["", *rows, "", *goals]))
    print(f"(load average {r['load'][0]:.1f} at the start, {r['load'][1]:.1f} at the end)")
    if not args.no_write:
        write_doc(rows, goals, r, args)


if __name__ == "__main__":
    main()
