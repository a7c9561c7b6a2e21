"""`reconscore score`: a captions table in, scores.jsonl + run.json + reconstructions/ out.

Resumable and multi-process through the one run engine (recon_score.run_engine, docs/runs.md); this module
holds only what is score's own: rows, chunks, rendering and scoring, scores.jsonl's rows.
- rows are processed in fixed chunks of `batch_size` consecutive rows of the *input* (chunk j = rows
  j*B .. j*B+B-1), whatever the number of processes; with `accelerate launch` chunk j goes to process
  j mod world_size, so every batch is composed the same way whichever process runs it. Each process appends to
  its own journal; process 0 merges them, in input order, into one scores.jsonl;
- a killed run restarted with the same --out skips finished chunks and re-renders a half-finished chunk whole,
  in the same composition; a finished run rerun is a no-op, or a repair when its outputs no longer match the
  journal. A row whose inputs changed (caption, id, image path, the image file's bytes) is recomputed, and the
  run logs how many and why;
- process 0 holds an fcntl lock on --out for the run: a second command on the same folder exits at once;
- run.json lists every invocation that worked on the folder (journal/invocations.jsonl).
"""

from __future__ import annotations

import hashlib
import re
import statistics
import sys
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recon_score.artifact_cache import ArtifactCache
from recon_score.atomic_io import atomic_write_bytes, jsonl_bytes, png_bytes, sha256_json
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError
from recon_score.explain import ExplainOptions, explain_row, explain_summary
from recon_score.images import load_image
from recon_score.inputs import InputRow, read_caption_rows
from recon_score.presets import SMOKE_NOTE, ReconPreset
from recon_score.progress import Progress
from recon_score.run_engine import FileDigests, Plan, RunFolder, resume_key
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
    rows: list[InputRow] | None = (
        None  # precomputed input rows (e.g. from a dataset split) instead of `captions`
    )
    source: dict | None = None  # what `rows` came from, for run.json
    seeds: int = 1  # K renders per caption (recon_score.seeds); 1 = the preset's seed only, as the paper
    bands: tuple[int, ...] | None = None  # raster bands shown as RGB (recon_score.images.load_image)
    # gap maps and phrase attributions per scored row (recon_score.explain)
    explain: ExplainOptions | None = None


@dataclass
class ScoreSummary:
    total: int
    ok: int
    failed: int
    mean: float | None
    std: float | None
    rendered: int
    cached: int
    already_complete: bool
    failures: list[tuple[str, str]]
    ci: dict | None = None  # K > 1: the CI of the mean over images x seeds (recon_score_ci)
    repaired: list[str] = field(default_factory=list)  # what a rerun rebuilt from the journal
    resumed: int = 0  # rows finished by an earlier invocation, read back from the journal
    kinds: dict | None = None  # rows with `kind` (the bundled sample): references vs distractors (run.json)
    explain: dict | None = None  # --explain: phrases attributed, significant, hurt; where the maps are

    @property
    def exit_code(self) -> int:
        return EXIT_PARTIAL if self.failed else EXIT_OK


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60].strip("._") or "row"


def _fingerprint(job: ScoreJob, device: str) -> str:
    return sha256_json(_settings(job, device))[:16]


def _settings(job: ScoreJob, device: str) -> dict:
    """Everything a run's results depend on besides its rows: hashed into the fingerprint, and kept in the
    journal header so a changed setting on an existing --out is named."""
    from recon_score.render import effective_dtype

    key = {
        "kind": "score-run",
        "preset": job.preset.to_dict(),
        "dtype": effective_dtype(job.preset.dtype, device),
        "device_type": device.split(":")[0],
        "batch_size": job.batch_size,
    }
    if job.seeds > 1:  # K = 1 keeps the fingerprint of a run without --seeds
        key["seeds"] = job.seeds
    if job.bands is not None:  # only when set, so runs without --bands keep their fingerprint
        key["bands"] = list(job.bands)
    if job.explain is not None:
        key["explain"] = asdict(job.explain)
    return key


