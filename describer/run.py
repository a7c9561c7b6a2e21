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

import logging
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from describer.backends import Captioner, CaptionRequest, Sampling, derive_seed
from describer.inputs import ImageItem, discover_images
from describer.presets import DescriberPreset
from describer.selection import CandidateSelector, select_best
from recon_score.cache import atomic_write_bytes, png_bytes, sha256_json
from recon_score.errors import InputError, ReconScoreError
from recon_score.images import image_digest, load_image
from recon_score.presets import SMOKE_NOTE
from recon_score.results import Journal, load_journals, write_json_atomic, write_jsonl_atomic
from recon_score.runtime import provenance, utc_now

log = logging.getLogger(__name__)


@dataclass
class DescribeJob:
    out: Path
    preset: DescriberPreset
    captioner: Captioner
    selector: CandidateSelector
    images: Path | None = None
    images_root: Path | None = None
    vlm_batch_size: int = 1
    phase_size: int = 32
    unload_between_phases: bool | None = None  # None: only on CUDA
    limit: int | None = None
    overwrite: bool = False
    retry_errors: bool = False
    argv: list[str] = field(default_factory=list)
    items: list[ImageItem] | None = None  # precomputed images (e.g. a dataset split) instead of `images`
    source: dict | None = None  # what `items` came from, for run.json
    bands: tuple[int, ...] | None = None  # raster bands shown as RGB (recon_score.images.load_image)


@dataclass
class DescribeSummary:
    images: int
    described: int
    failed: int
    candidates: int
    valid_candidates: int
    mean_selected: float | None
    already_complete: bool
    failures: list[tuple[str, str]]

    @property
    def exit_code(self) -> int:
        return 2 if self.failed else 0


def _fingerprint(job: DescribeJob) -> str:
    key = {
        "kind": "describe-run",
        "preset": job.preset.to_dict(),
        "select_by": job.selector.name,
        "captioner": job.captioner.identity().get("name") or job.captioner.identity().get("model"),
        "backend": job.captioner.name,
    }
    if job.bands is not None:  # only when set, so runs without --bands keep their fingerprint
        key["bands"] = list(job.bands)
    return sha256_json(key)[:16]


