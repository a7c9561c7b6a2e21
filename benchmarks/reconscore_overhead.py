"""ReconScorer overhead and batching, measured on the smoke models (CPU unless --device says otherwise).

Compares, in one process and interleaved rounds (the machine is shared and noisy; ratios, not seconds, are the
result):
  bare      a hand-written loop without the project: PIL reads the image (`Image.open(p).convert("RGB")`, the
            authors' reader), then per caption one diffusers ZImagePipeline call, DreamSim's own preprocessing
            (bicubic 224x224 + ToTensor, torchvision) and the DreamSim module's `embed`, then the cosine
  scorer    ReconScorer(batch_size=1), cache disabled: what the framework adds (image loading, size rule,
            prompt template, token counting, bookkeeping)
  batched   ReconScorer(batch_size=B), cache disabled
  cached    ReconScorer re-scoring captions already rendered (content-addressed cache)

Each path runs --rounds times, interleaved; the figures are the medians, printed with each path's spread
(min-max and (max - min) / median), so a ratio can be read against the noise.

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
    from PIL import Image
    from torchvision import transforms

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.encoders import build_encoder
    from recon_score.presets import get_preset
    from recon_score.prompts import format_prompt
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer

    preset = get_preset("smoke")
    path = SAMPLE_DIR / "images" / "UCM_1.tif"
    captions = [f"farmland with {i} trees and a road number {i}" for i in range(args.n)]

    # --- bare loop: diffusers and the DreamSim module called directly --------------------------------------
    scorer1 = ReconScorer(preset, device=args.device, batch_size=1, cache=ArtifactCache(enabled=False))
    scorer1.preflight()
    pipe = ZImagePipeline.from_pretrained(str(scorer1.renderer.resolved.path)).to(args.device)
    pipe.vae.enable_tiling()
    pipe.set_progress_bar_config(disable=True)
    dreamsim = build_encoder(preset.encoder, device=args.device).model  # the nn.Module, not the wrapper
    prep = transforms.Compose(  # DreamSim's own preprocessing (dreamsim/model.py)
        [
            transforms.Resize((224, 224), interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.ToTensor(),
        ]
    )

    def bare() -> None:
        image = Image.open(path).convert("RGB")
        with torch.inference_mode():
            orig = dreamsim.embed(prep(image).unsqueeze(0).to(args.device))
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
                emb = dreamsim.embed(prep(rec).unsqueeze(0).to(args.device))
                _ = float(torch.nn.functional.cosine_similarity(orig, emb).item())

    batched_scorer = ReconScorer(
        preset, device=args.device, batch_size=args.batch_size, cache=ArtifactCache(enabled=False)
    )
    cache_dir = tempfile.mkdtemp(prefix="reconscore-bench-cache-")
    warm = ReconScorer(preset, device=args.device, batch_size=args.batch_size, cache=ArtifactCache(cache_dir))
    warm.score(path, captions)  # fill the cache once
    cached_scorer = ReconScorer(preset, device=args.device, cache=ArtifactCache(cache_dir))

    def fresh(scorer):
        """A round as a new process would run it: the scorer's in-memory entries dropped first (the renders of
        the last round would answer otherwise; `cached` then reads the disk cache, as intended)."""

        def run() -> None:
            scorer.cache.forget()
            scorer.score(path, captions)

        return run

    runs = {
        "bare": bare,
        "scorer": fresh(scorer1),  # reads the image itself, as the bare loop does
        "batched": fresh(batched_scorer),
        "cached": fresh(cached_scorer),
    }
    for fn in runs.values():  # warm-up: lazy loads, allocator, kernel selection
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    mid = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"smoke models, device={args.device}, {args.n} captions, batch size {args.batch_size}, "
        f"{args.rounds} interleaved rounds (medians), torch threads={torch.get_num_threads()}"
    )
    for name in runs:
        t = times[name]
        print(
            f"  {name:8s} {args.n / mid[name]:8.1f} captions/s  (median {mid[name]:.3f} s, rounds "
            f"{min(t):.3f}-{max(t):.3f} s, spread {100 * (max(t) - min(t)) / mid[name]:.0f}%)"
        )
    print(f"ratio scorer/bare throughput          : {mid['bare'] / mid['scorer']:.2f}  (1.0 = no overhead)")
    print(
        f"ratio batched/scorer throughput       : {mid['scorer'] / mid['batched']:.2f}  (batch {args.batch_size})"
    )
    print(f"ratio cached/scorer throughput        : {mid['scorer'] / mid['cached']:.1f}  (no T2I call)")
    print("(read each ratio against the spreads above: rounds interleave, the machine may be shared)")


if __name__ == "__main__":
    main()
