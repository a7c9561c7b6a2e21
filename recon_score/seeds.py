"""T2I seed noise: several seeds per caption, and a system mean with a bootstrap CI over images and seeds.

A caption's ReconScore depends on the seed of its reconstruction; no paper reports how much. `derive_seeds`
gives K seeds per caption (the first is the preset's, 42 in `paper`, so K = 1 is the paper's protocol),
`score_with_seeds` renders every caption with each of them and `bootstrap_ci` resamples images and, within
each resampled image, its seeds (a two-stage bootstrap of the mean).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

CI_LEVEL = 0.95
CI_RESAMPLES = 2000
CI_RNG_SEED = 0


def derive_seeds(base: int, k: int, *, exclude: Collection[int] = ()) -> list[int]:
    """K distinct seeds: `base` first, then 31-bit seeds hashed from (base, i); values in `exclude` are skipped
    (the describer's selection seeds never include its evaluation seed)."""
    if k < 1:
        raise ValueError(f"need at least one seed, got k={k}")
    if base in exclude:
        raise ValueError(f"seed {base} is excluded ({sorted(exclude)})")
    out, i = [int(base)], 0
    while len(out) < k:
        i += 1
        digest = hashlib.sha256(f"reconscore-seed:{base}:{i}".encode()).digest()
        s = int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF
        if s not in exclude and s not in out:
            out.append(s)
    return out


@dataclass
class MultiSeedResult:
    """One caption rendered with several seeds: the ReconResult fields a results row needs, as the mean over
    seeds (reconstruction, prompt and size from the first seed), plus the per-seed values."""

    caption: str | None
    seeds: list[int]
    per_seed: list[float | None]
    recon_score: float | None = None
    std: float | None = None
    cosine: float | None = None
    distance: float | None = None
    width: int | None = None
    height: int | None = None
    prompt: str | None = None
    truncated: bool = False
    error: str | None = None
    reconstruction: object = field(default=None, repr=False)
    cached: bool = False

    @property
    def seed(self) -> int:
        return self.seeds[0]


def _mean(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else statistics.fmean(values)


def score_with_seeds(scorer, pairs: Sequence, seeds: Sequence[int], *, force_render: bool = False) -> list:
    """`scorer.score_pairs` for every pair under each seed, aggregated per pair. One seed: the scorer's own
    results, unchanged. A pair fails (error set) if any of its renders fails: a mean over fewer seeds would not
    be comparable with the other rows."""
    if len(seeds) == 1:
        return scorer.score_pairs(pairs, seeds=[seeds[0]] * len(pairs), force_render=force_render)
    flat = [p for _ in seeds for p in pairs]
    flat_seeds = [s for s in seeds for _ in pairs]
    results = scorer.score_pairs(flat, seeds=flat_seeds, force_render=force_render)
    out = []
    for i in range(len(pairs)):
        mine = [results[k * len(pairs) + i] for k in range(len(seeds))]
        first = mine[0]
        err = next((r.error for r in mine if r.error), None)
        scores = [r.recon_score for r in mine]
        if err is None and any(s is None or not math.isfinite(s) for s in scores):
            err = "non-finite similarity (NaN/inf from the models) under some seed"
        res = MultiSeedResult(caption=first.caption, seeds=list(seeds), per_seed=scores, error=err)
        if err is None:
            res.recon_score = statistics.fmean(scores)
            res.std = statistics.stdev(scores)
            res.cosine = _mean([r.cosine for r in mine])
            res.distance = _mean([r.distance for r in mine])
            res.width, res.height, res.prompt = first.width, first.height, first.prompt
            res.truncated, res.reconstruction = first.truncated, first.reconstruction
            res.cached = all(r.cached for r in mine)
        out.append(res)
    return out


def bootstrap_ci(
    values: np.ndarray,
    *,
    level: float = CI_LEVEL,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> dict:
    """Percentile CI of the system mean for an (images, seeds) matrix of scores.

    Protocol (what a test re-implements): `rng = numpy.random.default_rng(rng_seed)`; for each of `resamples`
    rounds draw `rng.integers(0, n, n)` images, then `rng.integers(0, k, (n, k))` seed columns within them;
    the statistic is the mean over the n x k drawn cells. Bounds: `numpy.quantile` (linear) at (1 -/+ level)/2.
    With k = 1 it is the ordinary percentile bootstrap over images.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.size == 0 or not np.isfinite(v).all():
        raise ValueError("bootstrap_ci needs a non-empty finite (images, seeds) matrix")
    n, k = v.shape
    rng = np.random.default_rng(rng_seed)
    stats = np.empty(resamples)
    for b in range(resamples):
        rows = rng.integers(0, n, n)
        cols = rng.integers(0, k, (n, k))
        stats[b] = v[rows[:, None], cols].mean()
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return {
        "mean": float(v.mean()),
        "low": float(lo),
        "high": float(hi),
        "level": level,
        "images": n,
        "seeds": k,
        "resamples": resamples,
        "rng_seed": rng_seed,
        "method": "percentile bootstrap over images, then over seeds within each image",
    }


def format_ci(ci: dict, digits: int = 2) -> str:
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def seed_summary(records: Sequence[dict], seeds: Sequence[int]) -> dict:
    """run.json's multi-seed summary from finished score rows (those with every seed scored)."""
    matrix = [
        r["recon_score_per_seed"] for r in records if not r.get("error") and r.get("recon_score_per_seed")
    ]
    out: dict = {"seeds": list(seeds), "rows_with_all_seeds": len(matrix)}
    if matrix:
        v = np.asarray(matrix, dtype=np.float64)
        out["recon_score_ci"] = bootstrap_ci(v)
        out["mean_within_row_std"] = float(v.std(axis=1, ddof=1).mean())
    return out
