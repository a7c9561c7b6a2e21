"""`reconscore evaluate`: a model's captions on a dataset split, every metric, the ReconScore paper's Table 3 layout."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.errors import EXIT_OK, EXIT_PARTIAL
from recon_score.presets import PRESETS
from recon_score.run_outputs import PER_IMAGE


@click.command(
    "evaluate",
    epilog="""\b
Examples:
  reconscore evaluate --dataset ucm-captions --root /data/ucm --captions runs/rd/captions.jsonl \\
      --metrics recon_score,bleu4,meteor,rouge,cider --preset paper --out runs/rd-eval
  reconscore evaluate --dataset rsitmd --root /data/rsitmd --captions model.jsonl --metrics bleu1,bleu4,cider --out e
\b
--captions: JSONL/CSV with `image_id` (or `image`/`id`) and `caption`, e.g. `reconscore describe` output; rows
match split images by id, file name, or file name without extension. Output in --out: per_image.jsonl (one row
per split image: image_id, caption, one field per metric, error), summary.csv (one row, one column per metric,
x100 except ReconScore), run.json (dataset summary, join report, metric configs, versions).
Exit status: 0 every split image was scored, 3 some were not (their `error` says why), 1 nothing could run.""",
)
@opt.dataset_split("The split whose images were captioned", required=True)
@opt.images_root("ROOT/images")
@click.option(
    "--captions",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="The model's captions.",
)
@opt.metric_names(default="recon_score,bleu1,bleu4,meteor,rouge,cider", show_default=True)
@opt.preset(PRESETS, "ReconScore preset (recon_score metric). ")
@opt.recon_seeds()
@opt.clip_encoder()
@opt.long_text()
@opt.device()
@click.option(
    "--label", default=None, help="Row label of summary.csv (default: the captions file's folder name)."
)
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def command(dataset_root, preset, recon_seeds, encoder, long_text, device, **same) -> int:
    """Evaluate a captioning model's output on a dataset split. (`same`: options named as EvaluateJob's fields.)"""
    from eval.evaluate import EvaluateJob, run_evaluate
    from eval.metrics import metric_options

    options = metric_options(
        encoder=encoder, long_text=long_text, preset=preset, device=device, recon_seeds=recon_seeds
    )
    job = EvaluateJob(root=dataset_root, options=options, argv=["reconscore", *sys.argv[1:]], **same)
    result = run_evaluate(job)
    click.echo(result.summary_md)
    ci = result.report.get("recon_score", {}).get("ci")
    if ci is not None:
        from recon_score.seeds import ci_line

        click.echo(ci_line(ci))
    join, failed = result.join, result.failed
    if join.unmatched:
        click.echo(
            f"{len(join.unmatched)} caption rows match no {job.split} image, e.g. {join.unmatched[0]}",
            err=True,
        )
    if failed:
        click.echo(
            f"{failed} of {len(join.rows)} split images not scored (see `error` in {PER_IMAGE})", err=True
        )
    opt.smoke_banner(result.record)
    return EXIT_PARTIAL if failed else EXIT_OK
