"""`reconscore score`'s spec for the one Run: a captions table in, scores.jsonl, reconstructions/ and run.json out."""

from __future__ import annotations

import functools
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recon_score.artifact_cache import ArtifactCache
from recon_score.atomic_io import file_digest, jsonl_bytes, png_bytes
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError
from recon_score.explain import ExplainOptions, explain_row, explain_summary
from recon_score.images import load_image
from recon_score.inputs import InputRow, read_caption_rows
from recon_score.presets import SMOKE_NOTE, ReconPreset
from recon_score.progress import announce
from recon_score.run_engine import Item, RunFolder, RunResult, RunSpec, Stage
from recon_score.run_outputs import RECONSTRUCTIONS, SCORES
from recon_score.runtime import resolve_device
from recon_score.sanity import references_vs_distractors
from recon_score.seeds import derive_seeds, seed_summary

SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
SAMPLE_CAPTIONS = SAMPLE_DIR / "captions.jsonl"  # the bundled sample's input table (not a describe output)


@dataclass
class ScoreJob:
    captions: Path | None
    out: Path
    preset: ReconPreset
    images_root: Path | None = None
    device: str | None = None
    batch_size: int = 1
    cache_dir: Path | None = None
    use_cache: bool = True
    weights_dir: Path | None = None
    trust_remote_code: bool = False  # a preset's custom pipeline file may run (recon_score.render)
    offload: str = "none"
    limit: int | None = None
    retry_errors: bool = False
    overwrite: bool = False
    argv: list[str] = field(default_factory=list)
    rows: list[InputRow] | None = None  # precomputed input rows (e.g. a dataset split) instead of `captions`
    source: dict | None = None  # what `rows` came from, for run.json
    seeds: int = 1  # K renders per caption (recon_score.seeds); 1 = the preset's seed only, as the paper
    bands: tuple[int, ...] | None = None  # raster bands shown as RGB (recon_score.images.load_image)
    # gap maps and phrase attributions per scored row (recon_score.explain)
    explain: ExplainOptions | None = None


@dataclass
class ScoreSummary:
    """What this invocation did; the run's figures (rows, scores, mean, ...) are its record's, run.json's."""

    record: dict  # run.json (process 0), written now or found finished
    failures: list[tuple[str, str]]
    already_complete: bool
    resumed: int  # rows finished by an earlier invocation, read back from the journal
    rendered: int
    cached: int
    explain: dict | None = None  # --explain: phrases attributed, significant, hurt; where the maps are

    @property
    def exit_code(self) -> int:
        return EXIT_PARTIAL if self.failures else EXIT_OK


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60].strip("._") or "row"


def _settings(job: ScoreJob, device: str) -> dict:
    """Everything a run's results depend on besides its rows (the fingerprint; a change is named)."""
    from recon_score.render import effective_dtype

    return {
        "kind": "score-run",
        "preset": job.preset.to_dict(),
        "dtype": effective_dtype(job.preset.dtype, device),
        "device_type": device.split(":")[0],
        "batch_size": job.batch_size,
        "seeds": job.seeds,
        "bands": list(job.bands) if job.bands is not None else None,
        "explain": asdict(job.explain) if job.explain is not None else None,
    }


def _caption(row: InputRow) -> str | None:
    """The caption as scores.jsonl and the journal keep it: a number or a list in the table becomes its text."""
    return row.caption if isinstance(row.caption, str) or row.caption is None else str(row.caption)


def _row_inputs(row: InputRow) -> dict:
    """Everything a row's result is computed from: its resume key hashes it."""
    return {
        "id": row.id,
        "image": row.image,
        "caption": _caption(row),
        "image_sha256": file_digest(row.image_path),
        "error": row.error,
    }


# scores.jsonl's fields of a result, in the file's order (after id, image, caption)
RESULT_FIELDS = ("recon_score", "cosine", "reconstruction", "error", "width", "height", "truncated")


def _row_record(row: InputRow, res, *, note: str | None) -> tuple[dict, dict[str, bytes]]:
    """scores.jsonl's row for one result, and its reconstruction's bytes by run-relative path."""
    files: dict[str, bytes] = {}
    # one schema for every row: a row that failed before rendering has every field too, as null
    rec = {"id": row.id, "image": row.image, "caption": _caption(row), **dict.fromkeys(RESULT_FIELDS)}
    rec["error"] = row.error
    if res is not None:
        rec.update({k: getattr(res, k) for k in RESULT_FIELDS if k != "reconstruction"})
        if res.distance is not None and res.cosine is None:
            rec["distance"] = res.distance
        if res.per_seed is not None:  # --seeds K > 1 (ReconScorer.score_seeds)
            rec.update(seeds=res.seeds, recon_score_per_seed=res.per_seed, recon_score_std=res.std)
        if res.error is None:  # the scorer turns a non-finite similarity into the row's error
            rel = str(Path(RECONSTRUCTIONS) / f"{row.index:06d}_{_slug(row.id)}.png")
            files[rel] = png_bytes(res.reconstruction)
            rec["reconstruction"] = rel
    if note:
        rec["note"] = note
    return rec, files


