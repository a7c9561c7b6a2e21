"""What `--explain` costs per caption against plain scoring, measured in one process on the same captions.

For each caption: `ReconScorer.score_seeds` (what `score --seeds K` does) and `ReconScorer.explain` (gap maps +
leave-one-phrase-out), both with the same K seeds, cache disabled, interleaved over rounds (the machine may be
shared: read the ratios and their spread, not the seconds). Prints, per caption, the renders and the encoder
forward passes each makes (counted on the encoder: every call of its batch embedding, with or without patch
tokens, and the images in them), seconds (median and range) and the ratio.

Usage: ./dev python benchmarks/explain_cost.py [--preset smoke] [--seeds 6] [--rounds 3] [--device cpu]
       (on a GPU: --preset paper with the weights, or a preset over the full-size `shapes:` models)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS

CAPTIONS = [
    "a farmland with rows of green crops, a road on the left",
    "many buildings and a parking lot, with trees along the river",
    "a baseball field next to a parking lot",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--seeds", type=int, default=DEFAULT_EXPLAIN_SEEDS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.explain import ExplainOptions, split_phrases
    from recon_score.images import load_image
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer
    from recon_score.seeds import derive_seeds

    scorer = ReconScorer.from_preset(args.preset, device=args.device, cache=ArtifactCache(enabled=False))
    scorer.preflight()
    image = load_image(SAMPLE_DIR / "images" / "UCM_1.tif", reader=scorer.preset.image_reader)
    seeds = derive_seeds(scorer.preset.seed, args.seeds)
    scorer.score_seeds([(image, CAPTIONS[0])], seeds)  # warm-up: models loaded, kernels chosen
    calls = count_encoder_calls(scorer.encoder)

    times: dict[str, list[float]] = {"score": [], "explain": []}
    work = {name: {"renders": 0, "calls": 0, "images": 0} for name in times}
    for _ in range(args.rounds):
        for name in times:
            start, rendered, before = time.perf_counter(), scorer.stats["rendered"], dict(calls)
            for caption in CAPTIONS:
                scorer.cache.forget()  # every round renders: the last round's renders stay in memory otherwise
                if name == "score":
                    scorer.score_seeds([(image, caption)], seeds)
                else:
                    scorer.explain(image, caption, seeds=seeds)
            times[name].append((time.perf_counter() - start) / len(CAPTIONS))
            work[name]["renders"] += scorer.stats["rendered"] - rendered
            work[name]["calls"] += calls["calls"] - before["calls"]
            work[name]["images"] += calls["images"] - before["images"]

    phrases = statistics.fmean(len(split_phrases(c)) for c in CAPTIONS)
    print(f"preset {args.preset}, device {args.device}, K = {args.seeds} seeds, {len(CAPTIONS)} captions, "
          f"{phrases:.2f} phrases per caption on average, {args.rounds} interleaved rounds")  # fmt: skip
    expected = statistics.fmean(ExplainOptions(seeds=args.seeds).renders(c) for c in CAPTIONS)
    print(
        f"renders per caption expected: score {args.seeds}, explain {expected:.1f} ((attributed phrases + 1) x K; "
        "a one-phrase caption: K)"
    )
    per = args.rounds * len(CAPTIONS)
    for name, w in work.items():
        print(
            f"{name:8s} per caption, counted: {w['renders'] / per:.1f} renders, {w['calls'] / per:.1f} encoder "
            f"forward passes over {w['images'] / per:.1f} images"
        )
    for name, values in times.items():
        print(
            f"{name:8s} s/caption: median {statistics.median(values):.3f}  range {min(values):.3f}-{max(values):.3f}"
        )
    ratios = [e / s for e, s in zip(times["explain"], times["score"])]
    print(
        f"explain / score: median {statistics.median(ratios):.2f}  range {min(ratios):.2f}-{max(ratios):.2f}"
    )


def count_encoder_calls(encoder) -> dict[str, int]:
    """Count every batch forward of `encoder` (embedding alone, or embedding and patch tokens together) and the
    images in them, by wrapping its two batch methods on the instance."""
    counts = {"calls": 0, "images": 0}
    for name in ("_embed_images", "_embed_with_patches"):
        method = getattr(encoder, name)

        def counted(images, _method=method):
            counts["calls"] += 1
            counts["images"] += len(images)
            return _method(images)

        setattr(encoder, name, counted)
    return counts


if __name__ == "__main__":
    main()
