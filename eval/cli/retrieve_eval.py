"""`reconscore retrieve-eval`: score a composed retrieval method on a features bundle (.npz), no model needed."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

# Kept in sync with retrieval.metrics / retrieval.aggregate (not imported here: --help must not load torch).
AP_CHOICES = ("non-interpolated", "trapezoidal", "trapezoidal-eps")
TIES_CHOICES = ("index", "pessimistic", "optimistic")
EMPTY_CHOICES = ("zero", "skip", "error")
GROUP_MEAN_CHOICES = ("queries", "subgroups")
BUNDLE_METHODS = ("text", "image", "sum", "product", "weicom", "basic")
KS = (1, 5, 10)
SUBSET_KS = (1, 2, 3)  # CIRR's Recall_subset@K


def parse_sets(values: tuple[str, ...], method: str) -> dict[str, str]:
    """KEY=VALUE (or METHOD.KEY=VALUE) pairs."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        prefix, dot, rest = key.partition(".")
        if dot:
            if prefix != method:
                raise click.BadParameter(
                    f"{item!r} is for method {prefix!r}, not {method!r}", param_hint="--set"
                )
            key = rest
        out[key.strip()] = value.strip()
    return out


def _with_protocol(protocol: dict, method: str, ap: str | None, sets: dict) -> tuple[str, dict]:
    """The AP variant (--ap, else the bundle's protocol, else non-interpolated) and the method settings (the
    benchmark authors' setting from the protocol, e.g. i-CIR's rectified product, then --set)."""
    ap = ap or protocol.get("ap", "non-interpolated")
    defaults = protocol.get("method_defaults", {})
    overrides = {**defaults.get(method, {}), **sets}
    if protocol:
        extra = f", {method} {overrides}" if method in defaults else ""
        click.echo(f"protocol of the bundle ({protocol.get('benchmark', '?')}): AP {ap}{extra}", err=True)
    return ap, overrides


def _print_report(report: dict, summary, notes: list[str], title: str, data, subset_ks) -> None:
    """The human-readable summary: mAP (named variant and averaging), per group, recalls, notes."""
    from retrieval.report import AP_TITLES

    click.echo(f"{title} ({data.n_queries} queries, {data.n_database} database items)")
    click.echo(
        f"  mAP ({AP_TITLES[report['ap']]}): overall {summary.overall:.4f}, macro {summary.macro:.4f}, "
        f"min-macro {summary.min_macro:.4f}"
    )
    click.echo(f"  ({report['averaging']})")
    for g, v in summary.per_group.items():
        click.echo(f"    {g}: {v:.4f} ({summary.group_counts[g]} queries)")
    click.echo("  " + ", ".join(f"recall@{k} {report[f'recall@{k}']:.4f}" for k in KS))
    if subset_ks:
        click.echo(
            "  " + ", ".join(f"recall_subset@{k} {report[f'recall_subset@{k}']:.4f}" for k in subset_ks)
        )
    for note in notes:
        click.echo(f"  note: {note}")


def _nan_to_none(obj):
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    return None if isinstance(obj, float) and math.isnan(obj) else obj


