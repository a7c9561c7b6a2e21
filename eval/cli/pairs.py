"""`reconscore pairs`: preference pairs for DPO from describe runs (ReconScore as a training signal)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt


@click.command(
    "pairs",
    epilog="""\b
Examples:
  reconscore describe --preset smoke --n 3 --selection-seeds 3 --out runs/rd-smoke
  reconscore pairs runs/rd-smoke --out runs/pairs-smoke
  reconscore pairs runs/rd-a runs/rd-b --policy all --min-margin 0.5 --out runs/pairs
\b
RUN: a `reconscore describe` folder (candidates.jsonl + run.json) or a scored candidates table (.jsonl with
image, caption, image_id and the --score column; give --images and --prompt). Output in --out:
data/train-NNNNN.parquet in TRL's conversational vision preference format (image, prompt, chosen, rejected) plus
scores, margins, per-seed values, seeds and the source run of each pair; load with
datasets.load_dataset(OUT, split="train") (the record, run.json, lies outside data/). run.json counts the pairs
dropped and why. With no pair kept nothing is written (the reasons are printed).
Exit status: 0 all inputs read and pairs written, 3 some inputs or images could not be read or no pair was kept,
1 nothing could start or no input could be read.""",
)
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Output folder.")
@opt.choice(
    "--policy",
    choices=["best-worst", "best-vs-each", "all"],
    default="best-worst",
    help="Per image: the best against the worst candidate, the best against each other one, or every pair.",
)
@opt.choice(
    "--score",
    choices=["selection_score", "recon_score"],
    default="selection_score",
    help="What ranks candidates: the selection renders' score (mean over --selection-seeds) or the held-out "
    "recon_score (needs describe --eval-candidates all); --noise tests that score's own per-seed values.",
)
@click.option(
    "--min-margin",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Keep a pair only if chosen minus rejected score is at least this (ReconScore points).",
)
@opt.choice(
    "--noise",
    choices=["paired", "off"],
    default="paired",
    help="Seed-noise filter (runs with --selection-seeds K >= 2): a paired t test on the two captions' "
    "per-seed differences (same seeds); kept when t exceeds Student's t at 90% one-sided, K-1 df.",
)
@opt.images_root("the run's images_root, or a table's folder")
@click.option("--prompt", default=None, help="The captioning prompt of a scored table (default: the run's).")
@opt.positive_int("--shard-size", default=1000, help="Pairs per Parquet file.")
def command(prompt, shard_size, **job) -> int:
    """Build DPO preference pairs (chosen / rejected captions) from scored describe candidates."""
    from describer.pairs import PairsJob, build_pairs
    from describer.prompts import load_prompt
    from recon_score.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL

    # the other options are named as its fields
    job = PairsJob(**{**job, "runs": list(job["runs"])}, argv=sys.argv)
    out = job.out
    summary = build_pairs(job, prompt=load_prompt(prompt) if prompt else None, shard_size=shard_size)
    click.echo(
        f"{summary.pairs} pairs from {summary.images} images ({summary.candidates} scored candidates) -> {out}"
    )
    if not summary.pairs:
        click.echo(f"error: no pair was kept, so nothing was written in {out} (the reasons below)", err=True)
    click.echo(f"seed-noise filter: {summary.noise_filter}")
    for reason, n in sorted(summary.dropped.items()):
        click.echo(f"dropped {n} pairs: {reason}")
    for reason, n in sorted(summary.skipped.items()):
        click.echo(f"skipped {n}: {reason}")
    if summary.held_out_agreement:
        a = summary.held_out_agreement
        click.echo(f"held-out recon_score orders {a['agree']}/{a['pairs']} kept pairs the same way")
    for line in summary.failures[:20]:
        click.echo(f"error: {line}", err=True)
    opt.smoke_banner(summary.record)
    if summary.failures and not summary.candidates:
        return EXIT_ERROR  # no input could be read
    return EXIT_PARTIAL if summary.failures or not summary.pairs else EXIT_OK
