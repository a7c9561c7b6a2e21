"""`reconscore describe`: N candidates per image from a VLM, each scored, the best kept (RemoteDescriber).

Phases: the VLM and the T2I model may not fit one GPU together, so images are processed in phases of
`phase_size`: captions for every image of the phase, then (VLM freed) reconstructions and scores for every
candidate, then (T2I freed) the next phase. Candidates are journaled per VLM call (one image by default) and
reconstructions are cached, so a crash loses at most the call in flight.

Reproducibility: each image's sampling seed is derived from the run's seed and the image's pixels
(describer.backends.derive_seed), so candidates do not depend on the order, the other images or a resume.
Multi-process runs (`accelerate launch`) shard images i -> process i mod N and merge like `reconscore score`.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import sys
from dataclasses import InitVar, dataclass, field
from pathlib import Path

from describer.backends import Captioner, CaptionRequest, Sampling, derive_seed
from describer.inputs import ImageItem, discover_images
from describer.presets import DescriberPreset
from describer.selection import CandidateSelector, select_best
from recon_score.atomic_io import atomic_write_bytes, png_bytes, sha256_json
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError, ReconScoreError, renamed_field
from recon_score.images import image_digest, load_image
from recon_score.presets import SMOKE_NOTE
from recon_score.progress import Progress
from recon_score.atomic_io import write_json_atomic, write_jsonl_atomic
from recon_score.run_engine import FileDigests, InvocationLog, Journal, RunLock, load_journals
from recon_score.runtime import provenance, utc_now

log = logging.getLogger(__name__)


@dataclass
class DescribeJob:
    out: Path
    preset: DescriberPreset
    captioner: Captioner
    selector: CandidateSelector
    inputs: Path | None = None  # what to caption: a folder, one image, a .txt list or a .jsonl
    images_root: Path | None = None  # the folder image paths in `inputs` are relative to
    vlm_batch_size: int = 1
    phase_size: int = 32
    unload_between_phases: bool | None = None  # None: only on CUDA
    limit: int | None = None
    overwrite: bool = False
    retry_errors: bool = False
    argv: list[str] = field(default_factory=list)
    items: list[ImageItem] | None = None  # precomputed images (e.g. a dataset split) instead of `inputs`
    source: dict | None = None  # what `items` came from, for run.json
    bands: tuple[int, ...] | None = None  # raster bands shown as RGB (recon_score.images.load_image)
    images: InitVar[Path | None] = None  # the old name of `inputs` (warns once)

    def __post_init__(self, images: Path | None) -> None:
        renamed_field(self, "images", "inputs", images)


@dataclass
class DescribeSummary:
    images: int
    described: int
    failed: int
    candidates: int
    valid_candidates: int
    mean_selected: float | None  # in-sample: the selection render's score of the chosen caption
    mean_held_out: float | None  # the chosen caption re-rendered with the evaluation seed
    already_complete: bool
    failures: list[tuple[str, str]]

    @property
    def exit_code(self) -> int:
        return EXIT_PARTIAL if self.failed else EXIT_OK


def _fingerprint(job: DescribeJob) -> str:
    return sha256_json(_settings(job))[:16]


def _settings(job: DescribeJob) -> dict:
    """What the fingerprint hashes; kept in the journal header so a changed setting is named on resume."""
    key = {
        "kind": "describe-run",
        "preset": job.preset.to_dict(),
        "select_by": job.selector.name,
        "captioner": job.captioner.identity().get("name") or job.captioner.identity().get("model"),
        "backend": job.captioner.name,
        "selection_plan": _plan(job.selector),
    }
    if job.bands is not None:  # only when set, so runs without --bands keep their fingerprint
        key["bands"] = list(job.bands)
    return key


def _sampling(p: DescriberPreset) -> Sampling:
    """The one resolved sampling configuration, applied in full by every backend."""
    return Sampling(
        n=p.n,
        temperature=p.temperature,
        top_p=p.top_p,
        max_new_tokens=p.max_new_tokens,
        seed=p.seed,
        top_k=p.top_k,
        repetition_penalty=p.repetition_penalty,
    )


def _plan(selector) -> dict | None:
    """The selector's seeds (ReconScore); None for deterministic metrics, which need no held-out render."""
    plan = getattr(selector, "plan", None)
    return plan() if plan is not None else None


def run_describe(job: DescribeJob) -> DescribeSummary:
    """Describe every image; process 0 holds the --out lock for the whole run (docs/runs.md)."""
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    job.out.mkdir(parents=True, exist_ok=True)
    with RunLock(job.out, enabled=state.is_main_process):
        return _run_describe(job)


