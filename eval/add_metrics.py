"""Add caption-metric columns to a captioning run's scores.jsonl, so one table holds ReconScore next to
BLEU ... CLIPScore. Writes a new file next to the original (atomically); the original is never modified."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from eval.metrics import CaptionBatch, compute_metrics, get_metric_info, metric_options, parse_metric_names
from eval.metrics.base import image_sources
from eval.metrics.clip import DEFAULT_ENCODER
from preference_data import PreferenceFormatError, load_references
from recon_score.atomic_io import file_digest, file_sha256, jsonl_bytes
from recon_score.errors import ReconScoreError
from recon_score.run_engine import (
    Computed,
    Item,
    RunFolder,
    RunResult,
    RunSpec,
    Stage,
    check_file_target,
    load_record,
)
from recon_score.run_outputs import SCORES, output_file, read_rows
from recon_score.textfiles import file_problem


@dataclass
class AddMetricsJob:
    run: Path  # a run folder (its scores.jsonl) or a scores JSONL file
    metrics: str | list[str]
    references: Path | None = None
    images_root: Path | None = None  # default: the run's images_root (run.json)
    encoder: str = DEFAULT_ENCODER
    long_text: str = "truncate"
    preset: str = "paper"
    device: str | None = None
    out: Path | None = None  # default: <scores stem>.metrics.jsonl next to it


@dataclass
class AddMetricsResult:
    path: Path
    rows: int
    means: dict[str, float | None]
    scored: dict[str, int]
    record: dict  # what <out>.json holds; config.run: the scored run's folder


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):  # numpy scalars
        return _json_value(v.item())
    return v


def _images_root(job: AddMetricsJob, scores: Path) -> Path:
    if job.images_root is not None:
        return job.images_root
    root = load_record(scores.parent, missing_ok=True).get("images_root")
    return Path(root) if root else scores.parent


def _references(job: AddMetricsJob, names: list[str], rows: list[dict], scores: Path) -> dict[str, list[str]]:
    """Reference captions by image, when a metric needs them; at least one row's image must have some."""
    needs_refs = [n for n in names if get_metric_info(n).needs_references]
    if not needs_refs:
        return {}
    if job.references is None:
        verb = "needs" if len(needs_refs) == 1 else "need"
        raise ReconScoreError(f"{', '.join(needs_refs)} {verb} reference captions: pass --references FILE")
    try:
        refs_by_image = load_references(job.references)
    except PreferenceFormatError as err:
        raise ReconScoreError(str(err)) from err
    images = {str(r.get("image")) for r in rows}
    if not images & set(refs_by_image):
        raise ReconScoreError(
            f"no image of {scores.name} (e.g. {next(iter(images))!r}) is in {job.references} (e.g. "
            f"{next(iter(refs_by_image), None)!r}); references are matched on the `image` value exactly"
        )
    return refs_by_image


def _refuse_image_targets(
    job: AddMetricsJob, names: list[str], scores: Path, rows: list[dict], run: RunFolder
) -> None:
    """The rows' images are inputs too (known once the rows are read): neither --out nor its record may be one.

    Raises:
        ReconScoreError: naming the target and the image.
    """
    if not any(get_metric_info(n).needs_images for n in names):
        return
    sources = image_sources(_images_root(job, scores), [str(r.get("image") or "") for r in rows])
    images = list(dict.fromkeys(s for s in sources if isinstance(s, Path)))
    check_file_target(run.target, inputs=images)
    check_file_target(run.record_path, inputs=images, what="--out's record")


