"""How far batched rendering is from one-at-a-time rendering, on the smoke models (the bound docs/runs.md states).

Scores the bundled sample's first N captions with ReconScorer at batch size 1 and at batch size B (cache off,
one process, same threads) and prints, over all reconstructions: the largest per-pixel difference in grey
levels, the share of pixels that differ, and the largest ReconScore difference.

Usage: ./dev python benchmarks/batch_invariance.py [--n 16] [--batch-size 4] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def measure(n: int, batch_size: int, device: str) -> dict:
    import numpy as np

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.images import load_image
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer

    rows = [json.loads(x) for x in (SAMPLE_DIR / "captions.jsonl").read_text().splitlines()[:n]]
    pairs = [(load_image(SAMPLE_DIR / r["image"]), r["caption"]) for r in rows]
    runs = {}
    for b in (1, batch_size):
        scorer = ReconScorer.from_preset(
            "smoke", device=device, batch_size=b, cache=ArtifactCache(enabled=False)
        )
        runs[b] = scorer.score_pairs(pairs)
    one, many = runs[1], runs[batch_size]
    px = [
        np.abs(np.asarray(a.reconstruction, dtype=np.int16) - np.asarray(b.reconstruction, dtype=np.int16))
        for a, b in zip(one, many)
    ]
    return {
        "captions": n,
        "batch_size": batch_size,
        "max_pixel_diff": int(max(int(d.max()) for d in px)),
        "pixels_differing": float(sum(int((d > 0).sum()) for d in px) / sum(d.size for d in px)),
        "max_score_diff": float(max(abs(a.recon_score - b.recon_score) for a, b in zip(one, many))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    print(json.dumps(measure(args.n, args.batch_size, args.device), indent=1))


if __name__ == "__main__":
    main()
