"""`reconscore evaluate`: a model's captions on a dataset split, every metric, the seed 004 Table 3 layout."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.errors import EXIT_OK, EXIT_PARTIAL


@click.command(
    "evaluate",
    cls=opt.renamed({"--images-dir": "--images"}),
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
@click.option(
    "--dataset",
    required=True,
    help="rsicd | ucm-captions | sydney-captions | nwpu-captions | rsitmd | "
    "ucm-precomp | rsicd-precomp | sydney-precomp | generic",
)
@click.option(
    "--root",
    "dataset_root",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="Dataset folder (annotations + images/).",
)
@click.option("--split", default="test", show_default=True)
@click.option(
    "--annotations",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Annotation file if not at its default place under --root.",
)
@opt.images_root("ROOT/images")
@click.option(
    "--captions",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="The model's captions.",
)
@click.option(
    "--metrics",
    default="recon_score,bleu1,bleu4,meteor,rouge,cider",
    show_default=True,
    help="Comma-separated (`reconscore metrics list`).",
)
@click.option("--preset", default="paper", show_default=True, help="ReconScore preset.")
@opt.recon_seeds()
@opt.clip_encoder()
@opt.long_text()
@opt.device()
@click.option(
    "--label", default=None, help="Row label of summary.csv (default: the captions file's folder name)."
)
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def command(
    dataset,
    dataset_root,
    split,
    annotations,
    images_root,
    captions,
    metrics,
    preset,
    recon_seeds,
    encoder,
    long_text,
    device,
    label,
    out,
) -> int:
    """Evaluate a captioning model's output on a dataset split."""
    from eval.datasets import load_dataset
    from eval.evaluate import evaluate_join, join_captions, read_model_captions, summary_frame
    from eval.metrics import metric_options, parse_metric_names
    from eval.studies.common import write_table
    from recon_score.atomic_io import write_json_atomic, write_jsonl_atomic
    from recon_score.runtime import provenance, utc_now

    started = utc_now()
    names = parse_metric_names(metrics)
    ds = load_dataset(dataset, dataset_root, split, annotations=annotations, images_dir=images_root)
    join = join_captions(ds, read_model_captions(captions))
    options = metric_options(
        encoder=encoder, long_text=long_text, preset=preset, device=device, recon_seeds=recon_seeds
    )
    per_image, summary, report = evaluate_join(join, names, options=options)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(
        out / "per_image.jsonl",
        [
            {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in per_image.to_dict(orient="records")
        ],
    )
    label = label or captions.parent.name or captions.stem
    write_table(
        out,
        "summary",
        summary_frame(summary, label=label),
        title=f"{dataset}/{split}: {label} (x100 except ReconScore)",
    )
    failed = int(per_image["error"].notna().sum())
    write_json_atomic(
        out / "run.json",
        {
            "command": "evaluate",
            "dataset": ds.summary(),
            "captions": str(captions.resolve()),
            "metrics": names,
            "join": {
                "images": len(join.rows),
                "captioned": sum(r["caption"] is not None for r in join.rows),
                "unmatched_captions": join.unmatched,
                "duplicate_captions": join.duplicates,
            },
            "summary": summary,
            "metric_reports": report,
            "failed_images": failed,
            "started": started,
            "finished": utc_now(),
            "provenance": {**provenance(), "argv": ["reconscore", *sys.argv[1:]]},
        },
    )
    click.echo((out / "summary.md").read_text())
    ci = report.get("recon_score", {}).get("ci")
    if ci is not None:
        from recon_score.seeds import format_ci

        click.echo(
            f"ReconScore mean [{ci['level']:.0%} bootstrap CI over {ci['images']} images x {ci['seeds']} seeds]: "
            f"{format_ci(ci)}"
        )
    if join.unmatched:
        click.echo(
            f"{len(join.unmatched)} caption rows match no {split} image, e.g. {join.unmatched[0]}", err=True
        )
    if failed:
        click.echo(
            f"{failed} of {len(join.rows)} split images not scored (see `error` in per_image.jsonl)", err=True
        )
    return EXIT_PARTIAL if failed else EXIT_OK