def add_metrics(job: AddMetricsJob) -> AddMetricsResult:
    """One Run whose one item is the whole table (CIDEr's document frequencies and the like are corpus-wide):
    its key hashes the scores file, the references, the images and every option, so a finished rerun computes
    nothing and a changed one recomputes the table."""
    names = parse_metric_names(job.metrics)
    scores = output_file(job.run, SCORES)
    problem = file_problem(scores)  # "not found", or what it is instead (a link to /dev/zero: a device)
    if problem:
        raise ReconScoreError(
            f"{scores} {problem}: pass a run folder made by `reconscore score` or its {SCORES}"
        )
    out = job.out or scores.with_name(f"{scores.stem}.metrics.jsonl")
    if out.suffix.casefold() == ".json":
        raise ReconScoreError(
            f"--out {out} ends in .json, the name of its record (OUT.json): give a .jsonl path"
        )
    # every file the command reads is an input the table and its record (OUT.json) must not overwrite
    inputs = [scores, *([job.references] if job.references is not None else [])]
    with RunFolder("metrics add", out, file_of=inputs) as run:
        # an older reconscore's run is refused before anything is computed
        load_record(scores.parent, missing_ok=True)
        rows = read_rows(scores, SCORES)
        if not rows:
            raise ReconScoreError(f"{scores} has no rows")
        _refuse_image_targets(job, names, scores, rows, run)
        present = [n for n in names if any(n in r for r in rows)]
        # never overwrite a column of the run (a score run's own recon_score, with its own preset)
        if present:
            raise ReconScoreError(
                f"{scores} already has a {', '.join(present)} column (e.g. a `reconscore score` run's own "
                "ReconScore); metrics add adds the metrics it lacks: drop them from --metrics"
            )
        res = run.run(_spec(job, names, scores, rows, out))
    result = res.results()[0]
    return AddMetricsResult(
        path=out,
        rows=len(rows),
        means=result["means"],
        scored=result["scored"],
        record=res.info,
    )


def _spec(job: AddMetricsJob, names: list[str], scores: Path, rows: list[dict], out: Path) -> RunSpec:
    refs_by_image = _references(job, names, rows, scores)
    images = None
    if any(get_metric_info(n).needs_images for n in names):
        images = image_sources(_images_root(job, scores), [str(r.get("image") or "") for r in rows])
    settings = {
        "encoder": job.encoder,
        "long_text": job.long_text,
        "preset": job.preset,
        "device": job.device,
    }
    inputs = {
        "scores_sha256": file_sha256(scores),
        "references_sha256": file_digest(job.references),
        "images_sha256": [file_digest(s) if isinstance(s, Path) else str(s) for s in images or []],
        "metrics": names,
        "options": settings,
    }

    def compute(batch: list[Item], todo: list[Item]) -> list[Computed]:
        captions = [
            r["caption"] if isinstance(r.get("caption"), str) and r["caption"].strip() else None for r in rows
        ]
        caption_batch = CaptionBatch(
            candidates=[" ".join(c.split()) if c else None for c in captions],
            references=[refs_by_image.get(str(r.get("image")), []) for r in rows],
            images=images,
        )
        table, report = compute_metrics(names, caption_batch, options=metric_options(**settings))
        result = {
            "columns": [[col, [_json_value(v) for v in table[col]]] for col in table.columns],
            "means": {n: (float(table[n].mean()) if table[n].notna().any() else None) for n in names},
            "scored": {n: int(table[n].notna().sum()) for n in names},
            "report": report,
        }
        return [(result, {})]

    def outputs(res: RunResult) -> dict[str, bytes]:
        columns = res.results()[0]["columns"]
        records = [{**row, **{col: values[i] for col, values in columns}} for i, row in enumerate(rows)]
        return {out.name: jsonl_bytes(records)}

    def record(res: RunResult) -> dict:
        result = res.results()[0]
        return {
            "scores": str(scores.resolve()),
            "references": str(job.references.resolve()) if job.references else None,
            "metrics": names,
            "means": result["means"],
            "scored_rows": result["scored"],
            "rows": len(rows),
            "rows_without_references": sum(1 for r in rows if str(r.get("image")) not in refs_by_image),
            "metric_reports": result["report"],
            "config": {"run": str(scores.parent.resolve())},
        }

    # a run folder, not a bare scores file
    upstream = [scores.parent] if load_record(scores.parent, missing_ok=True) else []
    return RunSpec(
        {},
        items=[Item(0, inputs, name="the metrics table")],
        stages=[Stage(compute)],
        outputs=outputs,
        record=record,
        upstream=upstream,
        unit="table",
    )