@click.command(
    "retrieve-eval",
    epilog="""\b
Examples:
  reconscore retrieve-eval --bundle feats.npz --method weicom --lambda 0.5 --json
  reconscore retrieve-eval --bundle icir.npz --method basic --ap trapezoidal --set query_expansion=false
\b
The bundle holds query_image [Q,D], query_text [Q,D], database [N,D] (float32, L2-normalised rows), positives
int [P,2] (query index, database index), query_group str [Q]; optional query_subgroup [Q], database_group [N] +
query_db_group [Q] (a query ranks only its group's database, as in i-CIR), corpus_pos, corpus_neg, image_mean,
text_mean, norm_image, norm_text (BASIC), exclude int [E,2], subset int [S,2], query_id [Q]. Values are
fractions in [0, 1]. --json prints {"method", "ap", "averaging", "config", "tie_range", "map_overall", "map_macro",
"min_map_macro", "per_group", "recall@1", "recall@5", "recall@10"}, plus "recall_subset@1/2/3" when the bundle has subsets (CIRR).
freedom and cirevl encode new texts per query: they need `reconscore retrieve` with an encoder.""",
)
@click.option(
    "--bundle", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Features bundle (.npz)."
)
@click.option("--method", required=True, help=f"{' | '.join(BUNDLE_METHODS)}.")
@click.option(
    "--lambda",
    "lam",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="WeiCom's modality weight (default 0.5).",
)
@click.option(
    "--ap",
    "ap_variant",
    type=click.Choice(AP_CHOICES),
    default=None,
    help="AP variant: rscir (PatternCom, xView2-CIR) or trapezoidal (i-CIR, FreeDom). Default: the bundle's "
    "protocol (written by `retrieve --save-bundle`), else non-interpolated.",
)
@click.option(
    "--ties", type=click.Choice(TIES_CHOICES), default="index", show_default=True, help="Tie-breaking rule."
)
@click.option(
    "--empty-positives",
    type=click.Choice(EMPTY_CHOICES),
    default="zero",
    show_default=True,
    help="What a query without positives adds to the means.",
)
@click.option(
    "--group-mean",
    type=click.Choice(GROUP_MEAN_CHOICES),
    default="queries",
    show_default=True,
    help="A group's mean over its queries (rscir) or over its subgroups' means.",
)
@click.option(
    "--recall",
    type=click.Choice(["hit", "fraction"]),
    default="hit",
    show_default=True,
    help="recall@K: any positive in the top K (CIRR/FashionIQ/EDIR), or the fraction of positives (rscir).",
)
@click.option("--set", "sets", multiple=True, help="Hyperparameter KEY=VALUE of the method (repeatable).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Queries scored at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    bundle, method, lam, ap_variant, ties, empty_positives, group_mean, recall, sets, chunk_size, as_json
) -> int:
    """Evaluate one composed retrieval method on your own embeddings (a .npz bundle)."""
    from retrieval.bundle import load_bundle
    from retrieval.evaluate import evaluate, tie_message
    from retrieval.methods import METHODS, build_method
    from retrieval.report import averaging_title

    if method not in METHODS:
        raise click.BadParameter(
            f"unknown method {method!r}; known: {', '.join(METHODS)}", param_hint="--method"
        )
    b = load_bundle(bundle)
    ap_variant, overrides = _with_protocol(b.protocol or {}, method, ap_variant, parse_sets(sets, method))
    if lam is not None:
        if method != "weicom":
            raise click.BadParameter(
                "--lambda is WeiCom's weight; use --set harris_lambda=X for BASIC", param_hint="--lambda"
            )
        overrides["lam"] = str(lam)
    if method == "basic" and "contextualize" not in overrides:
        overrides["contextualize"] = "false"
        click.echo(
            "basic: text contextualisation needs the text encoder, which a bundle does not have; using query_text "
            "as given (store contextualised text embeddings there to reproduce the full method)",
            err=True,
        )
    m = build_method(method, overrides)
    if method not in BUNDLE_METHODS:
        from retrieval.methods.base import Resources

        m.check(Resources())  # a bundle has no text encoder, captioner or checkpoint: say what is missing
    subset_ks = SUBSET_KS if b.data.subset is not None else ()
    res = evaluate(
        m,
        b.data,
        resources=b.resources,
        ap=ap_variant,
        ks=KS,
        subset_ks=subset_ks,
        ties=ties,
        chunk_size=chunk_size,
    )
    summary = res.summary(b.data, "ap", empty_positives=empty_positives, group_mean=group_mean)
    ties_range = res.tie_range(b.data, empty_positives=empty_positives, group_mean=group_mean)
    report = {
        "method": method,
        "ap": ap_variant,
        "averaging": averaging_title(group_mean, empty_positives),
        "config": res.config,
        "tie_range": ties_range,
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
    if as_json:  # an undefined mean (a group whose queries were all skipped) is null, keeping the JSON strict
        click.echo(json.dumps(_nan_to_none(report)))
    else:
        _print_report(report, summary, res.notes, f"{method} on {bundle}", b.data, subset_ks)
    if ties_range:
        click.echo(tie_message(method, ties_range), err=True)
    if summary.n_empty:
        click.echo(
            f"{summary.n_empty} queries have no positive (empty_positives={empty_positives})", err=True
        )
    sys.stdout.flush()
    return 0
