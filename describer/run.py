"""`reconscore describe`: N candidates per image from a VLM, each scored, the best kept (RemoteDescriber).

See docs/describer.md for the phases (VLM and T2I model never on the GPU together), the per-image sampling
seeds and the held-out score; docs/runs.md for resuming and multi-process runs.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from describer.backends import Backend, CaptionRequest, Sampling, derive_seed
from describer.inputs import ImageItem, discover_images
from describer.presets import EVAL_CANDIDATES, DescriberPreset
from describer.selection import CandidateSelector, select_best
from recon_score.atomic_io import file_digest, jsonl_bytes, png_bytes
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError, ReconScoreError
from recon_score.explain import ExplainOptions, explain_row
from recon_score.images import image_digest, load_image
from recon_score.presets import SMOKE_NOTE
from recon_score.run_engine import Item, RunFolder, RunResult, RunSpec, Stage
from recon_score.run_outputs import CANDIDATES, CAPTIONS, RECONSTRUCTIONS

log = logging.getLogger(__name__)


@dataclass
class DescribeJob:
    out: Path
    preset: DescriberPreset
    captioner: Backend
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
    explain: ExplainOptions | None = None  # the chosen caption explained (recon_score.explain)
    # every model resolved, only when there is work (a finished run's rerun builds none)
    resolve_models: Callable[[], None] | None = None
    # set by describe: the input set's references a corpus-level selection metric (CIDEr) takes its IDF from
    selection_corpus: dict | None = None


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
    repaired: list[str] = field(default_factory=list)  # what a rerun rebuilt from the journal
    record: dict = field(default_factory=dict)  # run.json (process 0): what the CLI's smoke banner reads

    @property
    def exit_code(self) -> int:
        return EXIT_PARTIAL if self.failed else EXIT_OK


def _settings(job: DescribeJob) -> dict:
    """The settings that determine a run: kept in the journal header so a changed setting is named on resume."""
    return {
        "kind": "describe-run",
        "preset": job.preset.to_dict(),
        "select_by": job.selector.name,
        "captioner": job.captioner.identity().get("name") or job.captioner.identity().get("model"),
        "backend": job.captioner.name,
        "selection_plan": _plan(job.selector),
        "bands": list(job.bands) if job.bands is not None else None,
        "image_reader": job.selector.image_reader,
        "explain": asdict(job.explain) if job.explain is not None else None,
        # CIDEr's IDF corpus: another input set's references would score the same candidate differently
        **({"selection_corpus": job.selection_corpus} if job.selection_corpus else {}),
    }


def _sampling(p: DescriberPreset) -> Sampling:
    """The one resolved sampling configuration, applied in full by every backend."""
    return Sampling(**{f.name: getattr(p, f.name) for f in dataclasses.fields(Sampling)})


def _plan(selector) -> dict | None:
    """The selector's seeds (ReconScore); None for deterministic metrics, which need no held-out render."""
    plan = getattr(selector, "plan", None)
    return plan() if plan is not None else None


def run_describe(job: DescribeJob) -> DescribeSummary:
    """Describe every image; process 0 holds the --out lock for the whole run (docs/runs.md)."""
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    with RunFolder("describe", job.out, state=state, overwrite=job.overwrite, argv=job.argv) as run:
        work = _Describe(job, _images(job))
        res = run.run(work.spec())
    summary = _summarize(work.items, res.records["final"], already_complete=res.complete)
    summary.repaired, summary.record = res.repairs, res.info
    return summary


def _images(job: DescribeJob) -> list[ImageItem]:
    """The images (each with its file's digest: part of the resume key); a bad preset fails before any work."""
    items = job.items if job.items is not None else discover_images(job.inputs, root=job.images_root)
    use_corpus = getattr(job.selector, "use_corpus", None)  # the whole input set, whatever --limit keeps
    job.selection_corpus = use_corpus([i.references or [] for i in items]) if use_corpus else None
    if job.limit is not None:
        items = items[: job.limit]
    for item in items:  # part of the resume key: a replaced image file is described again
        item.digest = file_digest(item.path)
    job.captioner.sampling_request(_sampling(job.preset))  # a backend that cannot apply it fails now
    if job.preset.eval_candidates not in EVAL_CANDIDATES:
        raise ReconScoreError(
            f"eval_candidates must be one of {', '.join(EVAL_CANDIDATES)}, got {job.preset.eval_candidates!r}"
        )
    return items


def _note(job: DescribeJob) -> str | None:
    return SMOKE_NOTE if job.preset.meaningless else None


