"""`reconscore retrieve-eval` as a function: one composed retrieval method on a features bundle, summarised as
the flat report `--json` prints (fractions in [0, 1])."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from retrieval.errors import BundleError
from retrieval.methods import METHODS, build_method

KS = (1, 5, 10)
SUBSET_KS = (1, 2, 3)  # CIRR's Recall_subset@K


@dataclass
class BundleEvaluation:
    report: dict  # method, ap, averaging, config, tie_range, map_*, per_group, recall@K (+ recall_subset@K)
    summary: object  # retrieval.aggregate summary of AP (group counts, n_empty)
    notes: list[str]
    n_queries: int
    n_database: int
    subset_ks: tuple[int, ...] = ()


def with_protocol(protocol: dict, method: str, ap: str | None, sets: dict) -> tuple[str, dict, str | None]:
    """The AP variant (given, else the bundle's protocol, else non-interpolated), the method settings (the
    benchmark authors' setting from the protocol, e.g. i-CIR's rectified product, then --set) and a line saying
    which protocol applied (None when the bundle has none)."""
    ap = ap or protocol.get("ap", "non-interpolated")
    defaults = protocol.get("method_defaults", {})
    overrides = {**defaults.get(method, {}), **sets}
    if not protocol:
        return ap, overrides, None
    extra = f", {method} {overrides}" if method in defaults else ""
    return ap, overrides, f"protocol of the bundle ({protocol.get('benchmark', '?')}): AP {ap}{extra}"


def evaluate_bundle(
    path: Path,
    method: str,
    overrides: dict[str, str],
    *,
    ap: str | None = None,
    ties: str = "index",
    empty_positives: str = "zero",
    group_mean: str = "queries",
    recall: str = "hit",
    chunk_size: int | None = None,
    log: Callable[[str], None] = print,
) -> BundleEvaluation:
    from retrieval.bundle import load_bundle
    from retrieval.evaluate import evaluate
    from retrieval.report import averaging_title

    entry = METHODS[method]
    b = load_bundle(path)
    if group_mean == "subgroups" and b.data.query_subgroup is None:  # say it before any scoring
        raise BundleError(
            str(path),
            "query_subgroup",
            "is missing, and --group-mean subgroups averages each group over its subgroups",
            "Store query_subgroup (one string per query) in the bundle, or use --group-mean queries.",
        )
    ap, overrides, said = with_protocol(b.protocol or {}, method, ap, dict(overrides))
    if said:
        log(said)
    if method == "basic" and "contextualize" not in overrides:
        overrides["contextualize"] = "false"
        log(
            "basic: text contextualisation needs the text encoder, which a bundle does not have; using query_text "
            "as given (store contextualised text embeddings there to reproduce the full method)"
        )
    m = build_method(method, overrides)
    if not entry.runs_on_bundle:
        from retrieval.methods.base import Resources

        m.check(Resources())  # a bundle has no text encoder, captioner or checkpoint: say what is missing
    subset_ks = SUBSET_KS if b.data.subset is not None else ()
    res = evaluate(
        m, b.data, resources=b.resources, ap=ap, ks=KS, subset_ks=subset_ks, ties=ties, chunk_size=chunk_size
    )
    summary = res.summary(b.data, "ap", empty_positives=empty_positives, group_mean=group_mean)
    report = {
        "method": method,
        "ap": ap,
        "averaging": averaging_title(group_mean, empty_positives),
        "config": res.config,
        "tie_range": res.tie_range(b.data, empty_positives=empty_positives, group_mean=group_mean),
        "map_overall": summary.overall,
        "map_macro": summary.macro,
        "min_map_macro": summary.min_macro,  # i-CIR's minmAP: mean over groups of the lowest AP
        "per_group": summary.per_group,
    }
    name = "hit" if recall == "hit" else "recall"
    for k in KS:
        report[f"recall@{k}"] = res.summary(b.data, f"{name}@{k}", empty_positives=empty_positives).overall
    for k in subset_ks:  # CIRR's Recall_subset@K, when the bundle has subsets
        report[f"recall_subset@{k}"] = res.summary(
            b.data, f"subset_hit@{k}", empty_positives=empty_positives
        ).overall
    return BundleEvaluation(
        report, summary, list(res.notes), b.data.n_queries, b.data.n_database, tuple(subset_ks)
    )
