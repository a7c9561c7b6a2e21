"""Coverage of the confidence interval of the mean ReconScore (recon_score.seeds.recon_score_ci) in five images x
seeds designs, by simulation through the project's own variance and interval functions, at K > 1 seeds and at
one seed (the paper preset), the latter beside the percentile bootstrap over images it replaced.

Each simulated score is 70 + image effect + caption effect + seed effect (shared by every image) + noise, all
normal with the standard deviations below; the caption counts of a design are drawn once (rng seed 1). Every
design draws `--sims` data sets; an interval covers when it holds the target. K > 1: the target is the true mean,
70. One seed: the seed's shared effect is not estimable from one seed, so the target is the mean at that seed
(70 + its effect); the last column says how often the interval also holds 70, the mean over seeds. Nominal level
95 %; the interval is asked to cover 93-97 %.

Usage: python benchmarks/seed_ci_coverage.py [--sims 4000] [--write-docs] [--check]
  --write-docs replaces the tables between the coverage markers in docs/seeds.md.
  --check exits 1 when a coverage of the project's interval falls outside 93-97 %.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recon_score.bootstrap import bootstrap_draws, t_interval
from recon_score.seeds import RECON_SCORE_RANGE, crossed_variance

TRUE_MEAN = 70.0
LEVEL = 0.95
BAND = (0.93, 0.97)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "seeds.md"
MARK = ("<!-- seed-ci-coverage: written by benchmarks/seed_ci_coverage.py -->", "<!-- /seed-ci-coverage -->")


def designs() -> dict[str, dict]:
    """name -> captions per image, K seeds (of the K > 1 table) and the standard deviations (image, caption,
    seed, noise)."""
    rng = np.random.default_rng(1)
    return {
        "no seed effect, noise dominant (40 images, 1-3 captions; sd image 0.5, seed 0, noise 3)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=0.5, caption=0.0, seed=0.0, noise=3.0
        ),
        "shared seed effect dominant (40 images, 1-3 captions; sd image 0.5, seed 2, noise 0.5)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=0.5, caption=0.0, seed=2.0, noise=0.5
        ),
        "30 images, 2-25 captions each (sd image 2, caption 1, seed 0.4, noise 1)": dict(
            counts=rng.integers(2, 26, 30), k=3, image=2.0, caption=1.0, seed=0.4, noise=1.0
        ),
        "10 images, 1-3 captions (sd image 2, seed 0.4, noise 1)": dict(
            counts=rng.integers(1, 4, 10), k=4, image=2.0, caption=0.0, seed=0.4, noise=1.0
        ),
        "40 images, 1-3 captions (sd image 2, seed 0.4, noise 1)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=2.0, caption=0.0, seed=0.4, noise=1.0
        ),
    }


def simulate(design: dict, sims: int, k: int, rng_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(scores of shape (sims, captions, k), the seed effects (sims, k)), all drawn at once (vectorised)."""
    rng = np.random.default_rng(rng_seed)
    counts = np.asarray(design["counts"])
    g, n = len(counts), int(counts.sum())
    group = np.repeat(np.arange(g), counts)
    image = design["image"] * rng.standard_normal((sims, g))[:, group, None]
    caption = design["caption"] * rng.standard_normal((sims, n, 1))
    seed = design["seed"] * rng.standard_normal((sims, 1, k))
    v = TRUE_MEAN + image + caption + seed + design["noise"] * rng.standard_normal((sims, n, k))
    return v, seed[:, 0, :]


def _image_sums(design: dict, v: np.ndarray) -> np.ndarray:
    counts = np.asarray(design["counts"])
    sums = np.zeros((v.shape[0], len(counts), v.shape[2]))
    np.add.at(sums, (slice(None), np.repeat(np.arange(len(counts)), counts)), v)
    return sums


def intervals(design: dict, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high) of every simulated data set, by recon_score_ci's steps (crossed_variance of the
    caption-weighted image-by-seed means, then t_interval clipped to ReconScore's range), vectorised."""
    counts = np.asarray(design["counts"], dtype=np.float64)
    mean, var, parts = crossed_variance(_image_sums(design, v) / counts[:, None], counts / counts.sum())
    low, high = t_interval(mean, var, parts["df"], level=LEVEL, value_range=RECON_SCORE_RANGE)
    return mean, low, high


