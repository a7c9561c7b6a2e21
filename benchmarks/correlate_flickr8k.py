"""Full Flickr8K-Expert and Flickr8K-CrowdFlower protocols (Hessel et al. 2021) with the text metrics, through the
same code path as `reconscore correlate`: prints each correlation table and the wall time. Prints, never asserts.

Expert: 16,992 rows (5,664 pairs x 3 experts, 158 candidates that are their image's references skipped),
headline tau-c. CrowdFlower: 47,830 rows, every rated caption removed from its image's references, headline tau-b.

Usage: ./dev python benchmarks/correlate_flickr8k.py [--data ../shared/data/flickr8k] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

METRICS = "bleu1,bleu4,rouge,meteor,cider"
PROTOCOLS = (
    ("flickr8k-expert", "ExpertAnnotations.txt"),
    ("flickr8k-crowdflower", "CrowdFlowerAnnotations.txt"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
    ap.add_argument("--data", type=Path, default=default, help="folder with the Flickr8k text files")
    ap.add_argument("--metrics", default=METRICS)
    ap.add_argument("--bootstrap", type=int, default=1000, help="CI resamples (0 to skip)")
    args = ap.parse_args()

    from eval.cli.correlate import print_correlations
    from eval.correlate import CorrelateJob, run_correlate

    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reconscore-f8k-") as tmp:
        for fmt, name in PROTOCOLS:
            start = time.perf_counter()
            job = CorrelateJob(
                preferences=args.data / name,
                fmt=fmt,
                metrics=args.metrics,
                out=Path(tmp) / fmt,
                n_boot=args.bootstrap,
            )
            result = run_correlate(job)
            wall = time.perf_counter() - start
            print_correlations(result.correlations, result.run)
            per_metric = ", ".join(
                f"{k} {v['seconds']:.1f}s" for k, v in result.run["metric_reports"].items()
            )
            print(
                f"  wall time {wall:.1f}s (metrics: {per_metric}; the rest is loading, PTB, Kendall, bootstrap)\n"
            )
    print(f"total wall time {time.perf_counter() - total:.1f}s")


if __name__ == "__main__":
    main()
