"""The statistics of the meta-evaluation table, each with its 95% CI (recon_score.bootstrap, over images):
Kendall tau-b and tau-c (eval.kendall, the CLIPScore protocol) and pairwise accuracy per category, all x 100."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval.kendall import correlate

MEAN = "mean"  # the category of PASCAL-50S's mean over HC, HI, HM, MM


def kendall_rows(
    table: pd.DataFrame, scores, *, higher_is_better: bool, n_boot: int, seed: int
) -> list[dict]:
    """tau_b and tau_c rows, per `category` where the table has one (LongCap-Arena's perspectives)."""
    scores = np.asarray(scores, dtype=float)
    parts = [("", np.arange(len(table)))]
    if "category" in table.columns:
        cats = table["category"].to_numpy()
        parts = [(c, np.flatnonzero(cats == c)) for c in dict.fromkeys(cats)]
    rows = []
    for cat, idx in parts:
        sub = table.iloc[idx].reset_index(drop=True)
        res = correlate(
            sub,
            {"m": scores[idx]},
            higher_is_better_by_metric={"m": higher_is_better},
            n_boot=n_boot,
            seed=seed,
        ).iloc[0]
        for stat in ("tau_b", "tau_c"):
            rows.append(
                {
                    "category": cat,
                    "statistic": stat,
                    "value": float(res[stat]),
                    "ci_low": float(res[f"{stat}_low"]),
                    "ci_high": float(res[f"{stat}_high"]),
                    "n": int(res["n"]),
                    "note": res["note"],
                }
            )
    return rows


def pair_outcomes(table: pd.DataFrame, scores, *, higher_is_better: bool) -> pd.DataFrame:
    """One row per pair: image, category, and `correct` = share of its reference draws in which the caption
    people preferred scores strictly higher than the other (a tie is not correct: FOIL's rule, also used for
    PASCAL-50S). Pairs with an unscored caption are dropped."""
    s = np.asarray(scores, dtype=float) * (1.0 if higher_is_better else -1.0)
    df = pd.DataFrame(
        {
            "pair": table["pair"].to_numpy(),
            "draw": table["draw"].to_numpy(),
            "image": table["image"].to_numpy(),
            "category": table["category"].to_numpy(),
            "preferred": table["judgment"].to_numpy() > 0.5,
            "score": s,
        }
    )
    df = df[np.isfinite(df["score"])]
    good = df[df["preferred"]].set_index(["pair", "draw"])
    bad = df[~df["preferred"]].set_index(["pair", "draw"])
    both = good.join(bad[["score"]].rename(columns={"score": "score_other"}), how="inner")
    both["correct"] = (both["score"] > both["score_other"]).astype(float)
    per_pair = both.groupby(level="pair").agg(
        image=("image", "first"), category=("category", "first"), correct=("correct", "mean")
    )
    return per_pair.reset_index()


def pairwise_rows(
    table: pd.DataFrame, scores, *, higher_is_better: bool, n_boot: int, seed: int
) -> list[dict]:
    """Accuracy x 100 per category and, with several categories, their mean; the CI resamples images."""
    from recon_score.bootstrap import bootstrap_ci

    pairs = pair_outcomes(table, scores, higher_is_better=higher_is_better)
    cats = list(dict.fromkeys(table["category"]))
    if pairs.empty:
        return [_nan_row(c, "no pair has both captions scored") for c in cats]
    image = pd.factorize(pairs["image"])[0]
    cat = pd.Categorical(pairs["category"], categories=cats).codes
    n_img, n_cat = image.max() + 1, len(cats)
    sums, counts = np.zeros((n_img, n_cat)), np.zeros((n_img, n_cat))
    np.add.at(sums, (image, cat), pairs["correct"].to_numpy())
    np.add.at(counts, (image, cat), 1.0)

    def accuracy(drawn: np.ndarray | None) -> np.ndarray:
        s, c = (sums, counts) if drawn is None else (sums[drawn], counts[drawn])
        tot = c.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = 100.0 * s.sum(axis=0) / tot
        return np.append(acc, acc.mean()) if n_cat > 1 else acc

    point = accuracy(None)
    names = cats + ([MEAN] if n_cat > 1 else [])
    n = list(counts.sum(axis=0).astype(int)) + ([int(counts.sum())] if n_cat > 1 else [])
    rows = []
    for k, name in enumerate(names):
        lo, hi = (float("nan"), float("nan"))
        if n_boot > 0 and n_img > 1:
            lo, hi = bootstrap_ci(
                lambda d, k=k: float(accuracy(d)[k]), n_img, resamples=n_boot, rng_seed=seed
            )
        rows.append(
            {
                "category": name,
                "statistic": "accuracy",
                "value": float(point[k]),
                "ci_low": lo,
                "ci_high": hi,
                "n": n[k],
                "note": "",
            }
        )
    return rows


def _nan_row(category: str, note: str) -> dict:
    nan = float("nan")
    return {
        "category": category,
        "statistic": "accuracy",
        "value": nan,
        "ci_low": nan,
        "ci_high": nan,
        "n": 0,
        "note": note,
    }
