"""`reconscore generate` as a function: robustness sets (the ReconScore paper's Tables 4 and 5) from a text LLM,
journaled per request so a rerun resumes, written as generated.jsonl (+ triplets.jsonl for `length`) and run.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from preference_data import generators as gen
from recon_score.run_outputs import GENERATED, TRIPLETS

KINDS = ("paraphrase", "perturb", "length")


@dataclass
class GenerateJob:
    kind: str  # one of KINDS
    # id, image, caption, error (a source with an error is never sent: it becomes an error row)
    sources: list[dict]
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
        work = _Generation(job)
        res = run.run(work.spec())
    rows, extracted = work.rows(res)
    failed = sum(1 for r in [*rows, *extracted] if r.get("error"))
    return GenerateResult(rows=len(rows), failed=failed, path=job.out / GENERATED, record=res.info)


LLM_BATCH = 16  # prompts per LLM call, each batch journaled as it comes


class _Generation:
    """What generate hands the Run: each LLM request an item (for `length`, the triplet extractions first, then
    the rewrites built from them), generated.jsonl and triplets.jsonl its final files."""

    def __init__(self, job: GenerateJob):
        self.job = job
        self.sources = [s for s in job.sources if not s.get("error")]
        self.requests: dict[str, object] = {}
        self.config = {
            "kind": job.kind,
            "model": job.llm.identity(),
            "sampling": job.sampling.__dict__,
            "kinds": ",".join(job.kinds),
            "every_kind": job.every_kind,
            "lengths": ",".join(job.lengths),
            "n_triplets": job.n_triplets,
            "instruction": str(job.instruction) if job.instruction else None,
        }

    def spec(self):
        from recon_score.run_engine import RunSpec, Stage

        job = self.job
        if job.kind == "paraphrase":
            first = gen.paraphrase_requests(self.sources, instruction=job.instruction or "paraphrase")
        elif job.kind == "perturb":
            first = gen.perturb_requests(self.sources, kinds=job.kinds, every_kind=job.every_kind)
        else:
            first = gen.triplet_requests(_by_image(self.sources), n=job.n_triplets)
        stages = [
            Stage(self.compute, name="generated" if job.kind != "length" else "triplets", batch=LLM_BATCH)
        ]
        if job.kind == "length":
            stages.append(Stage(self.compute, name="generated", batch=LLM_BATCH, items=self._rewrites))
        return RunSpec(
            settings=self.config,
            items=self._items(first),
            stages=stages,
            outputs=self.outputs,
            record=self.info,
            unit="request",
            depends=[s for s in job.sources if s.get("error")],  # their error rows are in generated.jsonl too
        )

    def _items(self, requests: list) -> list:
        from recon_score.run_engine import Item

        self.requests.update({r.id: r for r in requests})
        return [Item(r.id, _request_inputs(r), name=f"request {r.id}") for r in requests]

    def _rewrites(self, done: dict) -> list:
        """`length`'s second stage: the rewrites of every triplet answer that parsed."""
        answers = [done["triplets"].get(r.id) for r in self.requests.values() if r.kind == "triplets"]
        extracted = _extracted(answers, self.job.n_triplets)
        return self._items(
            gen.rewrite_requests([r for r in extracted if r is not None], lengths=self.job.lengths)
        )

    def compute(self, batch: list, todo: list) -> list:
        def complete(prompts: list[str]) -> list[tuple[str | None, str | None]]:
            return [(c.text, c.error) for c in self.job.llm.complete(prompts, self.job.sampling)]

        rows = gen.run_requests([self.requests[i.id] for i in todo], complete)
        return [(row, {}) for row in rows]

    def rows(self, res) -> tuple[list[dict], list[dict]]:
        """generated.jsonl's rows (with one error row per source that could not be sent), and the triplets."""
        extracted = (
            _extracted(res.results("triplets"), self.job.n_triplets) if "triplets" in res.items else []
        )
        return _with_error_rows(res.results("generated"), self.job.sources, self.job.kind), extracted

    def outputs(self, res) -> dict[str, bytes]:
        from recon_score.atomic_io import jsonl_bytes

        rows, extracted = self.rows(res)
        files = {TRIPLETS: jsonl_bytes(extracted)} if self.job.kind == "length" else {}
        return {**files, GENERATED: jsonl_bytes(rows)}

    def info(self, res) -> dict:
        rows, extracted = self.rows(res)
        failed = sum(1 for r in [*rows, *extracted] if r.get("error"))
        return {**self.config, "sources": len(self.sources), "rows": len(rows), "failed": failed}


def _request_inputs(request: gen.Request) -> dict:
    """Everything the request's journaled row is built from but the answer (its id, source, image, caption, kind,
    extra fields, prompt and instruction): a source table edited in any of them recomputes that row, so a rerun's
    generated.jsonl is a fresh run's, never one with stale source fields."""
    row = request.row(None, None)
    return {k: v for k, v in row.items() if k not in ("caption", "error")}


def _extracted(rows: list[dict | None], n: int) -> list[dict | None]:
    """The triplet answers with their parsed <subject, relation, object> triplets (at most `n` each)."""
    out = []
    for r in rows:
        if r is not None:
            r = {**r, "triplets": [list(t) for t in gen.parse_triplets(r["caption"] or "")][:n]}
            if not r["triplets"] and not r["error"]:
                r["error"] = "no <subject, relation, object> triplet could be parsed from the answer"
        out.append(r)
    return out


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
