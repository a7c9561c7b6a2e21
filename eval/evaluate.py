"""A captioning model's output on a dataset split: join by image, compute metrics, summarise (the ReconScore
paper's Table 3). See docs/evaluate.md for the join rules and which metrics are corpus-level."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from eval.datasets import CaptionDataset
from eval.metrics.registry import METRICS
from recon_score.errors import InputError, ReconScoreError
from recon_score.textfiles import csv_dicts, json_objects, safe_text, unencodable


@dataclass
class JoinResult:
    rows: list[dict]  # one per split image: image_id, image, path, references, caption, error
    unmatched: list[str]  # caption rows that match no split image
    duplicates: list[str]  # images captioned more than once (first caption kept)


def read_model_captions(path: Path) -> list[tuple[str, str | None, str]]:
    """(key, caption, location) per row of a JSONL/CSV of model captions (e.g. `reconscore describe`'s
    captions.jsonl, or any table with image_id/image/id + caption)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        records = json_objects(path)
    elif suffix in (".csv", ".tsv"):
        records = csv_dicts(path)[1]
    else:
        raise ReconScoreError(f"{path}: model captions must be .jsonl or .csv")
    return [_key(rec, f"{path.name}:{lineno}") for lineno, rec in records]


def _key(rec: dict, where: str) -> tuple[str, str | None, str]:
    key = rec.get("image_id") or rec.get("image") or rec.get("id")
    if not key:
        raise ReconScoreError(f"{where}: a caption row needs `image_id`, `image` or `id`")
    bad = unencodable(rec, "the row")
    if bad:  # that image's row gets the error; the rest of the file is fine
        return str(safe_text(key)), InputError(f"{where}: {bad}"), where
    cap = rec.get("caption")
    return str(key), (cap if isinstance(cap, str) and cap.strip() else None), where


def join_captions(ds: CaptionDataset, captions: list[tuple[str, str | None, str]]) -> JoinResult:
    lookup: dict[str, int] = {}
    for level in (
        lambda s: s.image_id,
        lambda s: s.image,
        lambda s: Path(s.image).name,
        lambda s: Path(s.image).stem,
    ):
        for i, s in enumerate(ds.listed):
            lookup.setdefault(level(s), i)
    found: dict[int, str | None] = {}
    unmatched, duplicates = [], []
    for key, cap, where in captions:
        i = lookup.get(key, lookup.get(Path(key).name, lookup.get(Path(key).stem)))
        if i is None:
            unmatched.append(f"{where}: {key}")
        elif i in found:
            duplicates.append(f"{where}: {key}")
        else:
            found[i] = cap
    missing = {id(m) for m in ds.missing}
    rows = []
    for i, s in enumerate(ds.listed):
        err = None
        if id(s) in missing:
            err = f"image {s.image!r} not found in {ds.images_dir}"
        elif i not in found:
            err = "no caption for this image in the model output"
        elif found[i] is None:
            err = "empty caption"
        elif isinstance(found[i], InputError):
            err, found[i] = str(found[i]), None
        rows.append(
            {
                "image_id": s.image_id,
                "image": s.image,
                "path": s.path,
                "references": s.references,
                "caption": found.get(i),
                "error": err,
            }
        )
    return JoinResult(rows, unmatched, duplicates)


def _no_usable_caption(join: JoinResult, shown: int = 3) -> str:
    """Why nothing can be scored, with the count and the first few caption rows that matched no split image
    (and split ids to compare them with), or the first few split images' errors."""
    text = "no split image has a usable caption"
    if join.unmatched:
        ids = ", ".join(repr(r["image_id"]) for r in join.rows[:shown])
        first = "; ".join(join.unmatched[:shown])
        return (
            f"{text}: {len(join.unmatched)} caption row(s) match no split image (first: {first}); the split's "
            f"image ids are like {ids}: check that the model output's image ids match them"
        )
    errors = [f"{r['image_id']}: {r['error']}" for r in join.rows if r["error"]][:shown]
    return f"{text} (first: {'; '.join(errors)})" if errors else f"{text} (the split lists no image)"


