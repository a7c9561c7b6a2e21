"""`reconscore generate` as a function: robustness sets (the ReconScore paper's Tables 4 and 5) from a text LLM,
journaled per request so a rerun resumes, written as generated.jsonl (+ triplets.jsonl for `length`) and run.json.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from preference_data import generators as gen
from recon_score.run_outputs import GENERATED, TRIPLETS

KINDS = ("paraphrase", "perturb", "length")


@dataclass
class GenerateJob:
    kind: str  # one of KINDS
    sources: list[
        dict
    ]  # id, image, caption, error (a source with an error is never sent: it becomes an error row)
    out: Path
    llm: object  # describer.backends engine (text_only): .complete(prompts, sampling), .identity()
    sampling: object  # describer.backends.Sampling
    instruction: Path | None = None  # paraphrase: your own instruction file
    kinds: tuple[str, ...] = ("object", "count", "colour", "spatial")  # perturb: fact kinds, cycled
    every_kind: bool = False  # perturb: one row per kind for every caption
    lengths: tuple[str, ...] = ("short", "medium", "long")  # length: which rewrites
    n_triplets: int = 10  # length: triplets per image (the ReconScore paper: 10)
    overwrite: bool = False
    argv: list[str] = field(default_factory=list)


@dataclass
class GenerateResult:
    rows: int
    failed: int
    path: Path
    record: dict = field(default_factory=dict)  # the run's record


def run_generate(job: GenerateJob) -> GenerateResult:
    """Generate what the run's journal lacks, then write the outputs; the run folder is checked (kind, lock)
    first and each answer is journaled as it comes, so a killed run resumes where it stopped."""
    from recon_score.run_engine import RunFolder

    with RunFolder("generate", job.out, overwrite=job.overwrite, argv=job.argv) as run:
        return _generate(job, run)


def _generate(job: GenerateJob, run) -> GenerateResult:
    from recon_score.atomic_io import jsonl_bytes, sha256_json

    sources = [s for s in job.sources if not s.get("error")]
    config = {
        "kind": job.kind,
        "model": job.llm.identity(),
        "sampling": job.sampling.__dict__,
        "kinds": ",".join(job.kinds),
        "every_kind": job.every_kind,
        "lengths": ",".join(job.lengths),
        "n_triplets": job.n_triplets,
        "instruction": str(job.instruction) if job.instruction else None,
    }
    inv = run.begin()
    stage = _stager(job, run, config, sha256_json(config)[:16], inv)
    extracted: list[dict] = []
    files: dict[str, bytes] = {}
    if job.kind == "paraphrase":
        rows = stage(
            "generated", gen.paraphrase_requests(sources, instruction=job.instruction or "paraphrase")
        )
    elif job.kind == "perturb":
        rows = stage("generated", gen.perturb_requests(sources, kinds=job.kinds, every_kind=job.every_kind))
    else:
        extracted = stage("triplets", gen.triplet_requests(_by_image(sources), n=job.n_triplets))
        for r in extracted:
            r["triplets"] = [list(t) for t in gen.parse_triplets(r["caption"] or "")][: job.n_triplets]
            if not r["triplets"] and not r["error"]:
                r["error"] = "no <subject, relation, object> triplet could be parsed from the answer"
        files[TRIPLETS] = jsonl_bytes(extracted)
        rows = stage("generated", gen.rewrite_requests(extracted, lengths=job.lengths))
    rows = _with_error_rows(rows, job.sources, job.kind)
    files[GENERATED] = jsonl_bytes(rows)
    failed = sum(1 for r in [*rows, *extracted] if r.get("error"))
    info = {**config, "sources": len(sources), "rows": len(rows), "failed": failed}
    record = run.finish(inv, files=files, info=info, records=stage.records)
    return GenerateResult(rows=len(rows), failed=failed, path=job.out / GENERATED, record=record)


_JOURNAL_FIELDS = ("inv", "sum")  # what the journal adds to a row: the invocation and the checksum


def _stager(
    job: GenerateJob, run, config: dict, fingerprint: str, inv: int
) -> Callable[[str, list], list[dict]]:
    """stage(name, requests): answer the requests not yet in the run's NAME journal (a record whose checksum
    does not match is asked again), return every answer in order (`stage.records`: the journal records, for
    the invocation history)."""
    from recon_score.atomic_io import read_jsonl
    from recon_score.run_engine import record_checksum

    def complete(prompts: list[str]) -> list[tuple[str | None, str | None]]:
        return [(c.text, c.error) for c in job.llm.complete(prompts, job.sampling)]

    def journaled(path) -> dict[str, dict]:
        return {r["id"]: r for r in read_jsonl(path)[1:] if r.get("sum") == record_checksum(r)}

    def stage(name: str, requests) -> list[dict]:
        with run.journal(fingerprint, {"settings": config}, prefix=f"{name}-") as journal:
            done = set(journaled(journal.path))
            gen.run_requests(
                requests,
                complete,
                done=done,
                on_rows=lambda rows: journal.write([{**r, "inv": inv} for r in rows]),
            )
            rows = journaled(journal.path)
        stage.records += [rows[r.id] for r in requests]
        return [{k: v for k, v in rows[r.id].items() if k not in _JOURNAL_FIELDS} for r in requests]

    stage.records = []
    return stage


def _with_error_rows(rows: list[dict], sources: list[dict], kind: str) -> list[dict]:
    """The generated rows with one error row per source that could not be sent, in input order (for
    `length`, whose rows are per image, the error rows come last); each counts as failed."""
    errors = [
        {
            "id": f"{s['id']}:{kind}",
            "source_id": str(s["id"]),
            "image": s.get("image"),
            "source_caption": s.get("caption"),
            "kind": kind,
            "caption": None,
            "error": s["error"],
        }
        for s in sources
        if s.get("error")
    ]
    if not errors or kind == "length":
        return rows + errors
    by_source: dict[str, list[dict]] = {}
    for r in rows:
        by_source.setdefault(str(r["source_id"]), []).append(r)
    bad = {e["source_id"]: e for e in errors}
    out = []
    for s in sources:
        out.extend([bad[str(s["id"])]] if s.get("error") else by_source.pop(str(s["id"]), []))
    return out + [r for rs in by_source.values() for r in rs]


def _by_image(sources: list[dict]) -> list[dict]:
    groups: dict[str, dict] = {}
    for s in sources:
        g = groups.setdefault(str(s["image"]), {"id": str(s["image"]), "image": s["image"], "references": []})
        g["references"].append(s["caption"])
    return list(groups.values())


def caption_sources(captions: Path) -> list[dict]:
    """A captions table as generation sources; a row whose caption cannot be sent carries its `error`."""
    from recon_score.inputs import read_caption_rows

    out = []
    for r in read_caption_rows(captions):
        error = None if r.image_error else r.error  # no image is read here: only text problems count
        if error is None and (not isinstance(r.caption, str) or not r.caption.strip()):
            kind = (
                "missing or null"
                if r.caption is None
                else "empty"
                if isinstance(r.caption, str)
                else "not text"
            )
            error = f"{r.where}: caption is {kind}; nothing to send to the LLM"
        out.append({"id": r.id, "image": r.image, "caption": r.caption, "error": error})
    return out


def dataset_sources(name: str, root: Path, split: str) -> list[dict]:
    """A dataset split's human references as generation sources (id IMAGE_ID#k)."""
    from eval.datasets import load_dataset

    ds = load_dataset(name, root, split, check_images=False)
    return [
        {"id": f"{s.image_id}#{k}", "image": s.image, "caption": ref}
        for s in ds.listed
        for k, ref in enumerate(s.references)
    ]
