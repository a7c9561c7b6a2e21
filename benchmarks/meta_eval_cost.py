"""What sharing buys in the meta-evaluation suite: the wall time of one `correlate --benchmarks` run over every
(benchmark, metric) item, against running each item on its own (a fresh run, so nothing is shared: each item
tokenises its texts again, and a second benchmark over the same captions tokenises them again). Also prints how
many texts the PTB tokenizer saw each way. Prints, never asserts.

Usage: ./dev python benchmarks/meta_eval_cost.py [--data-root ../shared/data]
           [--benchmarks flickr8k-expert,flickr8k-cf] [--metrics bleu4,rouge,cider] [--bootstrap 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _timed(job_kw: dict, out: Path) -> tuple[float, int]:
    import eval.metrics.ptb as ptb
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval

    real, seen = ptb.ptb_tokenize, [0]

    def counting(texts):
        seen[0] += len(texts)
        return real(texts)

    ptb.ptb_tokenize = counting
    try:
        start = time.perf_counter()
        run_meta_eval(MetaEvalJob(out=out, **job_kw))
        return time.perf_counter() - start, seen[0]
    finally:
        ptb.ptb_tokenize = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--benchmarks", default="flickr8k-expert,flickr8k-cf")
    ap.add_argument("--metrics", default="bleu4,rouge,cider")
    ap.add_argument("--bootstrap", type=int, default=0, help="CI resamples (0: time the scoring alone)")
    args = ap.parse_args()
    benches, metrics = args.benchmarks.split(","), args.metrics.split(",")
    common = {"data_root": args.data_root, "n_boot": args.bootstrap}
    with tempfile.TemporaryDirectory(prefix="reconscore-meta-cost-") as tmp:
        # warm-up, untimed: imports and the first JVM start are paid once, by neither side
        _timed({"benchmarks": benches[:1], "metrics": metrics[:1], **common}, Path(tmp) / "warm-up")
        suite, suite_texts = _timed(
            {"benchmarks": benches, "metrics": metrics, **common}, Path(tmp) / "suite"
        )
        alone, alone_texts = 0.0, 0
        for b in benches:
            for m in metrics:
                s, n = _timed({"benchmarks": [b], "metrics": [m], **common}, Path(tmp) / f"{b}-{m}")
                print(f"  {b} / {m} on its own: {s:.1f} s, {n} texts tokenised")
                alone, alone_texts = alone + s, alone_texts + n
    print(
        f"suite of {len(benches)} benchmarks x {len(metrics)} metrics in one run: {suite:.1f} s, {suite_texts} texts tokenised"
    )
    print(
        f"each item on its own: {alone:.1f} s in all, {alone_texts} texts tokenised ({alone / suite:.2f}x the suite)"
    )


if __name__ == "__main__":
    main()
