"""`reconscore correlate`: Kendall τ-b/τ-c of caption metrics against human judgments."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import options as opt
from eval.meta_eval.benchmarks import BENCHMARKS
from eval.preferences import FORMATS, TauVariant
from recon_score.errors import EXIT_OK, EXIT_PARTIAL
from recon_score.key_values import key_values
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
  reconscore correlate --benchmarks flickr8k-expert,flickr8k-cf,thumb --data-root /data \\
      --metrics bleu1,bleu4,rouge,meteor,cider --verify --out runs/meta-eval
\b
Protocol (Hessel et al. 2021): every (image, candidate, judgment) row is one observation (no averaging over
raters); Kendall tau-b and tau-c x 100 via scipy; judgments oriented larger = better (rank 1 = best).
Headline: the set's published variant (--headline). Flickr8K-Expert skips candidates that are references of
their image; Flickr8K-CrowdFlower removes every caption rated for an image from its references.
\b
Meta-evaluation (--benchmarks all|NAME,...): each benchmark from DIR/<benchmark>/ (--data-root) in the
layout its download has, with its official protocol; writes meta_eval.csv and meta_eval.md (value x 100, 95%
CI, n, published value, difference); --verify prints the reproduction status. See docs/meta-eval.md.
\b
Output in --out: correlations.csv (metric, tau_b, tau_c, pairwise_acc, each with its bootstrap CI as
<stat>_low and <stat>_high, n, note), per_item.parquet (every row with its scores), run.json (settings, protocol, provenance).
Exit status: 0 done, 3 some metric could not score any row (e.g. images not found), 1 the run could not start.""",
)
@click.option(
    "--preferences",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Human judgment file (or --benchmarks).",
)
@opt.choice(
    "--format",
    "fmt",
    choices=FORMATS,
    default=None,
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
@opt.choice(
    "--headline",
    choices=[v.value for v in TauVariant],
    default=None,
    help=f"Headline Kendall variant, marked in the table (default: the set's published one: {HEADLINE_DEFAULTS}).",
)
@opt.bootstrap(1000, at_least=0)
@click.option(
    "--benchmarks",
    default=None,
    help="Meta-evaluation: `all` or a comma-separated list of " + ", ".join(BENCHMARKS) + " (instead of "
    "--preferences).",
)
@click.option(
    "--data-root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="With --benchmarks: the folder holding one folder per benchmark (DIR/flickr8k/, DIR/thumb/, ...).",
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="BENCHMARK=VARIANT",
    help="With --benchmarks: a benchmark's named variant (e.g. pascal50s=48-refs); repeatable.",
)
@click.option(
    "--verify", is_flag=True, help="With --benchmarks: print the reproduction status of each value."
)
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
def command(**job) -> int:
    """Kendall tau-b/tau-c of caption metrics against human judgments."""
    from eval.metrics.registry import parse_metric_names
    from recon_score.quick_checks import check_input_file

    meta = {k: job.pop(k) for k in ("benchmarks", "data_root", "variants", "verify")}
    if meta["benchmarks"] is not None:
        return _meta_eval(job, meta)
    if job["preferences"] is None or job["fmt"] is None:
        raise click.UsageError("give --preferences FILE --format NAME, or --benchmarks NAMES --data-root DIR")
    if meta["data_root"] is not None or meta["variants"] or meta["verify"]:
        raise click.UsageError("--data-root, --variant and --verify go with --benchmarks")

    check_input_file(job["preferences"], "file")  # before pandas, scipy and the models are imported
    check_input_file(job.get("references"), "references file")
    parse_metric_names(job["metrics"])
    from eval.correlate import CorrelateJob, run_correlate

    result = run_correlate(CorrelateJob(**job))  # every option is named as the job's field
    print_correlations(result.correlations, result.run, result.written)
    opt.smoke_banner(result.run)
    return EXIT_PARTIAL if (result.correlations["n"] == 0).any() else EXIT_OK


def _meta_eval(job: dict, meta: dict) -> int:
    from eval.meta_eval.benchmarks import parse_benchmarks
    from eval.metrics.registry import parse_metric_names

    if job["preferences"] is not None or job["fmt"] is not None or job["references"] is not None:
        raise click.UsageError(
            "--benchmarks reads DIR/<benchmark>/: drop --preferences, --format, --references"
        )
    if job["images_root"] is not None or job["headline"] is not None:
        raise click.UsageError("--benchmarks takes each benchmark's images and headline statistic itself")
    if meta["data_root"] is None:
        raise click.UsageError("--benchmarks needs --data-root DIR (DIR/<benchmark>/ as downloaded)")
    names = parse_benchmarks(meta["benchmarks"])
    parse_metric_names(job["metrics"])
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval

    variants = key_values(meta["variants"], "--variant")
    for bench, variant in variants.items():
        if bench not in names:
            raise click.BadParameter(f"{bench} is not among --benchmarks", param_hint="--variant")
        BENCHMARKS[bench].variant(variant)  # an unknown variant: one line listing the known ones
    keep = ("metrics", "out", "preset", "encoder", "long_text", "device", "n_boot", "seed")
    result = run_meta_eval(
        MetaEvalJob(
            benchmarks=names,
            data_root=meta["data_root"],
            variants=variants,
            **{k: job[k] for k in keep},
        )
    )
    print_meta_eval(result, verify=meta["verify"])
    opt.smoke_banner(result.run)
    return EXIT_PARTIAL if (result.table["n"] == 0).any() else EXIT_OK


def print_meta_eval(result, *, verify: bool) -> None:
    """The table (value [CI], n), and with `verify` the published value, difference and status of each row and
    the reproduction table in the papers' layout (metric x benchmark)."""
    import pandas as pd
    from rich.markup import escape
    from rich.table import Table

    from eval.cli.console import console as make_console

    console = make_console()
    t = Table(title="Meta-evaluation: x 100, each with its [95% bootstrap CI over images]")
    for col in ("benchmark", "variant", "category", "metric", "statistic"):
        t.add_column(col)
    for col in ("value [95% CI]", "n", *(("published", "difference", "status") if verify else ())):
        t.add_column(col, justify="right")
    for r in result.table.to_dict("records"):
        cells = [escape(str(r[c])) for c in ("benchmark", "variant", "category", "metric", "statistic")]
        cells += [escape(f"{r['value']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"), str(r["n"])]
        if verify:
            has = r["published"] is not None and r["published"] == r["published"]
            cells += [
                f"{r['published']:g}" if has else "",
                f"{r['difference']:+.2f}" if has else "",
                r["status"],
            ]
        t.add_row(*cells)
    console.print(t)
    for what, why in result.skipped.items():
        console.print(f"[yellow]  skipped {escape(what)}: {escape(why)}[/]", highlight=False)
    if verify:
        from eval.meta_eval.suite import paper_layout

        grid = paper_layout(result.table)
        v = Table(
            title="Reproduction: measured status (published); ✓ within the papers' rounding, ✗ not, — none"
        )
        v.add_column("metric")
        for col in grid.columns:
            v.add_column(escape(col), justify="right")
        for metric, row in grid.iterrows():
            v.add_row(escape(str(metric)), *("" if pd.isna(x) else str(x) for x in row))
        console.print(v)
        st = result.table["status"]
        console.print(
            f"  reproduced {int((st == '✓').sum())} of {int((st != '—').sum())} published values "
            f"({int((st == '✗').sum())} not; {int((st == '—').sum())} rows have none)",
            highlight=False,
        )
    console.print(f"  written: {', '.join(str(p) for p in result.written)}", highlight=False)


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
