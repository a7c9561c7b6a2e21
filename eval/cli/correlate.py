"""`reconscore correlate`: Kendall τ-b/τ-c of caption metrics against human judgments."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import options as opt
from eval.preferences import FORMATS, TauVariant
from recon_score.errors import EXIT_OK, EXIT_PARTIAL
from recon_score.presets import PRESETS
from recon_score.run_outputs import PER_ITEM

HEADLINE_DEFAULTS = ", ".join(f"{f.headline} for {f.name}" for f in FORMATS.values())


@click.command(
    "correlate",
    epilog="""\b
Examples:
  reconscore correlate --preferences preference_data/examples/ranking_example.jsonl --format ranking \\
      --metrics clipscore,recon_score --images recon_score/sample --preset smoke --encoder smoke:open-clip --out runs/rank
  reconscore correlate --preferences /data/flickr8k/ExpertAnnotations.txt --format flickr8k-expert \\
      --metrics bleu1,bleu4,rouge,meteor,cider --out runs/f8k-expert
\b
Protocol (Hessel et al. 2021): every (image, candidate, judgment) row is one observation (no averaging over
raters); Kendall tau-b and tau-c x 100 via scipy; judgments oriented larger = better (rank 1 = best).
Headline: the set's published variant (--headline). Flickr8K-Expert skips candidates that are references of
their image; Flickr8K-CrowdFlower removes every caption rated for an image from its references.
\b
Output in --out: correlations.csv (metric, tau_b, tau_c, pairwise_acc, each with its bootstrap CI as
<stat>_low and <stat>_high, n, note), per_item.parquet (every row with its scores), run.json (settings, protocol, provenance).
Exit status: 0 done, 3 some metric could not score any row (e.g. images not found), 1 the run could not start.""",
)
@click.option(
    "--preferences",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Human judgment file.",
)
@click.option(
    "--format",
    "fmt",
    type=opt.Choice(list(FORMATS)),
    required=True,
    help="Layout of --preferences: " + "; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()) + ".",
)
@opt.metric_names(required=True)
@opt.images_root("the preference file's folder for ranking/csv", extra=" Only image metrics need it.")
@opt.optional_file(
    "--references",
    help="Caption file of flickr8k (Flickr8k.token.txt) or thumb (mscoco_references.json); default: next to "
    "--preferences.",
)
@opt.preset(PRESETS, "ReconScore preset (recon_score metric). ")
@opt.clip_encoder()
@opt.long_text()
@opt.device()
@click.option(
    "--headline",
    type=opt.Choice([v.value for v in TauVariant]),
    default=None,
    help=f"Headline Kendall variant, marked in the table (default: the set's published one: {HEADLINE_DEFAULTS}).",
)
@click.option(
    "--bootstrap",
    "n_boot",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Bootstrap resamples of every CI.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
def command(**job) -> int:
    """Kendall tau-b/tau-c of caption metrics against human judgments."""
    from eval.metrics.registry import parse_metric_names
    from recon_score.quick_checks import check_input_file

    check_input_file(job["preferences"], "file")  # before pandas, scipy and the models are imported
    check_input_file(job.get("references"), "references file")
    parse_metric_names(job["metrics"])
    from eval.correlate import CorrelateJob, run_correlate

    result = run_correlate(CorrelateJob(**job))  # every option is named as the job's field
    print_correlations(result.correlations, result.run, result.written)
    return EXIT_PARTIAL if (result.correlations["n"] == 0).any() else EXIT_OK


def print_correlations(table, run: dict, written: list[Path] = ()) -> None:
    """The correlations as a rich table, headline column marked; `written`: the run's files (the first in full)."""
    from rich.markup import escape
    from rich.table import Table

    from eval.cli.console import console as make_console

    head = run["protocol"]["headline"]
    console = make_console()
    t = Table(
        title=f"{run['format']}: Kendall tau x 100 (headline {head.replace('_', '-')}) and pairwise accuracy, "
        "each with its [95% bootstrap CI over images]"
    )
    t.add_column("metric")
    for col in ("tau_b", "tau_c", "pairwise_acc"):
        mark = " *" if col == head else ""
        t.add_column(col.replace("tau_", "tau-") + mark, justify="right", style="bold" if mark else None)
    t.add_column("n", justify="right")
    digits = {"tau_b": 2, "tau_c": 2, "pairwise_acc": 3}
    for r in table.to_dict("records"):
        cells = [f"{r[c]:.{d}f}\n[{r[c + '_low']:.{d}f}, {r[c + '_high']:.{d}f}]" for c, d in digits.items()]
        t.add_row(escape(r["metric"]), *map(escape, cells), str(r["n"]))
    console.print(t)
    for r in table.itertuples(index=False):
        if getattr(r, "note", ""):  # why a tau is NaN (eval.kendall.tau_nan_reason)
            console.print(f"[yellow]  {escape(r.metric)}: {escape(r.note)}[/]", highlight=False)
    for note in run["protocol"]["dataset_notes"]:
        console.print(f"  {escape(note)}", highlight=False)
    rows = run["counts"]["rows"]
    for r in table.itertuples(index=False):
        if r.n < rows:
            console.print(
                f"[yellow]  {r.metric}: {rows - r.n} of {rows} rows not scored (no references, no image, or an "
                f"error: see {r.metric} and {r.metric}_error in {PER_ITEM})[/]",
                highlight=False,
            )
    if written:
        names = ", ".join([str(written[0]), *(p.name for p in written[1:])])
        console.print(f"  written: {names}", highlight=False)
    if run.get("meaningless"):
        console.print("[yellow]smoke models (random weights): these numbers are meaningless.[/]")
