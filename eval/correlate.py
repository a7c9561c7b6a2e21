"""`reconscore correlate` as a function: load a human-judgment set, score every row with the chosen metrics,
correlate (the statistics: eval.kendall), write correlations.csv, per_item.parquet and run.json atomically."""

from __future__ import annotations

import io
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from eval.kendall import correlate
from eval.metrics import CaptionBatch, compute_metrics, get_metric_info, metric_options, parse_metric_names
from eval.metrics.base import image_sources
from eval.metrics.clip import DEFAULT_ENCODER
from eval.preferences import FORMATS, TauVariant, load_preferences
from preference_data import PreferenceFormatError
from recon_score.errors import ReconScoreError
from recon_score.progress import announce
from recon_score.run_engine import RunFolder, RunSpec
from recon_score.run_outputs import CORRELATIONS, PER_ITEM, RECORD, output_file


@dataclass
class CorrelateJob:
    preferences: Path
    fmt: str
    metrics: str | list[str]
    out: Path
    images_root: Path | None = None  # the `image` column is relative to it (default: the file's folder)
    references: Path | None = None  # separate caption/reference file (flickr8k, thumb); default: next to it
    preset: str = "paper"  # for recon_score
    encoder: str = DEFAULT_ENCODER  # for clipscore / refclipscore
    long_text: str = "truncate"  # CLIP's 77-token limit: truncate | sliding-window
    device: str | None = None
    headline: str | None = None  # b | c; default: the format's own (eval.preferences)
    n_boot: int = 1000
    seed: int = 0
    metric_instances: dict = field(default_factory=dict, repr=False)  # ready metrics to reuse (tests)
    argv: list[str] = field(default_factory=list)  # the command line, for the record (default: sys.argv)


@dataclass
class CorrelateResult:
    correlations: pd.DataFrame
    per_item: pd.DataFrame
    run: dict
    written: list[Path] = field(default_factory=list)  # the files written: the tables, then the record


def run_correlate(job: CorrelateJob) -> CorrelateResult:
    """The run folder is checked (kind, lock) before anything is read or computed."""
    with RunFolder("correlate", job.out, argv=job.argv) as run:
        return _correlate(job, run)


def _correlate(job: CorrelateJob, run: RunFolder) -> CorrelateResult:
    names = parse_metric_names(job.metrics)
    fmt = FORMATS[job.fmt]
    headline = TauVariant(job.headline) if job.headline else fmt.headline
    announce(f"correlate: reading {job.preferences} ({job.fmt}); metrics {', '.join(names)}")
    try:
        table = load_preferences(job.preferences, job.fmt, references=job.references)
    except (PreferenceFormatError, ValueError) as err:
        raise ReconScoreError(str(err)) from err
    announce(f"correlate: {len(table)} judged captions of {table['image'].nunique()} images")
    needs_images = [n for n in names if get_metric_info(n).needs_images]
    images_root = job.images_root
    if images_root is None and needs_images and fmt.ships_images:
        images_root = job.preferences.parent
    if images_root is not None and not images_root.is_dir():
        raise ReconScoreError(f"--images {images_root} is not a folder")
    if needs_images and images_root is None:
        verb = "needs" if len(needs_images) == 1 else "need"
        raise ReconScoreError(
            f"{', '.join(needs_images)} {verb} images, and {job.fmt} ships none: pass --images ROOT (the folder "
            "its image file names are relative to), or keep to the text metrics"
        )
    batch = CaptionBatch(
        candidates=table["candidate"].tolist(),
        references=table["references"].tolist(),
        images=image_sources(images_root, table["image"].tolist()) if needs_images else None,
    )
    scores, report = compute_metrics(
        names,
        batch,
        options=metric_options(
            encoder=job.encoder, long_text=job.long_text, preset=job.preset, device=job.device
        ),
        metrics=job.metric_instances,
    )
    announce(f"correlate: Kendall τ of {len(names)} metric(s), {job.n_boot} bootstrap resamples over images")
    correlations = correlate(
        table,
        {n: scores[n].to_numpy() for n in names},
        higher_is_better_by_metric={n: get_metric_info(n).higher_is_better for n in names},
        n_boot=job.n_boot,
        seed=job.seed,
    )
    per_item = pd.concat([table.reset_index(drop=True), scores], axis=1)
    buf = io.BytesIO()
    per_item.to_parquet(buf, index=False)
    files = {
        CORRELATIONS: correlations.to_csv(index=False, float_format="%.4f").encode("utf-8"),
        PER_ITEM: buf.getvalue(),
    }
    info = {
        "preferences": str(job.preferences.resolve()),
        "format": job.fmt,
        "references": str(job.references.resolve()) if job.references else None,
        "images_root": str(images_root.resolve()) if images_root else None,
        "metrics": names,
        "protocol": {
            "flattening": "one observation per (image, candidate, human judgment) row; no averaging over raters",
            "kendall": "scipy.stats.kendalltau(metric, human, variant='b'|'c') x 100",
            "orientation": "judgments oriented larger = better (ranks negated: rank 1 = best)",
            "headline": f"tau_{headline.value}",
            "ci": f"percentile bootstrap over images (95%) of tau_b, tau_c and pairwise_acc, {job.n_boot} "
            f"resamples, seed {job.seed} (the same draws for each)",
            "pairwise_acc": "within-image pairs of different candidates people order strictly; metric ties = 1/2",
            "dataset_notes": table.attrs.get("notes", []),
        },
        "counts": {"rows": len(table), "images": int(table["image"].nunique())},
        "job": {
            f.name: str(v) if isinstance(v := getattr(job, f.name), Path) else v
            for f in fields(job)
            if f.name not in ("metric_instances", "argv")
        },
        "metric_reports": report,
    }
    record = run.run(RunSpec({}, outputs=lambda _: files, record=lambda _: info)).info
    written = [run.out / name for name in files] + [output_file(run.out, RECORD)]
    return CorrelateResult(correlations=correlations, per_item=per_item, run=record, written=written)
