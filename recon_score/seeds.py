"""Seeds: their derivation, and the confidence interval of a mean ReconScore over images and T2I seeds.

A caption's ReconScore depends on the seed of its reconstruction; no paper reports how much. `derive_seeds`
gives K seeds per caption (the first is the preset's, 42 in `paper`, so K = 1 is the paper's protocol),
`ReconScorer.score_seeds` renders every caption with each of them, and `recon_score_ci` is the interval of the
mean. With one seed it is a cluster bootstrap over distinct images. With K > 1 seeds every image shares the same K
seeds: images and seeds are a crossed design, and the interval is a t interval from a two-way random-effects
decomposition of the mean's variance (images, seeds, residual) with Satterthwaite's degrees of freedom. A
bootstrap that redraws images and seed columns counts the residual twice (too wide when noise dominates) and
learns the shared seed term from K values with a normal-width interval (too short when that term dominates).
"""

from __future__ import annotations

import hashlib
import math
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


SEED_POOL_LEVEL = 0.25  # Bancroft's "sometimes pool": keep the seed component only when its F test passes


def crossed_variance(z: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Variance of the weighted mean `sum_g w_g mean_j z[..., g, j]` of an (images, seeds) table of image-by-seed
    means, with its Satterthwaite degrees of freedom; leading axes are independent tables (vectorised).

    Model: z_gj = mu + A_g + B_j + E_gj, all random. Var(mean) = sum w_g^2 Var A_g + Var B / K
    + sum w_g^2 Var E_g / K. Moment estimates: `images` from the weighted spread of the image means (it holds the
    residual once), `seeds` from the spread of the K weighted column means (it holds the residual again) and
    `residual` from the interaction table, which is subtracted once. Each is unbiased under constant variances
    (the factor `s2 / (s2 - 2 s3 + s2^2)`, s_p = sum w_g^p, corrects the weighted spreads). The seed component
    `seeds - residual` is kept only when the F ratio `seeds / residual` exceeds its (1 - SEED_POOL_LEVEL) quantile,
    else it is taken as 0. Degrees of freedom: images (G - 1) x the effective share (sum w^2)^2 / (G sum w^4),
    seeds K - 1, residual their product. One image (G = 1): the image term is not estimable; the variance is
    the seed term alone, an interval over seeds for that image."""
    from scipy import stats

    z = np.asarray(z, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    g, k = z.shape[-2:]
    zg = z.mean(-1)
    cols = np.einsum("g,...gk->...k", w, z)
    mean = zg @ w
    r, c = zg - mean[..., None], cols - mean[..., None]
    e = z - zg[..., None] - cols[..., None, :] + mean[..., None, None]
    seeds = (c**2).sum(-1) / (k * (k - 1))
    if g == 1:
        zero = np.zeros_like(seeds)
        parts = {"images": zero, "seeds": seeds, "residual": zero, "df": zero + k - 1, "seed_kept": zero == 0}
        return mean, seeds, parts
    s2, s3, s4 = (w**2).sum(), (w**3).sum(), (w**4).sum()
    f = s2 - 2 * s3 + s2**2
    images = (w**2 * r**2).sum(-1) * s2 / f
    residual = np.einsum("g,...gk->...", w**2, e**2) * s2 / ((k - 1) * f) / k
    df_images = (g - 1) * s2**2 / (g * s4)
    df_residual = df_images * (k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = seeds / residual
    kept = ~(ratio <= stats.f.ppf(1 - SEED_POOL_LEVEL, k - 1, df_residual))  # a zero residual keeps it
    var = np.where(kept, images + seeds - residual, images)
    den = images**2 / df_images + np.where(kept, seeds**2 / (k - 1) + residual**2 / df_residual, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(den > 0, var**2 / den, np.inf)
    parts = {"images": images, "seeds": seeds, "residual": residual, "df": df, "seed_kept": kept}
    return mean, var, parts


def recon_score_ci(
    values: np.ndarray,
    images: Sequence[Hashable],
    *,
    level: float = CI_LEVEL,
    resamples: int = CI_RESAMPLES,
    rng_seed: int = CI_RNG_SEED,
) -> dict:
    """CI of the mean ReconScore of a (captions, seeds) matrix whose row i is a caption of `images[i]`; the mean
    is over every (caption, seed) cell.

    One seed: a percentile cluster bootstrap (recon_score.bootstrap) drawing distinct images with all their
    captions. K > 1 seeds: mean +/- t(df) * sqrt(variance) from `crossed_variance` of the image-by-seed means,
    each image weighted by its number of captions (the weights of the cell mean)."""
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
    out = {"mean": float(v.mean()), "level": level, "images": n, "seeds": k, "captions": int(v.shape[0])}
    if k == 1:
        return {**out, **_cluster_bootstrap(sums[:, 0], counts, level, resamples, rng_seed)}
    from scipy import stats

    _, var, parts = crossed_variance(sums / counts[:, None], counts / counts.sum())
    var, df = float(var), float(parts["df"])
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(var) if var > 0 else 0.0
    words = "images, seeds and residual" if n > 1 else "seeds only (one image: its variance is not estimable)"
    return {
        **out,
        "low": out["mean"] - half,
        "high": out["mean"] + half,
        "kind": "two-way random-effects t",
        "se": math.sqrt(max(var, 0.0)),
        "df": df,
        "variance": {name: float(parts[name]) for name in ("images", "seeds", "residual")},
        "seed_component_kept": bool(parts["seed_kept"]),
        "method": f"t interval, variance of the mean from a two-way random-effects decomposition ({words}) "
        "of the image-by-seed means, images weighted by their captions; Satterthwaite degrees of freedom",
    }


def _cluster_bootstrap(
    sums: np.ndarray, counts: np.ndarray, level: float, resamples: int, rng_seed: int
) -> dict:
    """One seed: draw the distinct images with replacement, each with all its captions."""
    n = len(counts)

    def mean_of_draw(clusters: np.ndarray) -> float:
        wg = np.bincount(clusters, minlength=n).astype(np.float64)
        return float(wg @ sums / (wg @ counts))

    lo, hi = percentile_interval(
        bootstrap_replicates(mean_of_draw, n, resamples=resamples, rng_seed=rng_seed), level
    )
    return {
        "low": lo,
        "high": hi,
        "kind": "bootstrap",
        "resamples": resamples,
        "rng_seed": rng_seed,
        "method": "percentile cluster bootstrap: images drawn with all their captions",
    }


def ci_heading(ci: dict) -> str:
    """What the interval is and what it is over, e.g. `95% bootstrap CI over 3 images x 1 seed (5 captions)`."""
    return f"{ci['level']:.0%} {ci.get('kind', 'bootstrap')} CI over {ci_label(ci)}"


def ci_label(ci: dict) -> str:
    """What the interval is over, e.g. `1 image x 3 seeds (3 captions)`."""

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    return f"{n(ci['images'], 'image')} x {n(ci['seeds'], 'seed')} ({n(ci['captions'], 'caption')})"


def format_ci(ci: dict, digits: int = 2) -> str:
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def ci_line(ci: dict) -> str:
    """The printed CI line. One image: no interval over images exists, so the line says what the interval is
    over (its seeds), or prints the mean alone where one value is all there is (1 image x 1 seed)."""
    line = f"ReconScore mean [{ci_heading(ci)}]: "
    if ci["images"] > 1:
        return line + format_ci(ci)
    if ci["seeds"] > 1:
        return line + format_ci(ci) + " (1 image: the CI is over its seeds only, not over images)"
    return line + f"{ci['mean']:.2f} (1 image, 1 seed: no interval)"


def seed_summary(records: Sequence[dict], seeds: Sequence[int]) -> dict:
    """run.json's multi-seed summary from finished score rows (those with every seed scored)."""
    done = [r for r in records if not r.get("error") and r.get("recon_score_per_seed")]
    out: dict = {"seeds": list(seeds), "rows_with_all_seeds": len(done)}
    if done:
        v = np.asarray([r["recon_score_per_seed"] for r in done], dtype=np.float64)
        out["recon_score_ci"] = recon_score_ci(v, [str(r.get("image")) for r in done])
        out["mean_within_row_std"] = float(v.std(axis=1, ddof=1).mean())
    return out
