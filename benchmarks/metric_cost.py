"""CPU cost per 1,000 captions of the learned caption metrics, at full size with random weights (no download: the
cost equals the released models'), through the metric registry exactly as `metrics add` runs them.

Each metric scores N distinct (image, caption) pairs (256x256 random images, captions of about 40 words, 5
references each for the Ref- variants); seconds per caption x 1000 is reported, after one warm-up pair. Model
construction is not counted (paid once per run).

    pacscore / refpacscore           CLIP ViT-B/32 (PAC-S weights' shape)      shapes:open-clip/pacs-ViT-B-32
    longclipscore / reflongclipscore  CLIP ViT-B/16, 248 text positions        shapes:open-clip/longclip-B
    cyclereward                      BLIP ViT-L/16 + BERT-base cross-attention  CycleReward (weights="shapes")
    fleur                            an 8B VLM judge (Qwen3-VL-8B shapes), only with --with-fleur: it needs
                                     ~35 GB of memory in float32 and minutes per caption on a CPU

Usage: python benchmarks/metric_cost.py [--captions 4] [--metrics pacscore,longclipscore,cyclereward]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT = "pacscore,refpacscore,longclipscore,reflongclipscore,cyclereward"
WORDS = [
    "a",
    "large",
    "farmland",
    "with",
    "green",
    "fields",
    "and",
    "a",
    "river",
    "crossing",
    "it",
    "near",
    "some",
    "buildings",
    "and",
    "roads",
]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captions", type=int, default=4, help="distinct (image, caption) pairs per metric")
    ap.add_argument("--metrics", default=DEFAULT)
    ap.add_argument("--with-fleur", action="store_true", help="also the full-size VLM judge (heavy)")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from PIL import Image

    from eval.metrics import CaptionBatch, build_metric

    rng = np.random.default_rng(0)
    names = [m for m in args.metrics.split(",") if m] + (["fleur"] if args.with_fleur else [])
    n = args.captions

    def batch(k: int, offset: int) -> CaptionBatch:
        images = [Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)) for _ in range(k)]
        caps = [" ".join(rng.choice(WORDS, size=40)) + f" {offset + i}" for i in range(k)]
        refs = [[" ".join(rng.choice(WORDS, size=12)) for _ in range(5)] for _ in range(k)]
        return CaptionBatch(caps, refs, images)

    print(
        f"CPU, torch threads={torch.get_num_threads()}, float32, full-size random weights, {n} captions each"
    )
    print(f"{'metric':18s} {'s/caption':>10s} {'s per 1k captions':>18s}")
    rows = []
    for name in names:
        metric = build_metric(name, weights="shapes", device="cpu")
        metric.score(batch(1, 10_000))  # warm-up: builds the model, first-call allocations
        start = time.perf_counter()
        metric.score(batch(n, 0))
        per = (time.perf_counter() - start) / n
        metric.close()
        rows.append({"metric": name, "seconds_per_caption": per, "seconds_per_1k": per * 1000})
        print(f"{name:18s} {per:10.3f} {per * 1000:18.0f}", flush=True)
    return rows


if __name__ == "__main__":
    main()
