"""`reconscore metrics`: the caption metric registry, and adding metric columns to a scored run."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import SuggestingGroup
from eval.cli import options as opt
from recon_score.presets import PRESETS


@click.group("metrics", cls=SuggestingGroup)
def command() -> None:
    """List caption metrics; add metric columns to a run's scores.jsonl."""


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> int:
    """Every registered metric: direction, what it needs, range, backend."""
    import dataclasses
    import json

    from eval.metrics import MetricEntry, list_metrics

    infos = list_metrics()
    if as_json:
        keys = [f.name for f in dataclasses.fields(MetricEntry) if f.name != "target"]
        rows = [{k: getattr(m, k) for k in keys} | {"value_range": m.range_text} for m in infos]
        click.echo(json.dumps(rows, indent=2))
        return 0
    w = max(13, *(len(m.name) for m in infos))
    click.echo(f"{'name':{w}s} {'better':7s} {'refs':5s} {'images':7s} {'range':11s} description")
    for m in infos:
        click.echo(
            f"{m.name:{w}s} {'higher' if m.higher_is_better else 'lower':7s} {'yes' if m.needs_references else 'no':5s} "
            f"{'yes' if m.needs_images else 'no':7s} {m.range_text:11s} {m.help}"
        )
    return 0


@command.command(
    "add",
    epilog="""\b
Examples:
  reconscore score --preset smoke --out runs/sample
  reconscore metrics add runs/sample --references recon_score/sample/references.json \\
      --metrics bleu4,meteor,rouge,cider,clipscore --encoder smoke:open-clip
\b
Writes SCORES.metrics.jsonl next to the scores file (each row as it was, plus one column per metric and the
metrics' extra columns, null where a row cannot be scored) and SCORES.metrics.json (settings, provenance,
means). References are matched to rows by the `image` column; a references file is a JSON list of
{"image", "captions"} (like recon_score/sample/references.json), a JSON object image -> [captions], or JSONL
of {"image", "references"}.""",
)
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@opt.metric_names(required=True)
@opt.optional_file("--references", help="Reference captions per image (needed by reference-based metrics).")
@opt.images_root("the run's images_root in run.json", extra=" Only image metrics need it.")
@opt.clip_encoder()
@opt.long_text()
@opt.preset(PRESETS, "ReconScore preset (recon_score metric). ")
@opt.device()
@opt.optional_file("--out", help="Output JSONL path.")
def add_cmd(**job) -> int:
    """Add metric columns to RUN's scores.jsonl (RUN: a run folder or a scores.jsonl file)."""
    from eval.add_metrics import AddMetricsJob, add_metrics

    job = AddMetricsJob(**job)  # every option is named as the job's field
    result = add_metrics(job)
    click.echo(f"wrote {result.path} ({result.rows} rows)")
    for name, mean in result.means.items():
        shown = "n/a" if mean is None else f"{mean:.4f}"
        click.echo(f"  {name:13s} mean {shown}  ({result.scored[name]} rows scored)")
    opt.smoke_banner(result.record)
    return 0
