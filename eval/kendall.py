"""Kendall τ of caption metrics with human judgments: the CLIPScore protocol (Hessel et al. 2021, section 4 and
appendix A), every (image, candidate, judgment) row one observation, both sides oriented so a positive τ means
agreement with people. See docs/correlate.md, "Protocol and outputs"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from eval.preferences import TauVariant
from preference_data import higher_is_better

STATISTICS = ("tau_b", "tau_c", "pairwise_acc")  # each with its bootstrap CI, `<stat>_low` and `<stat>_high`
CORRELATION_COLUMNS = ("metric", *(f"{s}{x}" for s in STATISTICS for x in ("", "_low", "_high")), "n", "note")


@dataclass
class Flattened:
    """Aligned arrays over the usable rows (metric and judgment both finite)."""

    rows: np.ndarray  # indices into the preference table
    human: np.ndarray  # oriented judgment: larger = better
    metric: np.ndarray  # oriented metric score: larger = better
    image: np.ndarray  # image group code per row
    candidate: np.ndarray  # candidate code per row (same text of the same image = same code)

    def __len__(self) -> int:
        return len(self.rows)


def oriented_judgments(table: pd.DataFrame) -> np.ndarray:
    """Human judgments with larger = better (ranks negated)."""
    sign = table["judgment_kind"].map(lambda k: 1.0 if higher_is_better(k) else -1.0).to_numpy(dtype=float)
    return sign * table["judgment"].to_numpy(dtype=float)


def flatten(table: pd.DataFrame, scores, *, metric_higher_is_better: bool = True) -> Flattened:
    """The one flattening routine: one observation per judgment row of `table` (the tidy preference table),
    paired with that row's metric score; rows where either is NaN are dropped."""
    scores = np.asarray(scores, dtype=float)
    if len(scores) != len(table):
        raise ValueError(f"{len(scores)} metric scores for {len(table)} judgment rows")
    human = oriented_judgments(table)
    metric = scores if metric_higher_is_better else -scores
    keep = np.flatnonzero(np.isfinite(human) & np.isfinite(metric))
    image = pd.factorize(table["image"].to_numpy()[keep])[0]
    pair = (
        table["image"].astype(str).to_numpy()[keep] + "\x00" + table["candidate"].astype(str).to_numpy()[keep]
    )
    candidate = pd.factorize(pair)[0]
    return Flattened(rows=keep, human=human[keep], metric=metric[keep], image=image, candidate=candidate)


def kendall(metric, human, variant: TauVariant | str) -> float:
    """Kendall τ (variant b or c) x 100; NaN when either side is constant or fewer than 2 rows."""
    variant = TauVariant(variant)
    x, y = np.asarray(metric, dtype=float), np.asarray(human, dtype=float)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return 100.0 * float(kendalltau(x, y, variant=variant.value).statistic)


def tau_nan_reason(metric, human, *, shown_metric=None, shown_human=None) -> str | None:
    """Why Kendall τ is undefined (NaN) for these rows, in words; None when it is defined. `shown_*` are the
    values as the user wrote them (before orientation: a rank of 1 is shown as 1, not -1)."""
    x, y = np.asarray(metric, dtype=float), np.asarray(human, dtype=float)
    sx = x if shown_metric is None else np.asarray(shown_metric, dtype=float)
    sy = y if shown_human is None else np.asarray(shown_human, dtype=float)
    if len(x) < 2:
        return f"tau is NaN: {len(x)} usable row(s), it needs at least 2"
    if np.all(y == y[0]):
        return f"tau is NaN: every human judgment is the same ({sy[0]:g}), so there is no order to agree with"
    if np.all(x == x[0]):
        return f"tau is NaN: the metric gives every row the same score ({sx[0]:g})"
    return None


def _groups(image: np.ndarray) -> list[np.ndarray]:
    """Row indices of each image group."""
    if not len(image):
        return []
    order = np.argsort(image, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(image[order])) + 1)


def _pair_counts(flat: Flattened, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per image group: (agreeing pairs, a metric tie counting one half; pairs people order strictly)."""
    agree, total = np.zeros(len(groups)), np.zeros(len(groups))
    for g, idx in enumerate(groups):
        i, j = np.triu_indices(len(idx), k=1)
        a, b = idx[i], idx[j]
        dh = np.sign(flat.human[a] - flat.human[b])
        usable = (dh != 0) & (flat.candidate[a] != flat.candidate[b])
        dm = np.sign(flat.metric[a[usable]] - flat.metric[b[usable]])
        agree[g] = float(np.sum(dm == dh[usable])) + 0.5 * float(np.sum(dm == 0))
        total[g] = float(usable.sum())
    return agree, total


def _ratio(agree: np.ndarray, total: np.ndarray) -> float:
    n = total.sum()
    return float(agree.sum() / n) if n else float("nan")


def pairwise_accuracy(flat: Flattened) -> float:
    """Share of within-image pairs of different candidates that people order strictly, which the metric orders
    the same way (a metric tie counts one half). NaN when there is no such pair."""
    return _ratio(*_pair_counts(flat, _groups(flat.image)))


def correlation_cis(
    flat: Flattened, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CI of each of STATISTICS, resampling images with replacement (all rows of a drawn
    image come along: judgments of one image are not independent; recon_score.bootstrap). The same seed gives
    every statistic the same draws. A drawn image's pairs count once per draw (pairs never span two draws)."""
    from recon_score.bootstrap import bootstrap_ci

    groups = _groups(flat.image)
    if len(groups) < 2 or n_boot < 1:
        return {s: (float("nan"), float("nan")) for s in STATISTICS}
    agree, total = _pair_counts(flat, groups)

    def tau(variant: TauVariant):
        def statistic(drawn: np.ndarray) -> float:
            rows = np.concatenate([groups[g] for g in drawn])
            return kendall(flat.metric[rows], flat.human[rows], variant)

        return statistic

    statistics = {
        "tau_b": tau(TauVariant.B),
        "tau_c": tau(TauVariant.C),
        "pairwise_acc": lambda drawn: _ratio(agree[drawn], total[drawn]),
    }
    return {
        name: bootstrap_ci(f, len(groups), level=level, resamples=n_boot, rng_seed=seed)
        for name, f in statistics.items()
    }


def correlate(
    table: pd.DataFrame,
    scores: dict[str, np.ndarray],
    *,
    higher_is_better_by_metric: dict[str, bool] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per metric: tau_b, tau_c (x100) and pairwise_acc, each with its bootstrap CI, and n rows used."""
    out = []
    for name, values in scores.items():
        hib = (higher_is_better_by_metric or {}).get(name, True)
        flat = flatten(table, values, metric_higher_is_better=hib)
        point = {
            "tau_b": kendall(flat.metric, flat.human, TauVariant.B),
            "tau_c": kendall(flat.metric, flat.human, TauVariant.C),
            "pairwise_acc": pairwise_accuracy(flat),
        }
        row = {"metric": name}
        for stat, (lo, hi) in correlation_cis(flat, n_boot=n_boot, seed=seed).items():
            row.update({stat: point[stat], f"{stat}_low": lo, f"{stat}_high": hi})
        shown = {  # the note quotes values as written (a rank 1, not its oriented -1)
            "shown_metric": np.asarray(values, dtype=float)[flat.rows],
            "shown_human": table["judgment"].to_numpy(dtype=float)[flat.rows],
        }
        note = tau_nan_reason(flat.metric, flat.human, **shown)
        out.append({**row, "n": len(flat), "note": note or ""})
    return pd.DataFrame(out, columns=list(CORRELATION_COLUMNS))
