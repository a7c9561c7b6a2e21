"""ReconScorer overhead and batching, measured on the smoke models (CPU unless --device says otherwise).

Compares, in one process and interleaved rounds (the machine is shared and noisy; ratios, not seconds, are the
result):
  bare      a hand-written loop: ZImagePipeline call + DreamSim-style embed + cosine, one caption at a time
  scorer    ReconScorer(batch_size=1), cache disabled: what the framework adds (image loading, size rule,
            prompt template, token counting, bookkeeping)
  batched   ReconScorer(batch_size=B), cache disabled
  cached    ReconScorer re-scoring captions already rendered (content-addressed cache)

Usage: ./dev python benchmarks/reconscore_overhead.py [--n 24] [--batch-size 8] [--rounds 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=24, help="captions per measurement")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.environ.setdefault("RECONSCORE_CACHE", tempfile.mkdtemp(prefix="reconscore-bench-"))

    import torch
    from diffusers import ZImagePipeline

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.encoders import build_encoder
    from recon_score.images import load_image
    from recon_score.presets import get_preset
    from recon_score.prompts import format_prompt
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer

    preset = get_preset("smoke")
    image = load_image(SAMPLE_DIR / "images" / "UCM_1.tif")
    captions = [f"farmland with {i} trees and a road number {i}" for i in range(args.n)]

    # --- bare loop: the same models, called directly -------------------------------------------------------
    scorer1 = ReconScorer(preset, device=args.device, batch_size=1, cache=ArtifactCache(enabled=False))
    scorer1.preflight()
    pipe = ZImagePipeline.from_pretrained(str(scorer1.renderer.resolved.path)).to(args.device)
    pipe.vae.enable_tiling()
    pipe.set_progress_bar_config(disable=True)
    enc = build_encoder(preset.encoder, device=args.device)

    def bare() -> None:
        orig = enc.encode_images([image])
        for cap in captions:
            rec = pipe(
                prompt=format_prompt(preset.prompt_template, cap),
                height=256,
                width=256,
                num_inference_steps=preset.steps,
                guidance_scale=preset.guidance_scale,
                max_sequence_length=preset.max_sequence_length,
                generator=torch.Generator("cpu").manual_seed(preset.seed),
            ).images[0]
            _ = float((orig * enc.encode_images([rec])).sum())

    batched_scorer = ReconScorer(
        preset, device=args.device, batch_size=args.batch_size, cache=ArtifactCache(enabled=False)
    )
    cache_dir = tempfile.mkdtemp(prefix="reconscore-bench-cache-")
    warm = ReconScorer(preset, device=args.device, batch_size=args.batch_size, cache=ArtifactCache(cache_dir))
    warm.score(image, captions)  # fill the cache once
    cached_scorer = ReconScorer(preset, device=args.device, cache=ArtifactCache(cache_dir))

    runs = {
        "bare": bare,
        "scorer": lambda: scorer1.score(image, captions),
        "batched": lambda: batched_scorer.score(image, captions),
        "cached": lambda: cached_scorer.score(image, captions),
    }
    for fn in runs.values():  # warm-up: lazy loads, allocator, kernel selection
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    print(
        f"smoke models, device={args.device}, {args.n} captions, batch size {args.batch_size}, "
        f"{args.rounds} interleaved rounds (min), torch threads={torch.get_num_threads()}"
    )
    for name in runs:
        print(
            f"  {name:8s} {args.n / best[name]:8.1f} captions/s  (median {statistics.median(times[name]):.3f} s)"
        )
    print(f"ratio scorer/bare throughput          : {best['bare'] / best['scorer']:.2f}  (1.0 = no overhead)")
    print(
        f"ratio batched/scorer throughput       : {best['scorer'] / best['batched']:.2f}  (batch {args.batch_size})"
    )
    print(f"ratio cached/scorer throughput        : {best['scorer'] / best['cached']:.1f}  (no T2I call)")


if __name__ == "__main__":
    main()
