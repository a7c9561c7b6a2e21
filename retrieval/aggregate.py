"""Per-query metrics -> mAP overall, macro over groups (mean of the group means), min_macro (i-CIR's minmAP) and per
group, under the seeds' averaging rules (`group_mean`) and an explicit `empty_positives` rule. See
docs/retrieval.md, "Variants and their sources" and "Metrics"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from recon_score.errors import InputError
from retrieval.choices import EMPTY_ACTIONS, GROUP_MEANS, check_choice
from retrieval.errors import EmptyPositivesError


@dataclass
class Summary:
    overall: float
    macro: float
    per_group: dict[str, float]
    group_counts: dict[str, int] = field(default_factory=dict)
    n_queries: int = 0
    n_empty: int = 0  # queries without positives (counted as 0, skipped, or refused per empty_positives)
    min_macro: float = float("nan")  # mean over groups of each group's minimum (i-CIR's minmAP)


def apply_empty_action(values: np.ndarray, empty_positives: str, *, what: str = "metric") -> np.ndarray:
    """Values with NaN (queries without positives) replaced by 0 (``zero``), kept as NaN to be skipped
    (``skip``), or refused (``error``)."""
    check_choice("empty_positives", empty_positives, EMPTY_ACTIONS)
    values = np.asarray(values, dtype=np.float64)
    empty = np.isnan(values)
    if empty.any() and empty_positives == "error":
        first = np.flatnonzero(empty)[:5].tolist()
        raise EmptyPositivesError(
            f"{int(empty.sum())} of {len(values)} queries have no positive, so their {what} is undefined "
            f"(first query indices: {first}). Fix the positives, or choose empty_positives='zero' (count them "
            "as 0, as the authors' code does) or 'skip'."
        )
    return np.where(empty, 0.0, values) if empty_positives == "zero" else values


def _ordered(names: Sequence[str], order: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(names))
    if not order:
        return seen
    first = [g for g in order if g in set(seen)]
    return first + [g for g in seen if g not in set(first)]


def _nanmean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def summarize(
    values: np.ndarray,
    groups: Sequence[str],
    *,
    subgroups: Sequence[str] | None = None,
    empty_positives: str = "zero",
    group_mean: str = "queries",
    order: Sequence[str] | None = None,
    what: str = "metric",
) -> Summary:
    """Overall, macro and per-group means of one per-query metric (NaN: no positives), one group (and optionally
    subgroup) per query; `order` is the preferred group order of `per_group` (the seed table's columns)."""
    check_choice("group_mean", group_mean, GROUP_MEANS)
    raw = np.asarray(values, dtype=np.float64)
    if len(groups) != len(raw):
        raise ValueError(f"expected one group per query ({len(raw)}), got {len(groups)}")
    if group_mean == "subgroups" and (subgroups is None or len(subgroups) != len(raw)):
        given = "none" if subgroups is None else f"{len(subgroups)}"
        raise InputError(
            f"group_mean='subgroups' needs one subgroup per query ({len(raw)}), got {given}; "
            "give the queries subgroups or average each group over its queries (group_mean='queries')"
        )
    vals = apply_empty_action(raw, empty_positives, what=what)
    groups_arr = np.asarray(groups, dtype=object)
    sub_arr = np.asarray(subgroups, dtype=object) if subgroups is not None else None

    per_group, counts, minima = {}, {}, []
    for g in _ordered(list(groups_arr), order):
        mask = groups_arr == g
        counts[str(g)] = int(mask.sum())
        kept = vals[mask][~np.isnan(vals[mask])]
        minima.append(float(kept.min()) if kept.size else float("nan"))
        if group_mean == "subgroups":
            subs = [_nanmean(vals[mask & (sub_arr == s)]) for s in dict.fromkeys(sub_arr[mask])]
            per_group[str(g)] = _nanmean(np.asarray(subs))
        else:
            per_group[str(g)] = _nanmean(vals[mask])
    macro = _nanmean(np.asarray(list(per_group.values()), dtype=np.float64))
    return Summary(
        overall=_nanmean(vals),
        macro=macro,
        per_group=per_group,
        group_counts=counts,
        n_queries=len(raw),
        n_empty=int(np.isnan(raw).sum()),
        min_macro=_nanmean(np.asarray(minima, dtype=np.float64)),
    )