def percentile_bootstrap(design: dict, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One seed: the interval recon_score_ci gave before, the 95 % percentile cluster bootstrap over images
    (recon_score.bootstrap's draws, 2,000 rounds, rng seed 0; the mean over the drawn captions)."""
    counts = np.asarray(design["counts"], dtype=np.float64)
    sums = _image_sums(design, v)[..., 0]
    drawn = np.stack([np.bincount(c, minlength=len(counts)) for c in bootstrap_draws(len(counts))])
    reps = (drawn @ sums.T) / (drawn @ counts)[:, None]  # (rounds, sims)
    low, high = np.quantile(reps, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=0)
    return low, high


def _covers(low, high, target) -> float:
    return float(np.mean((low <= target) & (target <= high)))


def _width(mean, low, high, target) -> float:
    """Median half-width / the ideal half-width (1.96 x the true sd of the mean around its target)."""
    return float(np.median((high - low) / 2) / (1.96 * np.std(mean - target)))


def coverage(design: dict, sims: int, k: int | None = None) -> dict[str, float]:
    """Coverage and width / ideal of the project's interval at `k` seeds (the design's K by default); at one seed
    also the percentile bootstrap's and how often the interval holds the mean over seeds (70)."""
    k = design["k"] if k is None else k
    v, seed = simulate(design, sims, k)
    mean, low, high = intervals(design, v)
    target = TRUE_MEAN + (seed[:, 0] if k == 1 else 0.0)
    out = {"covered": _covers(low, high, target), "width": _width(mean, low, high, target)}
    if k == 1:
        b_low, b_high = percentile_bootstrap(design, v)
        out |= {
            "bootstrap": _covers(b_low, b_high, target),
            "bootstrap_width": _width(mean, b_low, b_high, target),
        }
        out["over_seeds"] = _covers(low, high, TRUE_MEAN)
    return out


def results(sims: int) -> dict[str, dict[int, dict[str, float]]]:
    """design name -> {K: coverage(...)} for the design's K and K = 1."""
    return {name: {d["k"]: coverage(d, sims), 1: coverage(d, sims, 1)} for name, d in designs().items()}


def table(found: dict, sims: int) -> str:
    many = [
        "| design | K | coverage of the nominal 95 % interval | median width / ideal width |",
        "|---|---|---|---|",
    ]
    one = [
        "| design, one seed (K = 1) | t interval over images: coverage | width / ideal "
        "| percentile bootstrap (before): coverage | width / ideal | t interval holds the mean over seeds |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in designs().items():
        r, s = found[name][d["k"]], found[name][1]
        many.append(f"| {name} | {d['k']} | {r['covered']:.1%} | {r['width']:.2f} |")
        one.append(
            f"| {name} | {s['covered']:.1%} | {s['width']:.2f} | {s['bootstrap']:.1%} "
            f"| {s['bootstrap_width']:.2f} | {s['over_seeds']:.1%} |"
        )
    note = f"{sims} simulated data sets per design and K (`python benchmarks/seed_ci_coverage.py`)."
    return "\n".join(many) + "\n\n" + "\n".join(one) + "\n\n" + note


def outside_band(found: dict) -> list[str]:
    """Design/K pairs where the project's interval covers outside BAND."""
    return [
        f"{name}, K={k}: {r['covered']:.1%}"
        for name, by_k in found.items()
        for k, r in by_k.items()
        if not BAND[0] <= r["covered"] <= BAND[1]
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    found = results(args.sims)
    text = table(found, args.sims)
    print(text)
    if args.write_docs:
        page = DOCS.read_text(encoding="utf-8")
        block = re.compile(re.escape(MARK[0]) + ".*?" + re.escape(MARK[1]), re.S)
        if not block.search(page):
            raise SystemExit(f"{DOCS}: no coverage markers")
        DOCS.write_text(block.sub(lambda _: f"{MARK[0]}\n{text}\n{MARK[1]}", page), encoding="utf-8")
    if args.check and (bad := outside_band(found)):
        raise SystemExit("coverage outside 93-97 %: " + "; ".join(bad))


if __name__ == "__main__":
    main()