class _Describe:
    """What describe hands the Run: each image an item of two stages, a phase at a time: its candidates (VLM),
    then their scores and the selection (T2I model and encoder), each stage's models freed after it."""

    def __init__(self, job: DescribeJob, items: list[ImageItem]):
        self.job, self.items = job, items
        self.by_index = {item.index: item for item in items}
        self.loaded: dict[int, object] = {}  # the phase's images, read once for both stages

    def spec(self) -> RunSpec:
        job, unload = self.job, self.job.unload_between_phases
        if unload is None:
            import torch

            unload = torch.cuda.is_available()
        items = [
            Item(i.index, {"id": i.id, "image": i.image, "image_sha256": i.digest}, name=f"image {i.id!r}")
            for i in self.items
        ]
        # enough candidates to fill a render batch
        step = max(1, job.vlm_batch_size, 8 // max(1, job.preset.n))
        return RunSpec(
            settings=_settings(job),
            items=items,
            stages=[
                Stage(
                    self.caption,
                    name="candidates",
                    batch=max(1, job.vlm_batch_size),
                    ended=job.captioner.unload if unload else None,
                ),
                Stage(self.select, name="final", batch=step, ended=job.selector.unload if unload else None),
            ],
            outputs=lambda res: _output_files(res, _note(job)),
            record=self.info,
            prepare=(lambda todo: job.resolve_models()) if job.resolve_models is not None else None,
            phase=job.phase_size,
            retry_errors=job.retry_errors,
            unit="image",
            progress="image",
        )

    def _image(self, item: ImageItem):
        """The item's image, or the InputError that says why it cannot be read."""
        if item.index not in self.loaded:
            try:
                if item.error:
                    raise InputError(item.error)
                self.loaded[item.index] = load_image(
                    item.path, name=item.image, bands=self.job.bands, reader=self.job.selector.image_reader
                )
            except InputError as err:
                self.loaded[item.index] = InputError(item.located(str(err)))
        return self.loaded[item.index]

    def caption(self, batch: list[Item], todo: list[Item]) -> list:
        """Candidates for each image, one VLM call for the batch; an unreadable image is its error."""
        job, sampling = self.job, _sampling(self.job.preset)
        images = {i.id: self._image(self.by_index[i.id]) for i in todo}
        reqs = {
            i.id: CaptionRequest(
                images[i.id],
                derive_seed(sampling.seed, image_digest(images[i.id])),
                key=self.by_index[i.id].id,
                path=str(self.by_index[i.id].path) if self.by_index[i.id].path is not None else None,
            )
            for i in todo
            if not isinstance(images[i.id], InputError)
        }
        generated = job.captioner.generate(list(reqs.values()), job.preset.prompt, sampling) if reqs else []
        cands = dict(zip(reqs, generated))
        return [
            ({"seed": reqs[i.id].seed, "candidates": [c.as_dict() for c in cands[i.id]]}, {})
            if i.id in reqs
            else ({"error": str(images[i.id])}, {})
            for i in todo
        ]

    def select(self, batch: list[Item], todo: list[Item]) -> list:
        """Each image's chosen caption among its candidates (an image without candidates: its error)."""
        job, work, failed = self.job, [], {}
        for i in todo:
            got = i.results["candidates"]
            if got.get("error"):
                failed[i.id] = (
                    _final(self.by_index[i.id], [], None, error=got["error"], note=_note(job)),
                    {},
                )
                continue
            cands = got["candidates"]
            valid = [(k, c["caption"]) for k, c in enumerate(cands) if c["caption"] and not c["error"]]
            work.append((self.by_index[i.id], cands, valid, got["seed"]))
        chosen = self._chosen(work) if work else {}
        for item, *_ in work:
            self.loaded.pop(item.index, None)
        return [failed.get(i.id) or chosen[i.id] for i in todo]

    def _chosen(self, work: list) -> dict[int, tuple[dict, dict[str, bytes]]]:
        """Score every valid candidate of these images, keep each image's best, render the held-out evaluation."""
        job = self.job
        scored = job.selector.score_many(
            [(self._image(item), [t for _, t in valid], item.references) for item, _, valid, _ in work]
        )
        records = []
        # a deterministic metric's value is the metric's own: also under the metric's name
        deterministic = _plan(job.selector) is None
        for (item, cands, valid, seed), scores in zip(work, scored):
            rows, files = [dict(c, index=k) for k, c in enumerate(cands)], {}
            for (k, _), s in zip(valid, scores):
                rows[k]["selection_score"] = s.get("score")
                if deterministic:
                    rows[k][job.selector.name] = s.get("score")
                rows[k].update({key: v for key, v in s.items() if key not in ("score", "error", "_image")})
                if s.get("_image") is not None:
                    rows[k]["reconstruction"] = _png(
                        f"{RECONSTRUCTIONS}/{item.index:06d}_{k:02d}.png", s["_image"], files
                    )
                if s.get("error"):
                    rows[k]["error"] = s["error"]
            best = select_best([r.get("selection_score") if not r.get("error") else None for r in rows])
            err = None if best is not None else _no_candidate_reason(rows)
            result = _final(item, rows, best, seed=seed, error=err, note=_note(job))
            records.append({"row": item.index, "result": result, "files": files})
        _held_out(job, records, self.loaded)
        _explain(job, records, self.loaded)
        return {r["row"]: (r["result"], r["files"]) for r in records}

    def info(self, res: RunResult) -> dict:
        """run.json's fields of describe."""
        job, summary = self.job, _summarize(self.items, res.records["final"], already_complete=res.complete)
        return {
            "note": _note(job),
            "out": str(job.out.resolve()),
            "inputs": str(job.inputs) if job.inputs else ("bundled sample" if job.items is None else None),
            "source": job.source,
            "images_root": _images_root(self.items),
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
            "image_reader": job.selector.image_reader,  # how the images were read (describe pairs reads it back)
            "counts": {
                k: getattr(summary, k)
                for k in ("images", "described", "failed", "candidates", "valid_candidates")
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
        }


def _explain(job: DescribeJob, records: list[dict], loaded: dict) -> None:
    """--explain: each chosen caption explained on held-out renders (the evaluation seed, then derived seeds that
    avoid the selection seeds: a caption is never explained on the renders that chose it)."""
    scorer = getattr(job.selector, "scorer", None)
    if job.explain is None or scorer is None:
        return
    from recon_score.seeds import derive_seeds

    seeds = derive_seeds(job.selector.eval_seed, job.explain.seeds, exclude=set(job.selector.seeds))
    chosen = [rec["result"]["caption"] for rec in records if rec["result"]["index"] is not None]
    if chosen:
        from recon_score.progress import announce

        announce(job.explain.cost(chosen, "chosen caption(s)"))
    for rec in records:
        res = rec["result"]
        if res["index"] is None:
            continue
        stem = f"{rec['row']:06d}_chosen"
        res["explain"], files = explain_row(
            scorer, loaded[rec["row"]], res["caption"], seeds, job.explain, stem
        )
        rec["files"].update(files)  # the explanation computes, the Run writes


def _held_out(job: DescribeJob, records: list[dict], loaded: dict) -> None:
    """Score each chosen caption with an independent render (its selection score, a maximum of N noisy values,
    overstates it); with eval_candidates "all" every valid candidate (`study n-sweep`'s smaller pools)."""
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
            rel = f"{RECONSTRUCTIONS}/{rec['row']:06d}_eval.png"
            res["eval_reconstruction"] = _png(rel, s["_image"], rec["files"])


def _png(rel: str, img, files: dict[str, bytes]) -> str:
    """A reconstruction's bytes for the Run to write and journal (a rerun notices it gone or replaced)."""
    files[rel] = png_bytes(img)
    return rel


def _no_candidate_reason(rows: list[dict]) -> str:
    errors = sorted({r.get("error") or "no score" for r in rows})
    return f"no valid candidate among {len(rows)}: " + "; ".join(e[:120] for e in errors[:3])


def _final(
    item: ImageItem,
    rows: list[dict],
    best: int | None,
    *,
    seed: int | None = None,
    error: str | None = None,
    note: str | None = None,
) -> dict:
    """The journaled result of one image: the chosen caption and every candidate."""
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
    return result


def _output_files(run: RunResult, note) -> dict[str, bytes]:
    """candidates.jsonl and captions.jsonl, in input order, from the journal."""
    cand_rows, caption_rows = [], []
    for res in run.results("final"):
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
    return {CANDIDATES: jsonl_bytes(_one_schema(cand_rows)), CAPTIONS: jsonl_bytes(_one_schema(caption_rows))}


def _one_schema(rows: list[dict]) -> list[dict]:
    """Every row with the same keys (a failed image or candidate has the scored ones' keys, as null), so a reader
    of the file needs no per-row key checks. Keys in order of first appearance; `selected` and `note` last."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    keys = [k for k in keys if k not in ("selected", "note")] + [k for k in ("selected", "note") if k in keys]
    return [{k: row.get(k) for k in keys} for row in rows]


def _images_root(items: list[ImageItem]) -> str | None:
    """The folder every `image` field is relative to (for `pairs`, `report`): the one the inputs were resolved
    against, never guessed from a resolved path (an absolute or `..` path says nothing of the root)."""
    for item in items:
        if item.root is not None:
            return str(Path(item.root).resolve())
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