def run_describe(job: DescribeJob) -> DescribeSummary:
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

    items = job.items if job.items is not None else discover_images(job.images, root=job.images_root)
    if job.limit is not None:
        items = items[: job.limit]
    fp = _fingerprint(job)
    generated = load_journals(journal_dir, fingerprint=fp, prefix="candidates-")
    final = load_journals(journal_dir, fingerprint=fp, prefix="final-")
    note = SMOKE_NOTE if job.preset.meaningless else None
    sampling = Sampling(
        n=job.preset.n,
        temperature=job.preset.temperature,
        top_p=job.preset.top_p,
        max_new_tokens=job.preset.max_new_tokens,
        seed=job.preset.seed,
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
    header = {"preset": job.preset.to_dict(), "select_by": job.selector.name, "started": utc_now()}
    from tqdm.auto import tqdm

    bar = tqdm(
        total=len(mine),
        desc=f"describe[{rank}]",
        unit="image",
        position=rank,
        disable=None,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    with (
        Journal(journal_dir / f"candidates-rank-{rank}.jsonl", fingerprint=fp, header=header) as cand_journal,
        Journal(journal_dir / f"final-rank-{rank}.jsonl", fingerprint=fp, header=header) as final_journal,
    ):
        for start in range(0, len(mine), job.phase_size):
            phase = mine[start : start + job.phase_size]
            loaded: dict[int, object] = {}
            failed_now: list[dict] = []
            for item in phase:
                try:
                    if item.error:
                        raise InputError(item.error)
                    loaded[item.index] = load_image(item.path, name=item.image, bands=job.bands)
                except InputError as err:
                    failed_now.append(_final_record(item, [], None, None, error=str(err), note=note))
            if failed_now:
                final_journal.write(failed_now)
                bar.update(len(failed_now))
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
            if unload and need:
                job.captioner.unload()
            # phase 2: score every valid candidate, keep the best
            todo = [i for i in phase if i.index in loaded]
            work = []
            for item in todo:
                cands = generated[item.index]["candidates"]
                valid = [(k, c["caption"]) for k, c in enumerate(cands) if c["caption"] and not c["error"]]
                work.append((item, cands, valid))
            scored = job.selector.score_many(
                [(loaded[item.index], [t for _, t in valid], item.references) for item, _, valid in work]
            )
            records = []
            for (item, cands, valid), scores in zip(work, scored):
                rows = [dict(c, index=k) for k, c in enumerate(cands)]
                for (k, _), s in zip(valid, scores):
                    rows[k][job.selector.name] = s.get("score")
                    rows[k].update(
                        {key: v for key, v in s.items() if key not in ("score", "error", "_image")}
                    )
                    if s.get("_image") is not None:
                        rel = Path("reconstructions") / f"{item.index:06d}_{k:02d}.png"
                        atomic_write_bytes(out / rel, png_bytes(s["_image"]))
                        rows[k]["reconstruction"] = str(rel)
                    if s.get("error"):
                        rows[k]["error"] = s["error"]
                best = select_best([r.get(job.selector.name) if not r.get("error") else None for r in rows])
                err = None if best is not None else _no_candidate_reason(rows)
                records.append(
                    _final_record(
                        item,
                        rows,
                        best,
                        job.selector.name,
                        seed=generated[item.index]["seed"],
                        error=err,
                        note=note,
                    )
                )
            final_journal.write(records)
            for r in records:
                final[r["row"]] = r
            bar.update(len(records))
            if unload and work:
                job.selector.unload()
    bar.close()
    state.wait_for_everyone()
    if not state.is_main_process:
        return _summarize(
            items, load_journals(journal_dir, fingerprint=fp, prefix="final-"), already_complete=False
        )
    final = load_journals(journal_dir, fingerprint=fp, prefix="final-")
    _write_outputs(job, items, final, fp, note)
    return _summarize(items, final, already_complete=False)


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
    metric: str | None,
    *,
    seed: int | None = None,
    error: str | None = None,
    note: str | None = None,
) -> dict:
    result = {
        "image_id": item.id,
        "image": item.image,
        "caption": rows[best]["caption"] if best is not None else None,
        "score": rows[best].get(metric) if best is not None else None,
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
    return {"row": item.index, "key": item.key(), "result": result}


def _write_outputs(job: DescribeJob, items: list[ImageItem], final: dict[int, dict], fp: str, note) -> None:
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
    prev = {}
    if (out / "run.json").exists():
        import json

        try:
            prev = json.loads((out / "run.json").read_text())
        except ValueError:
            prev = {}
    write_json_atomic(
        out / "run.json",
        {
            "command": "describe",
            "note": note,
            "out": str(out.resolve()),
            "images": str(job.images) if job.images else ("bundled sample" if job.items is None else None),
            "source": job.source,
            "images_root": _images_root(items),
            "fingerprint": fp,
            "preset": job.preset.to_dict(),
            "captioner": job.captioner.identity(),
            "selection": {
                "metric": job.selector.name,
                "rule": "argmax, ties -> first candidate",
                **job.selector.config(),
            },
            "vlm_batch_size": job.vlm_batch_size,
            "phase_size": job.phase_size,
            "limit": job.limit,
            "bands": list(job.bands) if job.bands else None,
            "started": prev.get("started", utc_now()),
            "finished": utc_now(),
            "counts": {
                "images": summary.images,
                "described": summary.described,
                "failed": summary.failed,
                "candidates": summary.candidates,
                "valid_candidates": summary.valid_candidates,
            },
            "summary": {"selected_score_mean": summary.mean_selected},
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
    selected, failures, n_c, n_v = [], [], 0, 0
    for item in items:
        res = final.get(item.index, {}).get("result", {})
        n_c += res.get("n_candidates", 0)
        n_v += res.get("n_valid", 0)
        if res.get("caption") is None:
            failures.append((item.id, res.get("error") or "not processed"))
        elif res.get("score") is not None:
            selected.append(res["score"])
    return DescribeSummary(
        images=len(items),
        described=len(items) - len(failures),
        failed=len(failures),
        candidates=n_c,
        valid_candidates=n_v,
        mean_selected=statistics.fmean(selected) if selected else None,
        already_complete=already_complete,
        failures=failures,
    )