def _located(row: InputRow, result: dict) -> dict:
    """A result as scores.jsonl shows it: an error names the table's file and line as they are now (not as when
    it was journaled: a blank line added above it, or the table renamed, changes them and nothing else)."""
    error = result.get("error")
    if error and row.where and not error.startswith(f"{row.where}:"):
        return {**result, "error": f"{row.where}: {error}"}
    return result


def run_score(job: ScoreJob) -> ScoreSummary:
    """Score every row of `job.captions` through the Run (sharded, resumable: docs/runs.md)."""
    import torch
    from accelerate import PartialState

    # cpu=True is what turns a torchrun/`accelerate launch --multi_gpu` launch on a GPU-less machine into
    # gloo-backed MULTI_CPU; a plain single-process call is unaffected
    state = PartialState(cpu=job.device == "cpu" or not torch.cuda.is_available())
    # accelerate names a CPU process's device "cpu:0": normalise it, the Z-Image DiT gives other floats on "cpu:0"
    device = resolve_device(job.device if state.num_processes == 1 else str(state.device))
    with RunFolder("score", job.out, state=state, overwrite=job.overwrite, argv=job.argv) as run:
        rows = job.rows if job.rows is not None else read_caption_rows(job.captions, root=job.images_root)
        work = _ScoreWork(job, device, rows[: job.limit] if job.limit is not None else rows)
        return work.summary(run.run(work.spec()))


RECENT_IMAGES = 8  # decoded originals kept between chunks


