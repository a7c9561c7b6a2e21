"""`reconscore annotate`: blind ranking pages for your own annotators (`build`), and their exports turned into a
judgment set that `correlate --format ranking` reads, with agreement and win shares (`collect`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from eval.cli import SuggestingGroup
from eval.cli import options as opt

MOST_SHOWN = (
    26  # a page labels its captions A-Z (preference_data.annotate.LABELS; not imported: startup time)
)


@click.group("annotate", cls=SuggestingGroup)
def command() -> None:
    """Blind ranking pages for annotators; collect their agreement and a ranking set."""


@command.command(
    "build",
    epilog="""\b
Examples:
  reconscore annotate build --candidates runs/describe-smoke --annotators 2 --out runs/study
  reconscore annotate build --candidates candidates.csv --images data/ucm --annotators 3 --out runs/study
  reconscore annotate build --candidates runs/eval-blip --candidates runs/eval-git --per-image 2 --out runs/study
  reconscore annotate build --only contested --collected runs/collected
\b
Hand out STUDY/pages/ (one annotator-K.html each, images/ beside them): the pages work from file://, with no
server and no network. STUDY/key.json unblinds the study: keep it out of the annotators' hands.""",
)
@click.option(
    "--candidates",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="A table (.csv/.jsonl with image, candidate, model), a `describe` run folder (its candidates) or an "
    "`evaluate` run folder (its captions, the model its row label). Repeatable: every source's candidates of "
    "an image are ranked together.",
)
@opt.images_root("a describe run's own images")
@opt.positive_int("--annotators", default=2, help="Pages to make.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of every page's shuffles (recorded; numpy's generator takes no negative one).",
)
@click.option(
    "--allow-ties/--no-ties", default=False, show_default=True, help="Whether annotators may tie captions."
)
@click.option(
    "--per-image",
    type=click.IntRange(min=2, max=MOST_SHOWN),
    default=None,
    help="Show this many candidates per image, drawn at random with --seed (the ReconScore paper: 3 of 6); "
    "a page labels at most 26 (A-Z).",
)
@click.option("--title", default="Rank the captions", show_default=True, help="The pages' title.")
@opt.choice(
    "--only",
    choices=["all", "contested"],
    default="all",
    help="contested: a consensus page for the images --collected lists as contested, written into its study.",
)
@click.option(
    "--collected",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="With --only contested: the `annotate collect` run whose contested images to settle.",
)
@click.option("--out", type=opt.RUN_FOLDER, default=None, help="The study folder (a run folder).")
def build(
    candidates, images_root, annotators, seed, allow_ties, per_image, title, only, collected, out
) -> int:
    """Make a blind ranking study: one self-contained page per annotator, and the key that unblinds it."""
    from eval.annotate import BuildJob, run_build, run_consensus_build

    if only == "contested":
        if collected is None:
            raise click.UsageError("--only contested needs --collected (an `annotate collect` run folder)")
        _refuse_ignored(click.get_current_context())
        record = run_consensus_build(collected, seed=seed, argv=sys.argv[1:])
        click.echo(
            f"consensus page for {record['consensus']['items']} contested image(s): {record['consensus']['page']}"
        )
        opt.smoke_banner(record)
        return 0
    if collected is not None:
        raise click.UsageError("--collected goes with --only contested")
    if not candidates or out is None:
        raise click.UsageError("annotate build needs --candidates and --out")
    job = BuildJob(
        list(candidates), out, images_root, annotators, seed, allow_ties, per_image, title, argv=sys.argv[1:]
    )
    record = run_build(job, say=lambda line: click.echo(f"warning: {line}", err=True))
    counts = record["counts"]
    click.echo(
        f"study {record['study']} (checksum {record['checksum']}): {counts['images']} images, "
        f"{counts['annotators']} page(s) in {out / 'pages'}"
    )
    opt.smoke_banner(record)
    return 0


def _refuse_ignored(ctx: click.Context) -> None:
    """--only contested writes into the study --collected read, with its settings: an option of a study's own
    build given beside it would be silently ignored, so it is a usage error."""
    own = {"candidates": "--candidates", "images_root": "--images", "annotators": "--annotators",
           "allow_ties": "--allow-ties/--no-ties", "per_image": "--per-image", "title": "--title", "out": "--out"}  # fmt: skip
    given = [flag for name, flag in own.items() if ctx.get_parameter_source(name) != ParameterSource.DEFAULT]
    if given:
        raise click.UsageError(
            f"--only contested writes into the study --collected read, with its settings: {', '.join(given)} "
            "would be ignored; leave it out"
        )


@command.command(
    "collect",
    epilog="""\b
Examples:
  reconscore annotate collect runs/study exports/*.jsonl --out runs/collected
  reconscore annotate collect runs/study a1.jsonl a2.jsonl consensus.jsonl --selections runs/describe-smoke \\
      --out runs/collected
\b
Output in --out: rankings.jsonl (every annotator) and consensus.jsonl (one per image), both in the `ranking`
format of `correlate --format ranking`; judgments.jsonl; agreement.csv (Kendall's W, pairwise agreement,
Krippendorff's alpha, each with its bootstrap CI over images); agreement_by_image.csv; contested.csv;
win_share.csv (the ReconScore paper, Table 6); preference.csv (Table 7, with --selections); run.json.
A bad export is one line naming file:line, and nothing is written.""",
)
@click.argument("study", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument(
    "exports", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path)
)
@opt.choice(
    "--consensus-rule",
    choices=["mean-rank", "median-rank"],
    default="mean-rank",
    help="How the annotators' ranks make the consensus ranking (a consensus pass's export overrides it).",
)
@click.option(
    "--contested-below",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Contested: the annotators' best captions differ, or the image's Kendall's W is below this.",
)
@click.option(
    "--selections",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="A metric's pick per image (table: image, caption[, metric]; or a describe run folder): its preference "
    "rate. Repeatable.",
)
@opt.bootstrap(2000, at_least=1)
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="The collected set (a run folder).")
def collect(study, exports, consensus_rule, contested_below, selections, n_boot, seed, out) -> int:
    """Check annotators' exports, unblind them, and write rankings, agreement and win shares."""
    from eval.annotate import CollectJob, run_collect

    job = CollectJob(
        study,
        list(exports),
        out,
        consensus_rule,
        contested_below,
        list(selections),
        n_boot,
        seed,
        sys.argv[1:],
    )
    record = run_collect(job)
    for name, a in record["agreement"].items():
        low, high = a["ci"]
        click.echo(f"{name:20s} {a['value']:.3f}  [{low:.3f}, {high:.3f}]  over {a['images']} images")
    click.echo(f"contested images: {record['contested']['images']}; consensus rule: {consensus_rule}")
    for row in record["win_share"]:
        click.echo(f"  {row['model']}: {row['wins']:g} wins of {row['shown']} shown")
    for row in record["preference"]:
        click.echo(
            f"  {row['metric']}: preferred on {row['preferred']:g} of {row['images']} images ({row['rate']:.1%})"
        )
    click.echo(f"wrote {out}")
    opt.smoke_banner(record)
    return 0
