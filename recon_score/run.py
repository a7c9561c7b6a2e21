"""`reconscore score`: a captions table in, scores.jsonl + run.json + reconstructions/ out.

Resumable and multi-process (docs/runs.md):
- rows are processed in fixed chunks of `batch_size` consecutive rows of the *input* (chunk j = rows
  j*B .. j*B+B-1), whatever the number of processes; with `accelerate launch` chunk j goes to process
  j mod world_size, so every batch is composed the same way whichever process runs it. Each process appends to
  its own journal; process 0 merges them, in input order, into one scores.jsonl;
- a killed run restarted with the same --out skips finished chunks and re-renders a half-finished chunk whole,
  in the same composition; a finished run rerun is a no-op. A row whose inputs changed (caption, id, image
  path, the image file's bytes) is recomputed, and the run logs how many and why;
- process 0 holds an fcntl lock on --out for the run: a second command on the same folder exits at once;
- run.json lists every invocation that worked on the folder (journal/invocations.jsonl).
"""

from __future__ import annotations

import logging
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from recon_score.cache import ArtifactCache, atomic_write_bytes, png_bytes, sha256_json
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError, ReconScoreError
from recon_score.images import load_image
from recon_score.inputs import InputRow, read_caption_rows
from recon_score.presets import SMOKE_NOTE, ReconPreset
from recon_score.progress import Progress
from recon_score.results import (
    FileDigests,
    InvocationLog,
    Journal,
    RunLock,
    changed_fields,
    load_journals,
    read_jsonl,
    resume_key,
    write_json_atomic,
    write_jsonl_atomic,
)
from recon_score.runtime import provenance, resolve_device, utc_now
from recon_score.sanity import references_vs_distractors
from recon_score.seeds import derive_seeds, seed_summary

log = logging.getLogger(__name__)

SAMPLE_DIR = Path(__file__).resolve().parent / "sample"


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
    ci: dict | None = None  # K > 1: bootstrap CI of the mean over images and seeds

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