class _ScoreWork:
    """What score hands the Run: its rows as items, the chunk's rendering and scoring, scores.jsonl, run.json."""

    def __init__(self, job: ScoreJob, device: str, rows: list[InputRow]):
        self.job, self.device, self.rows = job, device, rows
        self.by_index = {row.index: row for row in rows}
        self.seeds = derive_seeds(job.preset.seed, job.seeds)
        self.explain_seeds = derive_seeds(job.preset.seed, job.explain.seeds) if job.explain else []
        # the latest images read (a file's captions usually follow each other): each file is decoded once
        self.image = functools.lru_cache(maxsize=RECENT_IMAGES)(self._load_image)
        self._scorer, self.worked, self._merged = None, False, None

    @property
    def scorer(self):
        if self._scorer is None:
            from recon_score.scorer import ReconScorer

            job = self.job
            self._scorer = ReconScorer(
                job.preset,
                device=self.device,
                batch_size=job.batch_size,
                cache=ArtifactCache(job.cache_dir, enabled=job.use_cache),
                weights_dir=job.weights_dir,
                offload=job.offload,
                trust_remote_code=job.trust_remote_code,
            )
        return self._scorer

    @property
    def stats(self) -> dict:
        """What this invocation rendered and found cached (nothing when it built no scorer)."""
        return self._scorer.stats if self._scorer is not None else {}

    def spec(self) -> RunSpec:
        job = self.job
        items = [Item(r.index, _row_inputs(r), name=f"row {r.index} (id {r.id!r})") for r in self.rows]
        return RunSpec(
            settings=_settings(job, self.device),
            items=items,
            stages=[Stage(self.compute)],
            outputs=lambda res: {SCORES: jsonl_bytes(self.merged(res))},
            record=self.info,
            prepare=self.prepare,
            weight=(lambda item: _row_renders(job, self.by_index[item.id])) if job.explain else None,
            chunk=job.batch_size,
            retry_errors=job.retry_errors,
            progress="render" if job.explain else "caption",
            # scores.jsonl also shows the table's own columns, and its errors name FILE:LINE
            depends=[[row.extra, row.where] for row in self.rows],
        )

    def compute(self, chunk: list[Item], todo: list[Item]) -> list[tuple[dict, dict[str, bytes]]]:
        """A chunk rendered and scored whole, as composed (a half-done one bypasses the cache)."""
        job, self.worked = self.job, True
        rows = [self.by_index[item.id] for item in chunk]
        pairs = [
            (InputError(r.error) if r.error is not None else self.image(r.image_path, r.image), r.caption)
            for r in rows
        ]
        results = self.scorer.score_seeds(pairs, self.seeds, force_render=len(todo) < len(chunk))
        by_index = {row.index: (res, pair) for row, res, pair in zip(rows, results, pairs)}
        note = SMOKE_NOTE if job.preset.meaningless else None
        out = []
        for item in todo:
            row = self.by_index[item.id]
            res, pair = (None, None) if row.error is not None else by_index[row.index]
            rec, files = _row_record(row, res, note=note)
            if job.explain is not None and res is not None and res.error is None:
                stem = Path(next(iter(files))).stem
                rec["explain"], maps = explain_row(
                    self.scorer, pair[0], rec["caption"], self.explain_seeds, job.explain, stem
                )
                files.update(maps)  # the explanation computes, the Run writes
            out.append((rec, files))
        return out

    def _load_image(self, path: Path, name: str):
        """The decoded image, or its load error (the row's error)."""
        try:
            return load_image(path, name=name, bands=self.job.bands, reader=self.job.preset.image_reader)
        except InputError as err:
            return err

    def prepare(self, todo: list[Item]) -> None:
        """Every missing model named before any work; with --explain, the renders it will cost."""
        self.scorer.preflight("score")
        if self.job.explain is not None:
            rows = [self.by_index[item.id] for item in todo]
            usable = [r.caption for r in rows if _explainable(r)]
            announce(self.job.explain.cost(usable, besides=self.job.seeds * len(rows)))

    def merged(self, res: RunResult) -> list[dict]:
        """scores.jsonl's rows in input order, merged once; the input's own columns come from the input, not the
        journal."""
        if self._merged is None:
            self._merged = [
                {**_located(row, r), **{k: v for k, v in (row.extra or {}).items() if k not in r}}
                for row, r in zip(self.rows, res.results())
            ]
        return self._merged

    def summary(self, res: RunResult) -> ScoreSummary:
        """The same summary whether this invocation computed or found the run finished."""
        stats = self.stats
        results = [_located(row, res.records[""].get(row.index, {}).get("result", {})) for row in self.rows]
        failures = [
            (row.id, r.get("error") or "not processed")
            for row, r in zip(self.rows, results)
            if not _scored(r)
        ]
        return ScoreSummary(
            record=res.info,
            failures=failures,
            already_complete=res.complete,
            resumed=res.resumed,
            rendered=stats.get("rendered", 0),
            cached=stats.get("reconstruction_cache_hits", 0),
            explain=explain_summary(results),
        )

    def info(self, res: RunResult) -> dict:
        """run.json's fields of score."""
        job, ordered = self.job, self.merged(res)
        stats = self.stats
        scores = [r["recon_score"] for r in ordered if _scored(r)]
        images_root = (job.source or {}).get("images_dir")
        if job.captions:
            images_root = str((job.images_root or job.captions.parent).resolve())
        return {
            "note": SMOKE_NOTE if job.preset.meaningless else None,
            "captions": str(job.captions.resolve()) if job.captions else None,
            "images_root": images_root,
            "source": job.source,
            "out": str(job.out.resolve()),
            "config": (None if self.worked else res.previous.get("config")) or self.scorer.config(),
            "batch_size": job.batch_size,
            "bands": list(job.bands) if job.bands else None,
            "limit": job.limit,
            "cache": {"enabled": job.use_cache, "root": str(self.scorer.cache.root)},
            "counts": {
                "rows": len(ordered),
                "ok": len(scores),
                "failed": len(ordered) - len(scores),
                "rendered_this_session": stats.get("rendered", 0),
                "reconstruction_cache_hits": stats.get("reconstruction_cache_hits", 0),
                "recomputed_changed_inputs": len(res.changed),
            },
            "summary": {
                "recon_score_mean": statistics.fmean(scores) if scores else None,
                "recon_score_std": statistics.stdev(scores) if len(scores) > 1 else None,  # one: none, not 0
                "references_vs_distractors": references_vs_distractors(ordered),
            },
            **({"seed_noise": seed_summary(ordered, self.seeds)} if job.seeds > 1 else {}),
        }


def _scored(result: dict) -> bool:
    """A row with a ReconScore: the printed failures are the others, the record's mean is over these."""
    return not result.get("error") and result.get("recon_score") is not None


def _row_renders(job: ScoreJob, row: InputRow) -> int:
    """What a row renders: the score's K, and with --explain its (phrases + 1) x K' (recon_score.explain)."""
    return job.seeds + (
        job.explain.renders(row.caption) if job.explain is not None and _explainable(row) else 0
    )


def _explainable(row: InputRow) -> bool:
    """A row with a caption to explain: one that read without error, as text."""
    return row.error is None and isinstance(row.caption, str)