def evaluate_join(
    join: JoinResult, metrics: list[str], *, options: dict | None = None
) -> tuple[pd.DataFrame, dict, dict]:
    """(per-image table, summary {metric: value in paper scale}, per-metric report)."""
    from eval.metrics import CaptionBatch, compute_metrics, get_metric_info

    usable = [r for r in join.rows if r["error"] is None]
    per_image = pd.DataFrame([{"image_id": r["image_id"], "caption": r["caption"]} for r in join.rows])
    if not usable:
        raise ReconScoreError(_no_usable_caption(join))
    needs_images = any(get_metric_info(m).needs_images for m in metrics)
    batch = CaptionBatch(
        [r["caption"] for r in usable],
        [r["references"] for r in usable],
        [r["path"] for r in usable] if needs_images else None,
    )
    table, report = compute_metrics(metrics, batch, options=options)
    pos = {r["image_id"]: k for k, r in enumerate(usable)}
    for col in table.columns:
        per_image[col] = [table[col].iloc[pos[i]] if i in pos else None for i in per_image["image_id"]]
    errors = []
    for r, values in zip(join.rows, per_image.to_dict("records")):
        bad = [m for m in metrics if _isnan(values[m])]
        errors.append(r["error"] or (f"no value for {', '.join(bad)}" if bad else None))
    per_image["error"] = errors
    summary = {}
    for m in metrics:
        corpus = report.get(m, {}).get("corpus")
        vals = np.asarray(table[m], dtype=float)
        value = (
            corpus
            if corpus is not None
            else (float(np.nanmean(vals)) if np.isfinite(vals).any() else math.nan)
        )
        summary[m] = value * METRICS[m].display_scale
        report.setdefault(m, {})["summary"] = "corpus" if corpus is not None else "mean over images"
    return per_image, summary, report


def _isnan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def summary_frame(summary: dict, *, label: str) -> pd.DataFrame:
    row = {METRICS[k].paper_name: v for k, v in summary.items()}
    return pd.DataFrame([row], index=pd.Index([label], name="model"))


@dataclass
class EvaluateJob:
    """`reconscore evaluate` as a function: a model's captions on a dataset split, every metric."""

    dataset: str
    root: Path
    split: str
    captions: Path
    metrics: str | list[str]
    out: Path
    annotations: Path | None = None
    images_root: Path | None = None  # default ROOT/images
    options: dict | None = None  # metric constructor options (eval.metrics.metric_options)
    label: str | None = None  # summary row label (default: the captions file's folder name)
    argv: list[str] | None = None


@dataclass
class EvaluateResult:
    join: JoinResult
    failed: int  # split images without a value for every metric
    report: dict  # per metric: config, info, the CI of the mean recon_score
    summary_md: str = ""  # summary.md as written (the Table 3 row under its title), for the CLI to print
    record: dict = field(default_factory=dict)  # the run's record


def run_evaluate(job: EvaluateJob) -> EvaluateResult:
    """Score, then write per_image.jsonl, summary.csv/.md (the ReconScore paper's Table 3 layout) and run.json;
    the run folder is checked (kind, lock) before anything is read."""
    from recon_score.run_engine import RunFolder

    with RunFolder("evaluate", job.out, argv=job.argv or []) as run:
        return _evaluate(job, run)


def _evaluate(job: EvaluateJob, run) -> EvaluateResult:
    from eval.datasets import load_dataset
    from eval.metrics import parse_metric_names
    from eval.studies.common import table_files
    from recon_score.atomic_io import jsonl_bytes
    from recon_score.run_engine import RunSpec
    from recon_score.run_outputs import PER_IMAGE, SUMMARY, SUMMARY_MD

    names = parse_metric_names(job.metrics)
    ds = load_dataset(
        job.dataset, job.root, job.split, annotations=job.annotations, images_dir=job.images_root
    )
    join = join_captions(ds, read_model_captions(job.captions))
    per_image, summary, report = evaluate_join(join, names, options=job.options)
    rows = per_image.to_dict(orient="records")
    label = job.label or job.captions.parent.name or job.captions.stem
    title = f"{job.dataset}/{job.split}: {label} (x100 except ReconScore)"
    files = {PER_IMAGE: jsonl_bytes([{k: None if _isnan(v) else v for k, v in r.items()} for r in rows])}
    files |= table_files(SUMMARY, summary_frame(summary, label=label), title=title)
    failed = int(per_image["error"].notna().sum())
    info = {
        "dataset": ds.summary(),
        "split": {  # the split as `load_dataset` reads it again (annotate build: the images and references)
            "dataset": job.dataset,
            "root": str(Path(job.root).resolve()),
            "split": job.split,
            "annotations": str(Path(job.annotations).resolve()) if job.annotations else None,
            "images_root": str(Path(job.images_root).resolve()) if job.images_root else None,
        },
        "captions": str(job.captions.resolve()),
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
    }
    record = run.run(RunSpec({}, outputs=lambda _: files, record=lambda _: info)).info
    summary_md = files[SUMMARY_MD].decode("utf-8")
    return EvaluateResult(join=join, failed=failed, report=report, summary_md=summary_md, record=record)
