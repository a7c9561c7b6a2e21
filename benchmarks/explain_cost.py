"""What `--explain` costs per caption against plain scoring, measured in one process on the same captions.

For each caption: `ReconScorer.score_seeds` (what `score --seeds K` does) and `ReconScorer.explain` (gap maps +
leave-one-phrase-out), cache disabled, interleaved over rounds (the machine may be shared: read the ratios and
their spread, not the seconds). Prints renders per caption, seconds per caption (median and range) and the ratio.

Usage: ./dev python benchmarks/explain_cost.py [--preset smoke] [--seeds 2] [--rounds 3] [--device cpu]
       (on a GPU: --preset paper with the weights, or a preset over the full-size `shapes:` models)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CAPTIONS = [
    "a farmland with rows of green crops, a road on the left",
    "many buildings and a parking lot, with trees along the river",
    "a baseball field next to a parking lot",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.explain import split_phrases
    from recon_score.images import load_image
    from recon_score.run import SAMPLE_DIR
    from recon_score.scorer import ReconScorer
    from recon_score.seeds import derive_seeds

    scorer = ReconScorer.from_preset(args.preset, device=args.device, cache=ArtifactCache(enabled=False))
    scorer.preflight()
    image = load_image(SAMPLE_DIR / "images" / "UCM_1.tif", reader=scorer.preset.image_reader)
    seeds = derive_seeds(scorer.preset.seed, args.seeds)
    scorer.score_seeds([(image, CAPTIONS[0])], seeds)  # warm-up: models loaded, kernels chosen

    times: dict[str, list[float]] = {"score": [], "explain": []}
    for _ in range(args.rounds):
        for name in times:
            start = time.perf_counter()
            for caption in CAPTIONS:
                scorer.cache.forget()  # every round renders: the last round's renders stay in memory otherwise
                if name == "score":
                    scorer.score_seeds([(image, caption)], seeds)
                else:
                    scorer.explain(image, caption, seeds=seeds)
            times[name].append((time.perf_counter() - start) / len(CAPTIONS))

    phrases = statistics.fmean(len(split_phrases(c)) for c in CAPTIONS)
    print(f"preset {args.preset}, device {args.device}, K = {args.seeds} seeds, {len(CAPTIONS)} captions, "
          f"{phrases:.2f} phrases per caption on average, {args.rounds} interleaved rounds")  # fmt: skip
    print(
        f"renders per caption: score {args.seeds}, explain {(phrases + 1) * args.seeds:.1f} ((phrases + 1) x K)"
    )
    for name, values in times.items():
        print(
            f"{name:8s} s/caption: median {statistics.median(values):.3f}  range {min(values):.3f}-{max(values):.3f}"
        )
    ratios = [e / s for e, s in zip(times["explain"], times["score"])]
    print(
        f"explain / score: median {statistics.median(ratios):.2f}  range {min(ratios):.2f}-{max(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