def _run_describe(job: DescribeJob) -> DescribeSummary:
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    rank, world = state.process_index, state.num_processes
    out, journal_dir = job.out, job.out / "journal"
    out.mkdir(parents=True, exist_ok=True)
    if job.overwrite and state.is_main_process:
        import shutil

        shutil.rmtree(journal_dir, ignore_errors=True)
        for name in ("candidates.jsonl", "captions.jsonl", "run.json"):
            (out / name).unlink(missing_ok=True)
    state.wait_for_everyone()

    items = job.items if job.items is not None else discover_images(job.inputs, root=job.images_root)
    if job.limit is not None:
        items = items[: job.limit]
    digests = FileDigests()
    for item in items:  # part of the resume key: a replaced image file is described again
        item.digest = digests(item.path)
    fp, settings = _fingerprint(job), _settings(job)
    keys = {item.index: item.key() for item in items}
    generated = load_journals(journal_dir, fingerprint=fp, prefix="candidates-", keys=keys, settings=settings)
    final = load_journals(journal_dir, fingerprint=fp, prefix="final-", keys=keys, settings=settings)
    note = SMOKE_NOTE if job.preset.meaningless else None
    sampling = _sampling(job.preset)
    job.captioner.sampling_request(sampling)  # a backend that cannot apply it fails before any work
    if job.preset.eval_candidates not in ("selected", "all"):
        raise ReconScoreError(
            f"eval_candidates must be 'selected' or 'all', got {job.preset.eval_candidates!r}"
        )

    def finished(item: ImageItem) -> bool:
        rec = final.get(item.index)
        if rec is None or rec.get("key") != item.key():
            return False
        return not (job.retry_errors and rec["result"].get("error"))

    if all(finished(i) for i in items) and (out / "captions.jsonl").exists() and (out / "run.json").exists():
        return _summarize(items, final, already_complete=True)

    unload = job.unload_between_phases
    if unload is None:
        unload = torch.cuda.is_available()
    mine = [i for i in items if i.index % world == rank and not finished(i)]
    started = utc_now()
    log_file = InvocationLog(journal_dir)
    inv = log_file.next_index()
    state.wait_for_everyone()  # every rank has read the log's length before process 0 appends to it
    if state.is_main_process:
        log_file.start(inv, started=started, argv=job.argv or sys.argv, processes=world)
    header = {"settings": settings, "select_by": job.selector.name, "started": started}
    bar = Progress(len(mine), desc=f"describe[{rank}]", unit="image", position=rank)
    phases = -(-len(mine) // max(1, job.phase_size))
    with (
        Journal(journal_dir / f"candidates-rank-{rank}.jsonl", fingerprint=fp, header=header) as cand_journal,
        Journal(journal_dir / f"final-rank-{rank}.jsonl", fingerprint=fp, header=header) as final_journal,
    ):
        for start in range(0, len(mine), job.phase_size):
            phase = mine[start : start + job.phase_size]
            where = f"phase {start // job.phase_size + 1}/{phases}"
            loaded: dict[int, object] = {}
            failed_now: list[dict] = []
            for item in phase:
                try:
                    if item.error:
                        raise InputError(item.error)
                    loaded[item.index] = load_image(item.path, name=item.image, bands=job.bands)
                except InputError as err:
                    failed_now.append(_final_record(item, [], None, error=str(err), note=note, inv=inv))
            if failed_now:
                final_journal.write(failed_now)
                bar.update(len(failed_now), failed=len(failed_now))
            # phase 1: captions for every image of the phase that has none yet
            need = [i for i in phase if i.index in loaded and not _has_candidates(generated, i)]
            for s in range(0, len(need), max(1, job.vlm_batch_size)):
                batch = need[s : s + job.vlm_batch_size]
                reqs = [
                    CaptionRequest(
                        loaded[i.index], derive_seed(sampling.seed, image_digest(loaded[i.index])), key=i.id
                    )
                    for i in batch
                ]
                cands = job.captioner.generate(reqs, job.preset.prompt, sampling)
                recs = [
                    {"row": i.index, "key": i.key(), "seed": r.seed, "candidates": [c.as_dict() for c in cs]}
                    for i, r, cs in zip(batch, reqs, cands)
                ]
                cand_journal.write(recs)
                for r in recs:
                    generated[r["row"]] = r
                bar.stage(f"{where}: captioned {min(s + len(batch), len(need))}/{len(need)} images")
            if unload and need:
                job.captioner.unload()
            # phase 2: score every valid candidate, keep the best
            todo = [i for i in phase if i.index in loaded]
            work = []
            for item in todo:
                cands = generated[item.index]["candidates"]
                valid = [(k, c["caption"]) for k, c in enumerate(cands) if c["caption"] and not c["error"]]
                work.append((item, cands, valid))
            # journal and report every few images (not once per phase), with enough candidates to fill a render batch
            step = max(1, job.vlm_batch_size, 8 // max(1, max((len(v) for _, _, v in work), default=1)))
            for w0 in range(0, len(work), step):
                part = work[w0 : w0 + step]
                records = _select(job, out, part, generated, loaded, note, inv)
                final_journal.write(records)
                for r in records:
                    final[r["row"]] = r
                bar.update(len(records), failed=sum(1 for r in records if r["result"].get("error")))
                bar.stage(f"{where}: scored {min(w0 + step, len(work))}/{len(work)} images")
            if unload and work:
                job.selector.unload()
    bar.close()
    state.wait_for_everyone()
    if not state.is_main_process:
        return _summarize(
            items,
            load_journals(journal_dir, fingerprint=fp, prefix="final-", keys=keys, settings=settings),
            already_complete=False,
        )
    final = load_journals(journal_dir, fingerprint=fp, prefix="final-", keys=keys, settings=settings)
    summary = _summarize(items, final, already_complete=False)
    log_file.end(
        inv, finished=utc_now(), exit="finished" if not summary.failed else "finished with failed images"
    )
    _write_outputs(job, items, final, fp, note, log_file.history(final.values()))
    return summary


def _select(job, out: Path, work: list, generated: dict, loaded: dict, note, inv: int) -> list[dict]:
    """Score every valid candidate of these images, keep each image's best, render the held-out evaluation."""
    scored = job.selector.score_many(
        [(loaded[item.index], [t for _, t in valid], item.references) for item, _, valid in work]
    )
    records = []
    deterministic = _plan(job.selector) is None  # its value is the metric's own: also under the metric's name
    for (item, cands, valid), scores in zip(work, scored):
        rows = [dict(c, index=k) for k, c in enumerate(cands)]
        for (k, _), s in zip(valid, scores):
            rows[k]["selection_score"] = s.get("score")
            if deterministic:
                rows[k][job.selector.name] = s.get("score")
            rows[k].update({key: v for key, v in s.items() if key not in ("score", "error", "_image")})
            if s.get("_image") is not None:
                rel = Path("reconstructions") / f"{item.index:06d}_{k:02d}.png"
                atomic_write_bytes(out / rel, png_bytes(s["_image"]))
                rows[k]["reconstruction"] = str(rel)
            if s.get("error"):
                rows[k]["error"] = s["error"]
        best = select_best([r.get("selection_score") if not r.get("error") else None for r in rows])
        err = None if best is not None else _no_candidate_reason(rows)
        records.append(
            _final_record(
                item,
                rows,
                best,
                seed=generated[item.index]["seed"],
                error=err,
                note=note,
                inv=inv,
            )
        )
    _held_out(job, out, records, loaded)
    return records


def _held_out(job: DescribeJob, out: Path, records: list[dict], loaded: dict) -> None:
    """Score each chosen caption with an independent render (the selector's evaluation seed): its selection
    score is the maximum of N noisy values and overstates it. With eval_candidates "all" every valid candidate
    is evaluated (what `study n-sweep` needs for smaller pools)."""
    evaluate = getattr(job.selector, "evaluate", None)
    if evaluate is None:
        return
    todo = []  # (record, candidate row or None for the selected caption only)
    for rec in records:
        res = rec["result"]
        if res["index"] is None:
            continue
        rows = res["candidates"]
        if job.preset.eval_candidates == "all":
            todo += [(rec, r) for r in rows if r.get("caption") and not r.get("error")]
        else:
            todo.append((rec, rows[res["index"]]))
    if not todo:
        return
    scored = evaluate([(loaded[rec["row"]], row["caption"]) for rec, row in todo])
    for (rec, row), s in zip(todo, scored):
        row["recon_score"], row["recon_score_cosine"] = s["score"], s["cosine"]
        if s["error"]:
            row["recon_score_error"] = s["error"]
        res = rec["result"]
        if row["index"] != res["index"]:
            continue
        res.update(recon_score=s["score"], eval_seed=s["seed"], recon_score_error=s["error"])
        if s.get("_image") is not None:
            rel = Path("reconstructions") / f"{rec['row']:06d}_eval.png"
            atomic_write_bytes(out / rel, png_bytes(s["_image"]))
            res["eval_reconstruction"] = str(rel)


def _has_candidates(generated: dict[int, dict], item: ImageItem) -> bool:
    rec = generated.get(item.index)
    return rec is not None and rec.get("key") == item.key()


def _no_candidate_reason(rows: list[dict]) -> str:
    errors = sorted({r.get("error") or "no score" for r in rows})
    return f"no valid candidate among {len(rows)}: " + "; ".join(e[:120] for e in errors[:3])


def _final_record(
    item: ImageItem,
    rows: list[dict],
    best: int | None,
    *,
    seed: int | None = None,
    error: str | None = None,
    note: str | None = None,
    inv: int = 0,
) -> dict:
    result = {
        "image_id": item.id,
        "image": item.image,
        "caption": rows[best]["caption"] if best is not None else None,
        "selection_score": rows[best].get("selection_score") if best is not None else None,  # in-sample max
        "index": best,
        "n_candidates": len(rows),
        "n_valid": sum(1 for r in rows if not r.get("error")),
        "sampling_seed": seed,
        "error": error,
        "candidates": rows,
    }
    if item.references:
        result["references"] = item.references
    if note:
        result["note"] = note
    return {"row": item.index, "key": item.key(), "inv": inv, "result": result}


def _write_outputs(
    job: DescribeJob, items: list[ImageItem], final: dict[int, dict], fp: str, note, history: list[dict]
) -> None:
    out = job.out
    cand_rows, caption_rows = [], []
    for item in items:
        rec = final.get(item.index)
        if rec is None or rec.get("key") != item.key():
            raise ReconScoreError(
                f"image {item.id!r} has no result after all processes finished; rerun to finish"
            )
        res = rec["result"]
        for c in res["candidates"]:
            row = {
                "image_id": res["image_id"],
                "image": res["image"],
                "index": c["index"],
                "caption": c["caption"],
                "error": c["error"],
                "finish_reason": c.get("finish_reason"),
                **{k: v for k, v in c.items() if k not in ("index", "caption", "error", "finish_reason")},
                "selected": c["index"] == res["index"],
            }
            if note:
                row["note"] = note
            cand_rows.append(row)
        caption_rows.append({k: v for k, v in res.items() if k != "candidates"})
    write_jsonl_atomic(out / "candidates.jsonl", cand_rows)
    write_jsonl_atomic(out / "captions.jsonl", caption_rows)
    summary = _summarize(items, final, already_complete=False)
    write_json_atomic(
        out / "run.json",
        {
            "command": "describe",
            "note": note,
            "out": str(out.resolve()),
            "inputs": str(job.inputs) if job.inputs else ("bundled sample" if job.items is None else None),
            "source": job.source,
            "images_root": _images_root(items),
            "fingerprint": fp,
            "preset": job.preset.to_dict(),
            "captioner": job.captioner.identity(),
            "selection": {
                "metric": job.selector.name,
                "rule": "argmax, ties -> first candidate",
                "eval_candidates": job.preset.eval_candidates,
                **job.selector.config(),
            },
            "sampling": {
                "resolved": dataclasses.asdict(_sampling(job.preset)),
                "request": job.captioner.sampling_request(_sampling(job.preset)),
            },
            "vlm_batch_size": job.vlm_batch_size,
            "phase_size": job.phase_size,
            "limit": job.limit,
            "bands": list(job.bands) if job.bands else None,
            "started": history[0].get("started") if history else utc_now(),
            "finished": utc_now(),
            "resumed": len(history) > 1,
            "invocations": history,  # each invocation that worked on this folder, with the images it did
            "counts": {
                "images": summary.images,
                "described": summary.described,
                "failed": summary.failed,
                "candidates": summary.candidates,
                "valid_candidates": summary.valid_candidates,
            },
            "summary": {
                "selection_score_mean": summary.mean_selected,  # in-sample (the render that selected)
                "recon_score_mean": summary.mean_held_out,  # held-out (evaluation seed)
                "in_sample_gap": (
                    summary.mean_selected - summary.mean_held_out
                    if summary.mean_selected is not None and summary.mean_held_out is not None
                    else None
                ),
            },
            "provenance": {**provenance(), "argv": job.argv or sys.argv},
        },
    )


def _images_root(items: list[ImageItem]) -> str | None:
    """The folder that every `image` field is relative to (for reports)."""
    for item in items:
        if item.path is not None and item.image:
            depth = len(Path(item.image).parts)
            return str(item.path.resolve().parents[depth - 1])
    return None


def _summarize(items, final, *, already_complete: bool) -> DescribeSummary:
    """Means over the images that have both scores, so the in-sample/held-out gap compares like with like."""
    selected, held, failures, n_c, n_v = [], [], [], 0, 0
    for item in items:
        res = final.get(item.index, {}).get("result", {})
        n_c += res.get("n_candidates", 0)
        n_v += res.get("n_valid", 0)
        if res.get("caption") is None:
            failures.append((item.id, res.get("error") or "not processed"))
        elif res.get("selection_score") is not None:
            if res.get("recon_score") is not None:
                held.append(res["recon_score"])
                selected.append(res["selection_score"])
            elif "recon_score" not in res:  # a deterministic selection metric: no held-out render
                selected.append(res["selection_score"])
    return DescribeSummary(
        images=len(items),
        described=len(items) - len(failures),
        failed=len(failures),
        candidates=n_c,
        valid_candidates=n_v,
        mean_selected=statistics.fmean(selected) if selected else None,
        mean_held_out=statistics.fmean(held) if held else None,
        already_complete=already_complete,
        failures=failures,
    )