def _row_record(row: InputRow, res, out: Path, *, note: str | None) -> dict:
    rec = {
        "id": row.id,
        "image": row.image,
        "caption": row.caption if isinstance(row.caption, str) or row.caption is None else str(row.caption),
        "recon_score": None,
        "cosine": None,
        "reconstruction": None,
        "error": row.error,
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
            rel = Path("reconstructions") / f"{row.index:06d}_{_slug(row.id)}.png"
            atomic_write_bytes(out / rel, png_bytes(res.reconstruction))
            rec["reconstruction"] = str(rel)
    if rec["error"] and row.where and not rec["error"].startswith(f"{row.where}:"):
        rec["error"] = f"{row.where}: {rec['error']}"  # image and caption errors name the file and line too
    if note:
        rec["note"] = note
    return rec


def run_score(job: ScoreJob) -> ScoreSummary:
    """Score every row of `job.captions`; see the module docstring for sharding and resume."""
    import torch
    from accelerate import PartialState

    # cpu=True is what turns a torchrun/`accelerate launch --multi_gpu` launch on a GPU-less machine into
    # gloo-backed MULTI_CPU; a plain single-process call is unaffected
    state = PartialState(cpu=job.device == "cpu" or not torch.cuda.is_available())
    world = state.num_processes
    # accelerate names a CPU process's device "cpu:0": normalise it, the Z-Image DiT gives other floats on "cpu:0"
    device = resolve_device(job.device if world == 1 else str(state.device))
    started = utc_now()
    job.out.mkdir(parents=True, exist_ok=True)
    with RunLock(job.out, enabled=state.is_main_process):
        return _run_locked(job, state, device, started)


def _run_locked(job: ScoreJob, state, device: str, started: str) -> ScoreSummary:
    rank, world, out = state.process_index, state.num_processes, job.out
    journal_dir = out / "journal"
    if job.overwrite and state.is_main_process:
        import shutil

        for p in (journal_dir, out / "reconstructions"):
            shutil.rmtree(p, ignore_errors=True)
        for p in (out / "scores.jsonl", out / "run.json"):
            p.unlink(missing_ok=True)
    state.wait_for_everyone()

    rows = job.rows if job.rows is not None else read_caption_rows(job.captions, root=job.images_root)
    if job.limit is not None:
        rows = rows[: job.limit]
    digests = FileDigests()
    inputs = {r.index: _row_inputs(r, digests) for r in rows}
    keys = {i: resume_key(v) for i, v in inputs.items()}
    fp, settings = _fingerprint(job, device), _settings(job, device)
    seeds = derive_seeds(job.preset.seed, job.seeds)
    done = load_journals(journal_dir, fingerprint=fp, keys=keys, settings=settings)
    note = SMOKE_NOTE if job.preset.meaningless else None

    def is_done(row: InputRow) -> bool:
        rec = done.get(row.index)
        if rec is None or rec.get("key") != keys[row.index]:
            return False
        return not (job.retry_errors and rec["result"].get("error"))

    complete = all(is_done(r) for r in rows)
    if complete and (out / "scores.jsonl").exists() and (out / "run.json").exists():
        return _summarize(rows, done, already_complete=True, rendered=0, cached=0)
    changed = _changed_inputs(rows, done, inputs, keys)
    if changed and state.is_main_process:
        why = ", ".join(f"{n} {field}" for field, n in sorted(changed.items()))
        log.warning(
            "%d journaled row(s) have changed inputs and are recomputed (%s)", sum(changed.values()), why
        )

    log_file = InvocationLog(journal_dir)
    inv = log_file.next_index()
    state.wait_for_everyone()  # every rank has read the log's length before process 0 appends to it
    if state.is_main_process:
        log_file.start(
            inv, started=started, argv=job.argv or sys.argv, processes=world, batch_size=job.batch_size
        )

    from recon_score.scorer import ReconScorer

    cache = ArtifactCache(job.cache_dir, enabled=job.use_cache)
    scorer = ReconScorer(
        job.preset,
        device=device,
        batch_size=job.batch_size,
        cache=cache,
        weights_dir=job.weights_dir,
        offload=job.offload,
        trust_remote_code=job.trust_remote_code,
    )
    header = {"settings": settings, "captions": str(job.captions), "started": started}
    # chunks of the global row order, chunk j -> process j mod world: a batch is the same whoever runs it
    mine_chunks = [c for j, c in enumerate(_chunks(rows, job.batch_size)) if j % world == rank]
    todo_chunks = [c for c in mine_chunks if not all(is_done(r) for r in c)]
    n_mine = sum(len(c) for c in mine_chunks)
    if todo_chunks:
        scorer.preflight("score")  # every missing model named here, before any image is read
    with Journal(journal_dir / f"rank-{rank}.jsonl", fingerprint=fp, header=header) as journal:
        bar = Progress(
            n_mine,
            initial=n_mine - sum(len(c) for c in todo_chunks),
            desc=f"score[{rank}]",
            unit="caption",
            position=rank,
        )
        for chunk in todo_chunks:
            partial = any(is_done(r) for r in chunk)
            pairs = []
            for row in chunk:
                if row.error is not None:
                    pairs.append((InputError(row.error), row.caption))
                    continue
                try:
                    pairs.append(
                        (
                            load_image(
                                row.image_path,
                                name=row.image,
                                bands=job.bands,
                                reader=job.preset.image_reader,
                            ),
                            row.caption,
                        )
                    )
                except InputError as err:
                    pairs.append((err, row.caption))
            results = scorer.score_seeds(pairs, seeds, force_render=partial)
            records = []
            for row, res in zip(chunk, results):
                if row.error is not None:
                    res = None
                if is_done(row):
                    continue
                rec = _row_record(row, res, out, note=note)
                records.append(
                    {
                        "row": row.index,
                        "key": keys[row.index],
                        "inv": inv,
                        "inputs": inputs[row.index],
                        "result": rec,
                    }
                )
            journal.write(records)
            for r in records:
                done[r["row"]] = r
            bar.update(len(chunk), failed=sum(1 for r in records if r["result"].get("error")))
        bar.close()
    state.wait_for_everyone()

    if not state.is_main_process:
        return _summarize(
            rows,
            load_journals(journal_dir, fingerprint=fp, keys=keys, settings=settings),
            already_complete=False,
            rendered=scorer.stats["rendered"],
            cached=scorer.stats["reconstruction_cache_hits"],
        )
    done = load_journals(journal_dir, fingerprint=fp, keys=keys, settings=settings)
    ordered = []
    for row in rows:
        rec = done.get(row.index)
        if rec is None or rec.get("key") != keys[row.index]:
            raise ReconScoreError(
                f"row {row.index} (id {row.id!r}) has no result after all processes finished; "
                "rerun the same command to complete it"
            )
        # the input's own columns (e.g. `kind`) travel through as they are now, never from the journal
        ordered.append(
            {**rec["result"], **{k: v for k, v in (row.extra or {}).items() if k not in rec["result"]}}
        )
    write_jsonl_atomic(out / "scores.jsonl", ordered)
    summary = _summarize(
        rows,
        done,
        already_complete=False,
        rendered=scorer.stats["rendered"],
        cached=scorer.stats["reconstruction_cache_hits"],
    )
    previous = _previous_run(out)
    finished = utc_now()
    log_file.end(
        inv,
        finished=finished,
        exit="finished" if not summary.failed else "finished with failed rows",
        rendered=summary.rendered,
        recomputed_changed_inputs=sum(changed.values()),
    )
    history = log_file.history(done.values())
    run_info = {
        "command": "score",
        "note": note,
        "captions": str(job.captions.resolve()) if job.captions else None,
        "images_root": str((job.images_root or job.captions.parent).resolve())
        if job.captions
        else (job.source or {}).get("images_dir"),
        "source": job.source,
        "out": str(out.resolve()),
        "fingerprint": fp,
        "config": scorer.config() if todo_chunks else previous.get("config"),
        "batch_size": job.batch_size,
        "bands": list(job.bands) if job.bands else None,
        "processes": world,
        "limit": job.limit,
        "cache": {"enabled": job.use_cache, "root": str(cache.root)},
        "started": history[0].get("started", started) if history else started,
        "finished": finished,
        "resumed": len(history) > 1,
        "invocations": history,
        "counts": {
            "rows": summary.total,
            "ok": summary.ok,
            "failed": summary.failed,
            "rendered_this_session": summary.rendered,
            "reconstruction_cache_hits": summary.cached,
            "recomputed_changed_inputs": sum(changed.values()),
        },
        "summary": {
            "recon_score_mean": summary.mean,
            "recon_score_std": summary.std,
            "references_vs_distractors": references_vs_distractors(ordered),
        },
        **({"seed_noise": seed_summary(ordered, seeds)} if job.seeds > 1 else {}),
        "provenance": {**provenance(), "argv": job.argv or sys.argv},
    }
    if run_info["config"] is None:
        run_info["config"] = scorer.config()
    write_json_atomic(out / "run.json", run_info)
    summary.ci = (run_info.get("seed_noise") or {}).get("recon_score_ci")
    return summary


def _changed_inputs(rows, done, inputs, keys) -> dict[str, int]:
    """Rows with a journaled result for other inputs, counted by the input that changed (for the log)."""
    counts: dict[str, int] = {}
    for row in rows:
        rec = done.get(row.index)
        if rec is None or rec.get("key") == keys[row.index]:
            continue
        for name in changed_fields(rec.get("inputs"), inputs[row.index]):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _previous_run(out: Path) -> dict:
    import json

    p = out / "run.json"
    try:
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
    except (OSError, ValueError):
        return {}


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
        std=statistics.stdev(scores) if len(scores) > 1 else (0.0 if scores else None),
        rendered=rendered,
        cached=cached,
        already_complete=already_complete,
        failures=failures,
    )


def read_scores(out: Path) -> list[dict]:
    return read_jsonl(out / "scores.jsonl")
