"""From validated exports to the collected set: unblinding (labels -> the study's candidates -> their models), the
consensus ranking, agreement, the contested images, and the ReconScore paper's summaries: each model's win share
(its Table 6) and the preference rate of metric-selected captions (its Table 7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from preference_data.annotate.agreement import CI, Agreement, agreement, complete_rows
from preference_data.annotate.exports import Export
from preference_data.annotate.study import LABELS, Item
from preference_data.schema import PreferenceFormatError, normalize_space

CONSENSUS_RATER = "consensus"

# rule name -> (the per-candidate statistic over annotators' ranks, what the record says)
CONSENSUS_RULES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "mean-rank": (
        lambda r: np.nanmean(r, axis=0),
        "mean of the annotators' ranks per candidate, ranked again (ties share the best rank)",
    ),
    "median-rank": (
        lambda r: np.nanmedian(r, axis=0),
        "median of the annotators' ranks per candidate, ranked again (ties share the best rank)",
    ),
}


def unblind(ex: Export, orders: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """item -> ranks in the study's candidate order (the table's), from an export's ranks by label;
    `orders[item][pos]` is the candidate shown under label LABELS[pos]."""
    out = {}
    for item, ranks in ex.ranks.items():
        r = np.empty(len(ranks))
        for pos, j in enumerate(orders[item]):
            r[j] = ranks[LABELS[pos]]
        out[item] = r
    return out


def consensus(stack: np.ndarray, rule: str) -> np.ndarray:
    """Consensus ranks (1 = best) of one image from its annotators' ranks (m, n), NaN rows ignored."""
    stat, _ = CONSENSUS_RULES[rule]
    return rankdata(stat(stack), method="min")


@dataclass
class Collected:
    items: list[Item]
    annotators: list[str]
    by_annotator: dict[str, dict[str, np.ndarray]]  # annotator -> item -> ranks (table order)
    final: dict[str, np.ndarray]  # item -> consensus ranks
    settled: list[str]  # items the consensus pass decided
    agreement: list[Agreement]
    per_image: list[dict]
    contested: list[str]


def collect(
    items: list[Item],
    annotators: list[str],
    main: dict[str, dict[str, np.ndarray]],
    settled: dict[str, np.ndarray],
    *,
    rule: str,
    ci: CI,
    contested_below: float,
) -> Collected:
    """Agreement over the main round's annotators; the consensus of each image by `rule`, except where the
    consensus pass (`settled`: item -> ranks) has the final word. Contested: the annotators disagree on the best
    candidate, or Kendall's W is below `contested_below`."""
    stacks = []
    for it in items:
        rows = [main.get(a, {}).get(it.id, np.full(len(it.candidates), np.nan)) for a in annotators]
        stacks.append(np.vstack(rows))
    table, per_image = agreement(stacks, ci)
    final, contested = {}, []
    for it, stack, row in zip(items, stacks, per_image):
        ranked = complete_rows(stack)
        row.update(item=it.id, image=it.image, contested=False, reason="")
        if len(ranked):
            final[it.id] = consensus(ranked, rule)
        tops = {tuple(np.flatnonzero(r == r.min())) for r in ranked}
        if len(ranked) >= 2 and (len(tops) > 1 or row["kendall_w"] < contested_below):
            why = "annotators chose different best captions" if len(tops) > 1 else f"W < {contested_below:g}"
            row.update(contested=True, reason=why)
            contested.append(it.id)
        if it.id in settled:
            final[it.id] = settled[it.id]
            row["reason"] = (row["reason"] + "; " if row["reason"] else "") + "settled by the consensus pass"
    contested.sort(key=lambda i: next(r["kendall_w"] for r in per_image if r["item"] == i))
    return Collected(items, annotators, main, final, sorted(settled), table, per_image, contested)


def ranking_lines(items: list[Item], ranks: dict[str, np.ndarray], rater: str) -> list[dict]:
    """One line per ranked image in the `ranking` format `reconscore correlate --format ranking` reads."""
    out = []
    for it in items:
        if it.id not in ranks:
            continue
        cands = [
            {"caption": c, "rank": int(r), "model": m}
            for c, r, m in zip(it.candidates, ranks[it.id], it.models)
        ]
        out.append(
            {"image": it.image, "references": list(it.references), "rater": rater, "candidates": cands}
        )
    return out


def win_shares(items: list[Item], final: dict[str, np.ndarray]) -> list[dict]:
    """Each model's wins (the ReconScore paper, Table 6): images where the consensus ranks its caption first (a
    tie for first splits the win), the images it was shown on, and wins / shown and wins / images."""
    shown: dict[str, int] = {}
    wins: dict[str, float] = {}
    images = 0
    for it in items:
        if it.id not in final:
            continue
        images += 1
        r = final[it.id]
        best = np.flatnonzero(r == r.min())
        for j, model in enumerate(it.models):
            shown[model] = shown.get(model, 0) + 1
            wins[model] = wins.get(model, 0.0) + (1.0 / len(best) if j in best else 0.0)
    return [
        {
            "model": m,
            "wins": wins[m],
            "shown": shown[m],
            "win_rate": wins[m] / shown[m],
            "share_of_images": wins[m] / images,
        }
        for m in sorted(shown, key=lambda m: (-wins[m], m))
    ]


def preference_rates(
    items: list[Item], final: dict[str, np.ndarray], selections: list[tuple[str, str, str, str]]
) -> list[dict]:
    """The preference rate of metric-selected captions (the ReconScore paper, Table 7): for each metric, its mean
    credit over images, an image's credit the share of the consensus's first places held by the selected text
    (1 when it alone is first; 1/k when it is one of k captions tied for first, as a tie splits a win share; two
    candidates of the same text both count as the selection). `selections`: (metric, image, caption,
    file:line); a caption that is not one of the image's candidates is refused naming its line."""
    by_image = {it.image: it for it in items}
    hits: dict[str, list[float]] = {}
    for metric, image, caption, where in selections:
        it = by_image.get(image)
        if it is None:
            raise PreferenceFormatError(where, None, f"image {image!r} is not in the study")
        caption = normalize_space(caption)
        if caption not in it.candidates:
            raise PreferenceFormatError(
                where, None, f"the caption selected for {image!r} is not one of its candidates"
            )
        if it.id not in final:
            continue
        r = final[it.id]
        first = np.flatnonzero(r == r.min())
        held = sum(it.candidates[j] == caption for j in first)
        hits.setdefault(metric, []).append(held / len(first))
    return [
        {"metric": m, "images": len(h), "preferred": float(sum(h)), "rate": float(np.mean(h))}
        for m, h in hits.items()
    ]
