"""`reconscore score`: ReconScore for every row of a captions table."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.presets import PRESETS, ReconPreset
from recon_score.run_outputs import SCORES, output_file


@click.command(
    "score",
    epilog="""\b
Examples:
  reconscore score --preset smoke --out runs/sample                 # bundled UCM sample, offline
  reconscore score --preset paper --captions caps.jsonl --images /data/ucm --out runs/ucm --batch-size 4
  accelerate launch -m eval score --preset paper --captions caps.csv --out runs/big   # one process per GPU
\b
Input: JSONL or CSV with columns `image` (path relative to --images, default the file's folder) and
`caption`, optional `id`. Output in --out: scores.jsonl (one row per input row, in input order: id, image,
caption, recon_score, cosine, reconstruction, error, width, height, truncated; with --seeds K > 1 also seeds,
recon_score_per_seed, recon_score_std, recon_score and cosine being the means over seeds), run.json (every setting, model
revisions, versions, times, counts) and reconstructions/*.png. Rerun the same command to resume after a crash.
Exit status: 0 all rows scored, 3 some rows failed (see their `error`), 1 the run could not start.""",
)
@opt.optional_file(
    "--captions",
    help="Captions table (.jsonl/.csv). Default: the bundled sample (9 UC Merced and RSICD tiles of 5 scene kinds: 5 human captions + 3 distractors each).",
)
@opt.images_root("the captions file's folder", extra=" Paths may not leave it.")
@opt.dataset_split(
    "Score the human references of a dataset split instead of a captions file "
    "(a model's captions on a split: `reconscore evaluate`)"
)
@opt.preset(PRESETS)
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
@opt.device(" Under `accelerate launch` each process takes its own GPU.")
@opt.positive_int("--batch-size", default=1, help="Captions rendered per T2I call (same-size images only).")
@opt.preset_flags(ReconPreset, PRESETS["paper"])
@opt.positive_int(
    "--seeds",
    "recon_seeds",
    default=1,
    help="K renders per caption: the preset's seed, then K-1 derived ones (recon_score.seeds); rows get the "
    "mean and std, run.json a CI over images x seeds. 1 = the paper's protocol, output unchanged.",
)
@opt.explain(
    "Also explain every scored row (explain/*.npz, *.png and the row's `explain`)",
    "the preset's seed, then derived ones, whatever --seeds is",
)
@opt.bands()
@opt.weights_dir()
@opt.trust_remote_code("the T2I model (a preset's custom pipeline, e.g. text2earth's)")
@opt.cache("reconstruction/embedding")
@opt.choice(
    "--offload",
    choices=["none", "model", "sequential"],
    default="none",
    help="diffusers CPU offload for GPUs with little memory.",
)
@opt.positive_int("--limit", default=None, help="Only the first N rows (a quick look; recorded in run.json).")
@opt.retry_errors("rows")
@opt.overwrite()
def command(
    captions, images_root, dataset, dataset_root, split, annotations, preset, recon_seeds, no_cache, **kw
) -> int:
    """Score captions by reconstruction (ReconScore, reference-free)."""
    from recon_score.presets import get_preset
    from recon_score.quick_checks import check_recon_job
    from recon_score.run import SAMPLE_CAPTIONS, SAMPLE_DIR, ScoreJob, run_score

    p = get_preset(preset).override(**opt.pop_overrides(ReconPreset, kw))
    explain = opt.pop_explain(kw)
    rows = source = None
    if dataset:
        if captions is not None:
            raise click.UsageError(
                "--dataset scores the split's human references; to score a model's captions "
                "on a split use `reconscore evaluate --dataset ... --captions ...`"
            )
        opt.dataset_root(dataset, dataset_root)
        from eval.datasets.adapters import split_inputs

        rows, source = split_inputs("score", dataset, dataset_root, split, annotations)
    elif captions is None:
        captions = SAMPLE_CAPTIONS
        images_root = images_root or SAMPLE_DIR
    job = ScoreJob(
        captions=captions,
        preset=p,
        images_root=images_root,
        use_cache=not no_cache,
        argv=["reconscore", *sys.argv[1:]],
        rows=rows,
        source=source,
        seeds=recon_seeds,
        explain=explain,
        **kw,  # out, device, batch_size, cache_dir, weights_dir, offload, limit, retry_errors, overwrite, bands
    )
    check_recon_job(job)  # a wrong path, column or name answers before torch is imported
    summary = run_score(job)
    from accelerate import PartialState

    if PartialState().is_main_process:
        print_summary(summary, job.out)
        opt.smoke_banner(summary.record)
    return summary.exit_code


def print_summary(summary, out: Path) -> None:
    console, table = opt.summary_table("ReconScore", out, already_complete=summary.already_complete)
    counts, figures = summary.record.get("counts", {}), summary.record.get("summary", {})
    mean, std = figures.get("recon_score_mean"), figures.get("recon_score_std")
    table.add_row("rows", str(counts.get("rows")))
    table.add_row("scored", str(counts.get("ok")))
    table.add_row("failed", str(counts.get("failed")))
    if mean is not None and std is not None:
        table.add_row(f"ReconScore mean ± std over {counts['ok']} captions", f"{mean:.2f} ± {_spread(std)}")
    elif mean is not None:  # one scored caption: a value, no spread
        table.add_row("ReconScore", f"{mean:.2f} (1 caption scored: no spread)")
    table.add_row("rendered now / from cache", f"{summary.rendered} / {summary.cached}")
    if summary.resumed:
        table.add_row("rows resumed from the journal", str(summary.resumed))
    kinds = figures.get("references_vs_distractors")
    if kinds:
        ref, dis = kinds["reference_mean"], kinds["distractor_mean"]
        if ref is not None and dis is not None:
            table.add_row("references vs distractors (mean)", f"{ref:.2f} vs {dis:.2f}")
        if kinds["images"]:
            table.add_row(
                "images: every reference above every distractor",
                f"{kinds['images_all_references_above_distractors']}/{kinds['images']}"
                f" ({100 * kinds['share_all_references_above_distractors']:.0f}%)",
            )
    ex = summary.explain
    if ex:
        table.add_row("explained captions", str(ex["captions"]))
        table.add_row("phrases attributed", str(ex["phrases"]))
        table.add_row(
            f"significant ({ex['correction'] or 'holm'}-corrected) / of them hurt",
            f"{ex['significant']} / {ex['hurt']}",
        )
        table.add_row("gap maps", f"{ex['maps']} in {out / ex['folder']}" if ex["maps"] else "none")
    table.add_row("results", str(output_file(out, SCORES)))
    console.print(table)
    ci = summary.record.get("seed_noise", {}).get("recon_score_ci")  # a --seeds run
    if ci is not None:  # a line of its own: the label must never wrap
        from recon_score.seeds import ci_line

        click.echo(ci_line(ci))
    if kinds and kinds.get("images"):
        click.echo(READING)
    opt.print_failures(console, summary.failures, where=SCORES)


def _spread(std: float) -> str:
    """A std that rounds to 0.00 but is not 0 keeps one significant digit: "± 0.00" reads as no spread at all."""
    return f"{std:.2f}" if std == 0 or std >= 0.005 else f"{std:.1g}"


# how to read the references-vs-distractors lines, printed under them
READING = (
    "Reading it: higher is better (a caption that lets the T2I model draw the tile scores higher). With "
    "--preset paper expect every tile's references above its distractors on most tiles, and good captions "
    "around 80-84 (the ReconScore paper, Table 3); with smoke models the numbers mean nothing."
)
