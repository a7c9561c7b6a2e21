"""Seeds: their derivation, and the confidence interval of a mean ReconScore over images and T2I seeds.

Why a two-way random-effects t interval and not a bootstrap: docs/seeds.md, "System CI".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Hashable, Sequence

import numpy as np

from recon_score.bootstrap import CI_LEVEL, SMALL_SAMPLE_DF, t_interval


def derive_seed(*parts: object, bits: int = 60) -> int:
    """A `bits`-bit seed hashed from `parts` (the run's seed and content such as image digests). Content-derived, so
    it never depends on which other items were in the run, their order, or where a resumed run restarted."""
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
RECON_SCORE_RANGE = (0.0, 100.0)  # recon_score_from_cosine's range: 100 * (1 + cos) / 2 with cos in [-1, 1]


def crossed_variance(z: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Variance of the weighted mean of an (images, seeds) table of image-by-seed means, its Satterthwaite degrees
    of freedom and its parts; leading axes are independent tables (vectorised). Model z_gj = mu + A_g + B_j +
    E_gj, all random, estimated by moments (docs/seeds.md, "System CI"). One seed: the image term alone (the
    mean at that seed); one image: the seed term alone (NaN with one seed as well)."""
    from scipy import stats

    z = np.asarray(z, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    g, k = z.shape[-2:]
    zg = z.mean(-1)
    cols = np.einsum("g,...gk->...k", w, z)
    mean = zg @ w
    r, c = zg - mean[..., None], cols - mean[..., None]
    e = z - zg[..., None] - cols[..., None, :] + mean[..., None, None]
    zero = np.zeros_like(mean)
    if g == 1:
        seeds = (c**2).sum(-1) / (k * (k - 1)) if k > 1 else zero + np.nan
        parts = {"images": zero, "seeds": seeds, "residual": zero, "df": zero + k - 1, "seed_kept": zero == 0}
        return mean, seeds, parts
    s2, s3, s4 = (w**2).sum(), (w**3).sum(), (w**4).sum()
    f = s2 - 2 * s3 + s2**2  # s2 / f makes the weighted spreads unbiased under constant variances
    images = (w**2 * r**2).sum(-1) * s2 / f
    df_images = (g - 1) * s2**2 / (g * s4)
    if k == 1:
        parts = {
            "images": images,
            "seeds": zero,
            "residual": zero,
            "df": zero + df_images,
            "seed_kept": zero != 0,
        }
        return mean, images, parts
    seeds = (c**2).sum(-1) / (k * (k - 1))
    residual = np.einsum("g,...gk->...", w**2, e**2) * s2 / ((k - 1) * f) / k
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
    value_range: tuple[float, float] | None = RECON_SCORE_RANGE,
) -> dict:
    """CI of the mean ReconScore of a (captions, seeds) matrix whose row i is a caption of `images[i]`, over every
    (caption, seed) cell: a t interval from `crossed_variance`, images weighted by their captions, clipped to
    `value_range` (None: unclipped). One image with one seed has no interval (`low`/`high` None)."""
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
    out["kind"] = "two-way random-effects t" if k > 1 else "t"
    if n == 1 and k == 1:
        return {**out, "low": None, "high": None, "method": "one image with one seed: no interval"}
    _, var, parts = crossed_variance(sums / counts[:, None], counts / counts.sum())
    var, df = float(var), float(parts["df"])
    raw = tuple(map(float, t_interval(out["mean"], var, df, level=level)))
    low, high = map(float, t_interval(out["mean"], var, df, level=level, value_range=value_range))
    out |= {"low": low, "high": high, "se": math.sqrt(max(var, 0.0)), "df": df}
    out |= {"range": None if value_range is None else list(value_range), "clipped": (low, high) != raw}
    if k == 1:
        out["variance"] = {"images": var}
        return out | {
            "method": "t interval over images: variance of the caption-weighted mean of the image means, "
            "Satterthwaite degrees of freedom; one seed, so the interval is for the mean at that seed",
        }
    words = "images, seeds and residual" if n > 1 else "seeds only (one image: its variance is not estimable)"
    return out | {
        "variance": {name: float(parts[name]) for name in ("images", "seeds", "residual")},
        "seed_component_kept": bool(parts["seed_kept"]),
        "method": f"t interval, variance of the mean from a two-way random-effects decomposition ({words}) "
        "of the image-by-seed means, images weighted by their captions; Satterthwaite degrees of freedom",
    }


def ci_heading(ci: dict) -> str:
    """What the interval is and what it is over, e.g. `95% t CI over 3 images x 1 seed (5 captions)`."""
    return f"{ci['level']:.0%} {ci['kind']} CI over {ci_label(ci)}"


def ci_label(ci: dict) -> str:
    """What the interval is over, e.g. `1 image x 3 seeds (3 captions)`."""

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    return f"{n(ci['images'], 'image')} x {n(ci['seeds'], 'seed')} ({n(ci['captions'], 'caption')})"


def format_ci(ci: dict, digits: int = 2) -> str:
    if ci["low"] is None:
        return f"{ci['mean']:.{digits}f} (no interval)"
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def ci_notes(ci: dict) -> list[str]:
    """What a reader must know to read the interval, in words: over seeds only (one image), clipped to the
    score's range, or resting on too few degrees of freedom to mean much (recon_score.bootstrap.SMALL_SAMPLE_DF)."""
    if ci["low"] is None:
        return ["1 image, 1 seed: no interval"]
    notes = ["1 image: the CI is over its seeds only, not over images"] if ci["images"] == 1 else []
    if ci.get("clipped"):
        lo, hi = ci["range"]
        notes.append(f"clipped to the score's range {lo:g}-{hi:g}")
    if ci["df"] < SMALL_SAMPLE_DF:
        notes.append(
            f"too few to mean much: {ci['df']:.1f} degrees of freedom, fewer than {SMALL_SAMPLE_DF:g}, "
            "so add images or seeds"
        )
    return notes


def ci_text(ci: dict, digits: int = 2) -> str:
    """The interval with its notes in words, for a table cell or a card: `98.52 [90.71, 100.00] (clipped ...)`."""
    notes = ci_notes(ci) if ci["low"] is not None else []
    return format_ci(ci, digits) + (f" ({'; '.join(notes)})" if notes else "")


def ci_line(ci: dict) -> str:
    """The printed CI line, with its notes (ci_notes). One image with one seed: the mean alone, no interval."""
    if ci["low"] is None:
        return f"ReconScore mean over {ci_label(ci)}: {ci['mean']:.2f} ({ci_notes(ci)[0]})"
    return f"ReconScore mean [{ci_heading(ci)}]: {ci_text(ci)}"


def seed_summary(records: Sequence[dict], seeds: Sequence[int]) -> dict:
    """run.json's multi-seed summary from finished score rows (those with every seed scored)."""
    done = [r for r in records if not r.get("error") and r.get("recon_score_per_seed")]
    out: dict = {"seeds": list(seeds), "rows_with_all_seeds": len(done)}
    if done:
        v = np.asarray([r["recon_score_per_seed"] for r in done], dtype=np.float64)
        out["recon_score_ci"] = recon_score_ci(v, [str(r.get("image")) for r in done])
        out["mean_within_row_std"] = float(v.std(axis=1, ddof=1).mean())
    return out
