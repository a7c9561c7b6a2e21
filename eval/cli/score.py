"""`reconscore score`: ReconScore for every row of a captions table."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt

PRESET_HELP = "paper | fast | flux1-dev | flux2-dev | flux2-klein | smoke (`reconscore presets list`)."


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
@click.option(
    "--captions",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Captions table (.jsonl/.csv). Default: the bundled sample (9 UC Merced tiles: 5 human captions + 3 distractors each).",
)
@opt.images_root("the captions file's folder", extra=" Paths may not leave it.")
@click.option(
    "--dataset",
    default=None,
    help="Score the human references of a dataset split instead of a captions "
    "file (rsicd, ucm-captions, sydney-captions, nwpu-captions, rsitmd, ...; needs --root).",
)
@click.option(
    "--root",
    "dataset_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Dataset folder (annotations + images/).",
)
@click.option("--split", default="test", show_default=True, help="Dataset split ('all' for every split).")
@click.option(
    "--annotations",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Dataset annotation file, if not at its default place under --root.",
)
@click.option("--preset", default="paper", show_default=True, help=PRESET_HELP)
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
@opt.device(" Under `accelerate launch` each process takes its own GPU.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Captions rendered per T2I call (same-size images only).",
)
@click.option("--t2i-model", default=None, help="Override the preset's T2I model (hub id or local folder).")
@click.option("--t2i-revision", default=None, help="Hub revision (branch, tag or commit) of the T2I model.")
@click.option(
    "--encoder", default=None, help="Override the similarity encoder spec (`reconscore models list`)."
)
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Override denoising steps.")
@click.option("--guidance-scale", type=float, default=None, help="Override guidance scale.")
@click.option("--seed", type=int, default=None, help="Override the per-image seed.")
@click.option(
    "--seeds",
    "recon_seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="K renders per caption: the preset's seed, then K-1 derived ones (recon_score.seeds); rows get the "
    "mean and std, run.json a bootstrap CI over images and seeds. 1 = the paper's protocol, output unchanged.",
)
@click.option(
    "--max-side", type=click.IntRange(min=16), default=None, help="Override the long-side cap (px)."
)
@click.option(
    "--size-rounding",
    type=click.Choice(["nearest", "floor"]),
    default=None,
    help="Snap each side to the nearest multiple of 16 (the authors' code, `paper`) or round it down.",
)
@click.option(
    "--collapse-whitespace/--raw-captions",
    default=None,
    help="Join whitespace runs in captions before prompting (a variant; `paper` passes captions as given).",
)
@click.option(
    "--dtype",
    type=click.Choice(["bfloat16", "float16", "float32"]),
    default=None,
    help="Override the GPU dtype (CPU runs always use float32).",
)
@click.option(
    "--prompt-template",
    default=None,
    help="'perspective', 'plain', a text file, or a template containing {caption}.",
)
@opt.bands()
@opt.weights_dir()
@opt.cache("reconstruction/embedding")
@click.option(
    "--offload",
    type=click.Choice(["none", "model", "sequential"]),
    default="none",
    show_default=True,
    help="diffusers CPU offload for GPUs with little memory.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Only the first N rows (a quick look; recorded in run.json).",
)
@opt.retry_errors("rows")
@opt.overwrite()
def command(
    captions,
    images_root,
    dataset,
    dataset_root,
    split,
    annotations,
    preset,
    out,
    device,
    batch_size,
    t2i_model,
    t2i_revision,
    encoder,
    steps,
    guidance_scale,
    seed,
    recon_seeds,
    max_side,
    size_rounding,
    collapse_whitespace,
    dtype,
    prompt_template,
    bands,
    weights_dir,
    cache_dir,
    no_cache,
    offload,
    limit,
    retry_errors,
    overwrite,
) -> int:
    """Score captions by reconstruction (ReconScore, reference-free)."""
    from recon_score.presets import get_preset
    from recon_score.prompts import load_template
    from recon_score.run import SAMPLE_DIR, ScoreJob, run_score

    p = get_preset(preset).replace(
        t2i_model=t2i_model,
        t2i_revision=t2i_revision,
        encoder=encoder,
        steps=steps,
        guidance_scale=guidance_scale,
        seed=seed,
        max_side=max_side,
        size_rounding=size_rounding,
        collapse_whitespace=collapse_whitespace,
        dtype=dtype,
        prompt_template=load_template(prompt_template) if prompt_template else None,
    )
    rows = source = None
    if dataset:
        if captions is not None:
            raise click.UsageError(
                "--dataset scores the split's human references; to score a model's captions "
                "on a split use `reconscore evaluate --dataset ... --captions ...`"
            )
        if dataset_root is None:
            raise click.UsageError("--dataset needs --root")
        from eval.datasets import load_dataset
        from eval.datasets.adapters import score_rows

        ds = load_dataset(dataset, dataset_root, split, annotations=annotations)
        rows, source = score_rows(ds), ds.summary()
    elif captions is None:
        captions = SAMPLE_DIR / "captions.jsonl"
        if images_root is None:
            images_root = SAMPLE_DIR
    job = ScoreJob(
        captions=captions,
        out=out,
        preset=p,
        images_root=images_root,
        device=device,
        batch_size=batch_size,
        cache_dir=cache_dir,
        use_cache=not no_cache,
        weights_dir=weights_dir,
        offload=offload,
        limit=limit,
        retry_errors=retry_errors,
        overwrite=overwrite,
        argv=["reconscore", *sys.argv[1:]],
        rows=rows,
        source=source,
        seeds=recon_seeds,
        bands=bands,
    )
    summary = run_score(job)
    from accelerate import PartialState

    if PartialState().is_main_process:
        print_summary(summary, out, meaningless=p.meaningless)
    return summary.exit_code


def print_summary(summary, out: Path, *, meaningless: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if summary.already_complete:
        console.print(f"[bold]{out}[/] is already complete: nothing to do.")
    table = Table(title="ReconScore", show_header=False)
    table.add_row("rows", str(summary.total))
    table.add_row("scored", str(summary.ok))
    table.add_row("failed", str(summary.failed))
    if summary.mean is not None:
        table.add_row("ReconScore mean ± std", f"{summary.mean:.2f} ± {summary.std:.2f}")
    if summary.ci is not None:
        from recon_score.seeds import format_ci

        table.add_row(
            f"mean [{summary.ci['level']:.0%} CI, {summary.ci['images']} images x {summary.ci['seeds']} seeds]",
            format_ci(summary.ci),
        )
    table.add_row("rendered now / from cache", f"{summary.rendered} / {summary.cached}")
    kinds = _kinds_summary(out)
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
    table.add_row("results", str(out / "scores.jsonl"))
    console.print(table)
    from rich.markup import escape

    for row_id, error in summary.failures[:10]:
        console.print(f"[red]failed[/] {escape(str(row_id))}: {escape(str(error))}", highlight=False)
    if len(summary.failures) > 10:
        console.print(f"... and {len(summary.failures) - 10} more (see `error` in scores.jsonl)")
    if meaningless:
        console.print("[yellow]smoke preset: tiny random models, these numbers are meaningless.[/]")


def _kinds_summary(out: Path) -> dict | None:
    """The reference-vs-distractor check of a finished run (rows with `kind`, e.g. the bundled sample)."""
    from recon_score.atomic_io import read_jsonl
    from recon_score.sanity import references_vs_distractors

    path = out / "scores.jsonl"
    return references_vs_distractors(read_jsonl(path)) if path.exists() else None
