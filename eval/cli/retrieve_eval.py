"""`reconscore retrieve-eval`: score a composed retrieval method on a features bundle (.npz), no model needed."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from eval.cli import options as opt
from retrieval.choices import AP_VARIANTS
from retrieval.methods import METHODS

ON_BUNDLE = [m.name for m in METHODS.values() if m.runs_on_bundle]


def _print_report(ev, title: str) -> None:
    """The human-readable summary: mAP (named variant and averaging), per group, recalls, notes."""
    from retrieval.report import AP_TITLES

    report, summary = ev.report, ev.summary
    click.echo(f"{title} ({ev.n_queries} queries, {ev.n_database} database items)")
    click.echo(
        f"  mAP ({AP_TITLES[report['ap']]}): overall {summary.overall:.4f}, macro {summary.macro:.4f}, "
        f"min-macro {summary.min_macro:.4f}"
    )
    click.echo(f"  ({report['averaging']})")
    for g, v in summary.per_group.items():
        click.echo(f"    {g}: {v:.4f} ({summary.group_counts[g]} queries)")
    recalls = [k for k in report if k.startswith("recall")]
    click.echo("  " + ", ".join(f"{k} {report[k]:.4f}" for k in recalls))
    for note in ev.notes:
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
The other methods take more than a bundle holds (an encoder, images, a checkpoint): run them with
`reconscore retrieve`.""",
)
@click.option(
    "--bundle", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Features bundle (.npz)."
)
@click.option(
    "--method",
    type=opt.Choice(list(METHODS)),
    required=True,
    help=f"Retrieval method; on a bundle alone: {', '.join(ON_BUNDLE)}.",
)
@click.option(
    "--lambda",
    "lam",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="WeiCom's modality weight (default 0.5).",
)
@click.option(
    "--ap",
    type=opt.Choice(AP_VARIANTS),
    default=None,
    help="AP variant: rscir (PatternCom, xView2-CIR) or trapezoidal (i-CIR, FreeDom). Default: the bundle's "
    "protocol (written by `retrieve --save-bundle`), else non-interpolated.",
)
@opt.retrieval_protocol()
@opt.choice(
    "--recall",
    choices=["hit", "fraction"],
    default="hit",
    help="recall@K: any positive in the top K (CIRR/FashionIQ/EDIR), or the fraction of positives (rscir).",
)
@click.option("--set", "sets", multiple=True, help="Hyperparameter KEY=VALUE of the method (repeatable).")
@opt.positive_int("--chunk-size", default=None, help="Queries scored at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(bundle, method, lam, sets, as_json, **protocol) -> int:
    """Evaluate one composed retrieval method on your own embeddings (a .npz bundle)."""
    from retrieval.bundle_eval import evaluate_bundle

    overrides = opt.method_sets(sets, only=method).get(method, {})
    if lam is not None:
        if method != "weicom":
            raise click.BadParameter(
                "--lambda is WeiCom's weight; use --set harris_lambda=X for BASIC", param_hint="--lambda"
            )
        overrides["lam"] = str(lam)
    # the protocol options (--ap, --ties, --empty-positives, --group-mean, --recall, --chunk-size) are named as
    # evaluate_bundle's keywords
    ev = evaluate_bundle(bundle, method, overrides, **protocol, log=lambda m: click.echo(m, err=True))
    report, summary = ev.report, ev.summary
    if as_json:  # an undefined mean (a group whose queries were all skipped) is null, keeping the JSON strict
        click.echo(json.dumps(_nan_to_none(report)))
    else:
        _print_report(ev, f"{method} on {bundle}")
    if report["tie_range"]:
        from retrieval.evaluate import tie_message

        click.echo(tie_message(method, report["tie_range"]), err=True)
    if summary.n_empty:
        click.echo(
            f"{summary.n_empty} queries have no positive (empty_positives={protocol['empty_positives']})",
            err=True,
        )
    sys.stdout.flush()
    return 0
