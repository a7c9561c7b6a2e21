"""Describer throughput on the smoke models: candidates per second, batched vs one at a time.

For N in {1, 4, 10}:
  loop     one generate call per candidate (num_return_sequences=1, one image per call)
  batched  one generate call per `--images-per-call` images with num_return_sequences=N (shared prefill)
and the same for the selection step (ReconScore of the N candidates, T2I batch 1 vs `--t2i-batch-size`).
Interleaved rounds, min time; the machine is shared, so read the ratios.

Usage: ./dev python benchmarks/describer_throughput.py [--images 4] [--images-per-call 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--images-per-call", type=int, default=4)
    ap.add_argument("--t2i-batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.environ.setdefault("RECONSCORE_CACHE", tempfile.mkdtemp(prefix="reconscore-bench-"))

    import torch

    from describer.backends import CaptionRequest, Sampling
    from describer.backends.transformers import TransformersBackend
    from describer.selection import ReconScoreSelector
    from recon_score.artifact_cache import ArtifactCache
    from recon_score.images import load_image
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer

    images = [load_image(SAMPLE_DIR / "images" / f"UCM_{i + 1}.tif") for i in range(args.images)]
    one = TransformersBackend("smoke:qwen3-vl", device=args.device, batch_size=1)
    many = TransformersBackend("smoke:qwen3-vl", device=args.device, batch_size=args.images_per_call)
    prompt = "Describe this remote sensing image."

    def loop(n: int) -> int:
        s = Sampling(n=1, max_new_tokens=args.max_new_tokens)
        got = 0
        for i, im in enumerate(images):
            for k in range(n):
                got += len(one.generate([CaptionRequest(im, seed=1000 * i + k)], prompt, s)[0])
        return got

    def batched(n: int) -> int:
        s = Sampling(n=n, max_new_tokens=args.max_new_tokens)
        out = many.generate([CaptionRequest(im, seed=i) for i, im in enumerate(images)], prompt, s)
        return sum(len(c) for c in out)

    sel1 = ReconScoreSelector(
        ReconScorer.from_preset("smoke", device=args.device, batch_size=1, cache=ArtifactCache(enabled=False))
    )
    selb = ReconScoreSelector(
        ReconScorer.from_preset(
            "smoke", device=args.device, batch_size=args.t2i_batch_size, cache=ArtifactCache(enabled=False)
        )
    )

    def select(selector, n: int) -> int:
        items = [
            (im, [f"farmland {i} with {k} trees" for k in range(n)], None) for i, im in enumerate(images)
        ]
        return sum(len(x) for x in selector.score_many(items))

    loop(1), batched(1), select(sel1, 1), select(selb, 1)  # warm-up: loading, allocator
    print(
        f"smoke models, device={args.device}, {args.images} images, {args.max_new_tokens} new tokens, "
        f"{args.images_per_call} images per VLM call, T2I batch {args.t2i_batch_size}, "
        f"torch threads={torch.get_num_threads()}, min of {args.rounds} interleaved rounds"
    )
    print(
        f"{'N':>3} {'loop cand/s':>12} {'batched cand/s':>15} {'ratio':>6} | {'select b1 c/s':>14} "
        f"{'select bB c/s':>14} {'ratio':>6}"
    )
    for n in (1, 4, 10):
        t = {"loop": [], "batched": [], "s1": [], "sb": []}
        for _ in range(args.rounds):
            for name, fn in (
                ("loop", lambda n=n: loop(n)),
                ("batched", lambda n=n: batched(n)),
                ("s1", lambda n=n: select(sel1, n)),
                ("sb", lambda n=n: select(selb, n)),
            ):
                t0 = time.perf_counter()
                count = fn()
                t[name].append(time.perf_counter() - t0)
        total = args.images * n
        assert count == total
        rate = {k: total / min(v) for k, v in t.items()}
        print(
            f"{n:>3} {rate['loop']:>12.1f} {rate['batched']:>15.1f} {rate['batched'] / rate['loop']:>6.2f} | "
            f"{rate['s1']:>14.1f} {rate['sb']:>14.1f} {rate['sb'] / rate['s1']:>6.2f}"
        )


if __name__ == "__main__":
    main()
