"""Coverage of the `--seeds K` confidence interval of the mean ReconScore (recon_score.seeds.recon_score_ci) in
five crossed images x seeds designs, by simulation through the project's own variance function.

Each simulated score is 70 + image effect + caption effect + seed effect (shared by every image) + noise, all
normal with the standard deviations below; the caption counts of a design are drawn once (rng seed 1). Every
design draws `--sims` data sets; an interval covers when it holds the true mean, 70. Nominal level 95 %.

Usage: python benchmarks/seed_ci_coverage.py [--sims 4000] [--write-docs]
  --write-docs replaces the table between the coverage markers in docs/seeds.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recon_score.seeds import crossed_variance

TRUE_MEAN = 70.0
LEVEL = 0.95
DOCS = Path(__file__).resolve().parent.parent / "docs" / "seeds.md"
MARK = ("<!-- seed-ci-coverage: written by benchmarks/seed_ci_coverage.py -->", "<!-- /seed-ci-coverage -->")


def designs() -> dict[str, dict]:
    """name -> captions per image, K seeds and the standard deviations (image, caption, seed, noise)."""
    rng = np.random.default_rng(1)
    return {
        "no seed effect, noise dominant (40 images, 1-3 captions, K=4; sd image 0.5, seed 0, noise 3)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=0.5, caption=0.0, seed=0.0, noise=3.0
        ),
        "shared seed effect dominant (40 images, 1-3 captions, K=4; sd image 0.5, seed 2, noise 0.5)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=0.5, caption=0.0, seed=2.0, noise=0.5
        ),
        "30 images, 2-25 captions each, K=3 (sd image 2, caption 1, seed 0.4, noise 1)": dict(
            counts=rng.integers(2, 26, 30), k=3, image=2.0, caption=1.0, seed=0.4, noise=1.0
        ),
        "10 images, 1-3 captions, K=4 (sd image 2, seed 0.4, noise 1)": dict(
            counts=rng.integers(1, 4, 10), k=4, image=2.0, caption=0.0, seed=0.4, noise=1.0
        ),
        "40 images, 1-3 captions, K=4 (sd image 2, seed 0.4, noise 1)": dict(
            counts=rng.integers(1, 4, 40), k=4, image=2.0, caption=0.0, seed=0.4, noise=1.0
        ),
    }


def coverage(design: dict, sims: int, rng_seed: int = 0) -> tuple[float, float]:
    """(coverage, median half-width / the ideal half-width 1.96 x the true sd of the mean) over `sims` data
    sets, all drawn at once (vectorised)."""
    from scipy import stats

    rng = np.random.default_rng(rng_seed)
    counts, k = np.asarray(design["counts"]), design["k"]
    g, n = len(counts), int(counts.sum())
    group = np.repeat(np.arange(g), counts)
    v = (
        TRUE_MEAN
        + design["image"] * rng.standard_normal((sims, g))[:, group, None]
        + design["caption"] * rng.standard_normal((sims, n, 1))
        + design["seed"] * rng.standard_normal((sims, 1, k))
        + design["noise"] * rng.standard_normal((sims, n, k))
    )
    sums = np.zeros((sims, g, k))
    np.add.at(sums, (slice(None), group), v)
    mean, var, parts = crossed_variance(sums / counts[:, None], counts / n)
    half = stats.t.ppf(0.5 + LEVEL / 2, parts["df"]) * np.sqrt(np.maximum(var, 0.0))
    covered = float(np.mean(np.abs(mean - TRUE_MEAN) <= half))
    return covered, float(np.median(half) / (1.96 * np.std(mean - TRUE_MEAN)))


def table(sims: int) -> str:
    rows = [
        "| design | coverage of the nominal 95 % interval | median width / ideal width |",
        "|---|---|---|",
    ]
    for name, d in designs().items():
        cov, width = coverage(d, sims)
        rows.append(f"| {name} | {cov:.1%} | {width:.2f} |")
    return (
        "\n".join(rows)
        + f"\n\n{sims} simulated data sets per design (`python benchmarks/seed_ci_coverage.py`)."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    text = table(args.sims)
    print(text)
    if args.write_docs:
        page = DOCS.read_text(encoding="utf-8")
        block = re.compile(re.escape(MARK[0]) + ".*?" + re.escape(MARK[1]), re.S)
        if not block.search(page):
            raise SystemExit(f"{DOCS}: no coverage markers")
        DOCS.write_text(block.sub(lambda _: f"{MARK[0]}\n{text}\n{MARK[1]}", page), encoding="utf-8")


if __name__ == "__main__":
    main()
