"""Seeds: their derivation, and the confidence interval of a mean ReconScore over images and T2I seeds.

A caption's ReconScore depends on the seed of its reconstruction; no paper reports how much. `derive_seeds`
gives K seeds per caption (the first is the preset's, 42 in `paper`, so K = 1 is the paper's protocol),
`ReconScorer.score_seeds` renders every caption with each of them, and `recon_score_ci` is a cluster bootstrap
of the mean: distinct images are drawn with all their captions and seed values, and the K seed columns are drawn
jointly across images (every image shares the same K seeds, so a seed's effect is shared too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Hashable, Sequence

import numpy as np

from recon_score.bootstrap import (
    CI_LEVEL,
    CI_RESAMPLES,
    CI_RNG_SEED,
    bootstrap_replicates,
    percentile_interval,
)


def derive_seed(*parts: object, bits: int = 60) -> int:
    """A `bits`-bit seed hashed from `parts` (the run's seed and content such as image digests): the low `bits`
    bits of the first ceil(bits / 4) hex digits of sha256(":".join(parts)). Content-derived, so a value never
    depends on which other items were in the run, their order, or where a resumed run restarted."""
    h = hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()
    return int(h[: -(-bits // 4)], 16) & ((1 << bits) - 1)


def derive_seeds(base: int, k: int, *, exclude: Collection[int] = ()) -> list[int]:
    """K distinct seeds: `base` first, then 31-bit seeds derived from (base, i); values in `exclude` are skipped
    (the describer's selection seeds never include its evaluation seed)."""
    if k < 1:
        raise ValueError(f"need at least one seed, got k={k}")
    if base in exclude:
        raise ValueError(f"seed {base} is excluded ({sorted(exclude)})")
    out, i = [int(base)], 0
    while len(out) < k:
        i += 1
        s = derive_seed("reconscore-seed", base, i, bits=31)
        if s not in exclude and s not in out:
            out.append(s)
    return out


def recon_score_ci(
    values: np.ndarray,
    images: Sequence[Hashable],
    *,
    level: float = CI_LEVEL,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> dict:
    """Percentile CI of the mean ReconScore of a (captions, seeds) matrix whose row i is a caption of `images[i]`.

    One bootstrap round (recon_score.bootstrap): draw the distinct images with replacement, each with all its
    captions and all its seed values, and (K > 1) draw K seed columns with replacement, the same for every image;
    the statistic is the mean over every drawn (caption, seed) cell."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.size == 0 or not np.isfinite(v).all():
        raise ValueError("recon_score_ci needs a non-empty finite (captions, seeds) matrix")
    if len(images) != v.shape[0]:
        raise ValueError(f"{v.shape[0]} score rows but {len(images)} image keys")
    order = {key: g for g, key in enumerate(dict.fromkeys(images))}
    group = np.array([order[key] for key in images])
    n, k = len(order), v.shape[1]
    sums = np.zeros((n, k))
    np.add.at(sums, group, v)  # sums[g, j]: image g's captions under seed column j
    counts = np.bincount(group, minlength=n).astype(np.float64)

    def mean_of_draw(clusters: np.ndarray, cols: np.ndarray) -> float:
        wg = np.bincount(clusters, minlength=n).astype(np.float64)
        wk = np.bincount(cols, minlength=k).astype(np.float64)
        return float(wg @ sums @ wk / ((wg @ counts) * len(cols)))

    reps = bootstrap_replicates(mean_of_draw, n, columns=k, resamples=resamples, rng_seed=rng_seed)
    lo, hi = percentile_interval(reps, level)
    return {
        "mean": float(v.mean()),
        "low": lo,
        "high": hi,
        "level": level,
        "images": n,
        "seeds": k,
        "captions": int(v.shape[0]),
        "resamples": resamples,
        "rng_seed": rng_seed,
        "method": "percentile cluster bootstrap: images drawn with all their captions and seed values; "
        "seed columns drawn jointly across images",
    }


def ci_label(ci: dict) -> str:
    """What the interval is over, e.g. `1 image x 3 seeds (3 captions)`."""

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    return f"{n(ci['images'], 'image')} x {n(ci['seeds'], 'seed')} ({n(ci['captions'], 'caption')})"


def format_ci(ci: dict, digits: int = 2) -> str:
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def seed_summary(records: Sequence[dict], seeds: Sequence[int]) -> dict:
    """run.json's multi-seed summary from finished score rows (those with every seed scored)."""
    done = [r for r in records if not r.get("error") and r.get("recon_score_per_seed")]
    out: dict = {"seeds": list(seeds), "rows_with_all_seeds": len(done)}
    if done:
        v = np.asarray([r["recon_score_per_seed"] for r in done], dtype=np.float64)
        out["recon_score_ci"] = recon_score_ci(v, [str(r.get("image")) for r in done])
        out["mean_within_row_std"] = float(v.std(axis=1, ddof=1).mean())
    return out