def _chunks(rows: list[InputRow], size: int) -> list[list[InputRow]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def _row_inputs(row: InputRow, digests: FileDigests) -> dict:
    """Everything a row's result is computed from, journaled with it (the resume key hashes it)."""
    caption = row.caption if isinstance(row.caption, str) or row.caption is None else str(row.caption)
    return {
        "id": row.id,
        "image": row.image,
        "caption": caption,
        "image_sha256": digests(row.image_path),
        "error": row.error,
    }


def _row_record(row: InputRow, res, out: Path, *, note: str | None) -> tuple[dict, dict[str, str]]:
    """scores.jsonl's row for one result, and {reconstruction path: sha256 of its bytes} when one was written."""
    files: dict[str, str] = {}
    rec = {
        "id": row.id,
        "image": row.image,
        "caption": row.caption if isinstance(row.caption, str) or row.caption is None else str(row.caption),
        "recon_score": None,
        "cosine": None,
        "reconstruction": None,
        "error": row.error,
        "width": None,  # one schema for every row: a row that failed before rendering has them too, as null
        "height": None,
        "truncated": None,
    }
    if res is not None:
        rec.update(
            recon_score=res.recon_score,
            cosine=res.cosine,
            error=res.error,
            width=res.width,
            height=res.height,
            truncated=res.truncated,
        )
        if res.distance is not None and res.cosine is None:
            rec["distance"] = res.distance
        if res.per_seed is not None:  # --seeds K > 1 (ReconScorer.score_seeds)
            rec.update(seeds=res.seeds, recon_score_per_seed=res.per_seed, recon_score_std=res.std)
        if res.error is None:  # the scorer turns a non-finite similarity into the row's error
            rel = Path(RECONSTRUCTIONS) / f"{row.index:06d}_{_slug(row.id)}.png"
            data = png_bytes(res.reconstruction)
            atomic_write_bytes(out / rel, data)
            rec["reconstruction"] = str(rel)
            files[str(rel)] = hashlib.sha256(data).hexdigest()
    if rec["error"] and row.where and not rec["error"].startswith(f"{row.where}:"):
        rec["error"] = f"{row.where}: {rec['error']}"  # image and caption errors name the file and line too
    if note:
        rec["note"] = note
    return rec, files


def run_score(job: ScoreJob) -> ScoreSummary:
    """Score every row of `job.captions`; see the module docstring for sharding and resume."""
    import torch
    from accelerate import PartialState

    # cpu=True is what turns a torchrun/`accelerate launch --multi_gpu` launch on a GPU-less machine into
    # gloo-backed MULTI_CPU; a plain single-process call is unaffected
    state = PartialState(cpu=job.device == "cpu" or not torch.cuda.is_available())
    # accelerate names a CPU process's device "cpu:0": normalise it, the Z-Image DiT gives other floats on "cpu:0"
    device = resolve_device(job.device if state.num_processes == 1 else str(state.device))
    with RunFolder("score", job.out, state=state, overwrite=job.overwrite, argv=job.argv) as run:
        rows, plan = _plan(job, run, device)
        if plan.complete:  # the same summary as the run that finished it, read from the journal
            summary = _summarize(rows, plan.done, already_complete=True, rendered=0, cached=0)
            merged = _merged(plan, rows)
            summary.kinds = references_vs_distractors(merged)
            if job.seeds > 1:
                summary.ci = seed_summary(merged, derive_seeds(job.preset.seed, job.seeds)).get(
                    "recon_score_ci"
                )
            return summary
        resumed = sum(plan.is_done(r.index) for r in rows)
        scorer = _scorer(job, device)
        todo = [
            c for c in run.mine(_chunks(rows, job.batch_size)) if not all(plan.is_done(r.index) for r in c)
        ]
        if todo:
            scorer.preflight("score")  # every missing model named here, before any image is read or written
        inv = run.begin(plan, batch_size=job.batch_size)
        _score_chunks(job, run, plan, scorer, rows, todo, inv)
        run.reload(plan)
        stats = scorer.stats["rendered"], scorer.stats["reconstruction_cache_hits"]
        summary = _summarize(rows, plan.done, already_complete=False, rendered=stats[0], cached=stats[1])
        summary.resumed = resumed
        if run.is_main:
            summary.ci = _finish(job, run, plan, rows, scorer, summary, inv, worked=bool(todo))
        return summary


def _plan(job: ScoreJob, run: RunFolder, device: str) -> tuple[list[InputRow], Plan]:
    """The input rows, and what the run's journal already holds for them."""
    rows = job.rows if job.rows is not None else read_caption_rows(job.captions, root=job.images_root)
    if job.limit is not None:
        rows = rows[: job.limit]
    digests = FileDigests()
    inputs = {r.index: _row_inputs(r, digests) for r in rows}
    plan = run.plan(
        fingerprint=_fingerprint(job, device),
        settings=_settings(job, device),
        keys={i: resume_key(v) for i, v in inputs.items()},
        inputs=inputs,
        retry_errors=job.retry_errors,
        outputs=lambda plan: {SCORES: jsonl_bytes(_merged(plan, rows))},
    )
    return rows, plan


def _scorer(job: ScoreJob, device: str):
    from recon_score.scorer import ReconScorer

    return ReconScorer(
        job.preset,
        device=device,
        batch_size=job.batch_size,
        cache=ArtifactCache(job.cache_dir, enabled=job.use_cache),
        weights_dir=job.weights_dir,
        offload=job.offload,
        trust_remote_code=job.trust_remote_code,
    )


def _score_chunks(
    job: ScoreJob, run: RunFolder, plan: Plan, scorer, rows: list[InputRow], todo: list, inv: int
) -> None:
    """This process's unfinished chunks, each journaled as soon as it is scored."""
    seeds = derive_seeds(job.preset.seed, job.seeds)
    explain_seeds = derive_seeds(job.preset.seed, job.explain.seeds) if job.explain else []
    note = SMOKE_NOTE if job.preset.meaningless else None
    header = {"settings": plan.settings, "captions": str(job.captions), "started": run.started}
    n_mine = sum(len(c) for c in run.mine(_chunks(rows, job.batch_size)))
    bar = _explain_bar(job, run, rows, todo, plan) or Progress(
        n_mine,
        initial=n_mine - sum(len(c) for c in todo),
        desc=f"score[{run.rank}]",
        unit="caption",
        position=run.rank,
    )
    decoded: OrderedDict = OrderedDict()  # the latest images read: each file is decoded once in a run
    with run.journal(plan.fingerprint, header) as journal:
        for chunk in todo:
            pending = [r for r in chunk if not plan.is_done(r.index)]
            # a half-done chunk is rendered whole, as a fresh run composed it, bypassing the cache
            pairs = _pairs(job, chunk, decoded)
            results = scorer.score_seeds(pairs, seeds, force_render=len(pending) < len(chunk))
            by_index = {row.index: (res, pair) for row, res, pair in zip(chunk, results, pairs)}
            records = []
            for row in pending:
                res, pair = (None, None) if row.error is not None else by_index[row.index]
                rec, files = _row_record(row, res, job.out, note=note)
                if job.explain is not None and res is not None and res.error is None:
                    before, stem = bar.done, Path(next(iter(files))).stem
                    rec["explain"], maps = explain_row(
                        scorer, pair[0], rec["caption"], explain_seeds, job.explain, stem, bar.update
                    )
                    for rel, data in maps.items():  # the explanation computes, the run writes
                        atomic_write_bytes(job.out / rel, data)
                        files[rel] = hashlib.sha256(data).hexdigest()
                    bar.update(max(0, _row_renders(job, row) - job.seeds - (bar.done - before)))
                records.append(plan.record(row.index, inv, rec, files))
            journal.write(records)
            plan.add(records)
            failed = sum(1 for r in records if r["result"].get("error"))
            if job.explain is None:
                bar.update(len(chunk), failed=failed)
            else:  # the score's renders, and what an unexplained (failed) row would have rendered
                explained = {r["row"] for r in records if isinstance(r["result"].get("explain"), dict)}
                rest = sum(_row_renders(job, r) - job.seeds for r in pending if r.index not in explained)
                bar.update(job.seeds * len(pending) + rest, failed=failed)
    bar.close()


def _row_renders(job: ScoreJob, row: InputRow) -> int:
    """What a row renders: the score's K, and with --explain its (phrases + 1) x K' (recon_score.explain)."""
    usable = job.explain is not None and row.error is None and isinstance(row.caption, str)
    return job.seeds + (job.explain.renders(row.caption) if usable else 0)


def _explain_bar(job: ScoreJob, run: RunFolder, rows: list[InputRow], todo: list, plan: Plan):
    """With --explain, progress counts renders, the score's K per row plus (phrases + 1) x K' per explained
    row, and the cost is said before the first one; None without --explain."""
    if job.explain is None:
        return None
    mine = [r for c in run.mine(_chunks(rows, job.batch_size)) for r in c]
    left = [r for c in todo for r in c if not plan.is_done(r.index)]

    total, todo_renders = sum(_row_renders(job, r) for r in mine), sum(_row_renders(job, r) for r in left)
    explain_renders = todo_renders - job.seeds * len(left)
    print(
        f"explain: {len(left)} caption(s) x (phrases + 1) x {job.explain.seeds} seeds = {explain_renders} "
        f"renders, besides the score's {job.seeds * len(left)} ({todo_renders} in all)",
        file=sys.stderr,
        flush=True,
    )
    return Progress(total, initial=total - todo_renders, desc=f"score[{run.rank}]", unit="render",
                    position=run.rank)  # fmt: skip


RECENT_IMAGES = 8  # decoded originals kept between chunks (a file's captions usually follow each other)


def _pairs(job: ScoreJob, chunk: list[InputRow], decoded: OrderedDict) -> list[tuple]:
    """(image or the row's input error, caption) for each row of a chunk; an image among the latest `decoded`
    (path -> image or its load error) is not read again."""
    pairs = []
    for row in chunk:
        if row.error is not None:
            pairs.append((InputError(row.error), row.caption))
            continue
        key = (row.image_path, row.image)
        if key not in decoded:
            try:
                decoded[key] = load_image(
                    row.image_path, name=row.image, bands=job.bands, reader=job.preset.image_reader
                )
            except InputError as err:
                decoded[key] = err
            while len(decoded) > RECENT_IMAGES:
                decoded.popitem(last=False)
        decoded.move_to_end(key)
        pairs.append((decoded[key], row.caption))
    return pairs


def _merged(plan: Plan, rows: list[InputRow]) -> list[dict]:
    """scores.jsonl's rows, in input order, from the journal; the input's own columns (e.g. `kind`) travel
    through as they are now, never from the journal."""
    ids = {row.index: row.id for row in rows}
    results = plan.results(lambda index: f"row {index} (id {ids[index]!r})")
    return [
        {**res, **{k: v for k, v in (row.extra or {}).items() if k not in res}}
        for row, res in zip(rows, results)
    ]


def _finish(
    job: ScoreJob,
    run: RunFolder,
    plan: Plan,
    rows: list[InputRow],
    scorer,
    summary,
    inv: int,
    *,
    worked: bool,
) -> dict | None:
    """Process 0: scores.jsonl and run.json; returns the seed CI (K > 1)."""
    ordered = _merged(plan, rows)
    seeds = derive_seeds(job.preset.seed, job.seeds)
    changed = sum(plan.changed.values())
    config = scorer.config() if worked else run.previous_info().get("config")
    info = {
        "note": SMOKE_NOTE if job.preset.meaningless else None,
        "captions": str(job.captions.resolve()) if job.captions else None,
        "images_root": str((job.images_root or job.captions.parent).resolve())
        if job.captions
        else (job.source or {}).get("images_dir"),
        "source": job.source,
        "out": str(job.out.resolve()),
        "fingerprint": plan.fingerprint,
        "config": config if config is not None else scorer.config(),
        "batch_size": job.batch_size,
        "bands": list(job.bands) if job.bands else None,
        "processes": run.world,
        "limit": job.limit,
        "cache": {"enabled": job.use_cache, "root": str(scorer.cache.root)},
        "counts": {
            "rows": summary.total,
            "ok": summary.ok,
            "failed": summary.failed,
            "rendered_this_session": summary.rendered,
            "reconstruction_cache_hits": summary.cached,
            "recomputed_changed_inputs": changed,
        },
        "summary": {
            "recon_score_mean": summary.mean,
            "recon_score_std": summary.std,
            "references_vs_distractors": (kinds := references_vs_distractors(ordered)),
        },
        **({"seed_noise": seed_summary(ordered, seeds)} if job.seeds > 1 else {}),
    }
    run_info = run.finish(
        inv,
        files={SCORES: jsonl_bytes(ordered)},
        info=info,
        records=plan.done.values(),
        exit="finished" if not summary.failed else "finished with failed rows",
        rendered=summary.rendered,
        recomputed_changed_inputs=changed,
        **({"repaired": plan.repairs} if plan.repairs else {}),
    )
    summary.repaired, summary.kinds = plan.repairs, kinds
    return (run_info.get("seed_noise") or {}).get("recon_score_ci")


def _summarize(rows, done, *, already_complete: bool, rendered: int, cached: int) -> ScoreSummary:
    scores, failures = [], []
    for row in rows:
        rec = done.get(row.index, {}).get("result", {})
        if rec.get("error") or rec.get("recon_score") is None:
            failures.append((row.id, rec.get("error") or "not processed"))
        else:
            scores.append(rec["recon_score"])
    return ScoreSummary(
        total=len(rows),
        ok=len(scores),
        failed=len(failures),
        mean=statistics.fmean(scores) if scores else None,
        std=statistics.stdev(scores) if len(scores) > 1 else None,  # one value: no spread (not 0)
        rendered=rendered,
        cached=cached,
        already_complete=already_complete,
        failures=failures,
        explain=explain_summary([done.get(r.index, {}).get("result", {}) for r in rows]),
    )
