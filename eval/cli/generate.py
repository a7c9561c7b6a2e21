"""`reconscore generate`: robustness sets (seed 004 Tables 4 and 5) with any text LLM backend."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.errors import EXIT_OK, EXIT_PARTIAL

KINDS = ("paraphrase", "perturb", "length")


@click.command(
    "generate",
    epilog="""\b
Examples:
  reconscore generate paraphrase --captions caps.jsonl --backend openai --base-url http://localhost:8000/v1 \\
      --model Qwen/Qwen3-32B --out sets/para
  reconscore generate perturb --captions caps.jsonl --backend transformers --model /models/qwen3-8b --out sets/pert
  reconscore generate length --dataset rsitmd --root /data/rsitmd --backend vllm --model Qwen/Qwen3-8B --out sets/len
  reconscore generate paraphrase --captions caps.jsonl --model smoke:qwen3-text --out /tmp/smoke   # offline check
\b
Input: a captions table (JSONL/CSV with id, image, caption) or a dataset split (--dataset/--root/--split: its
human references). `length` groups captions by image and extracts triplets from all of an image's captions.
Output in --out: generated.jsonl (id, source_id, image, source_caption, kind, perturbation or triplets, caption,
error, instruction, instruction_file, instruction_sha256), triplets.jsonl for `length`, run.json. Resumable.""",
)
@click.argument("kind", type=click.Choice(KINDS))
@click.option(
    "--captions",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Source captions (.jsonl/.csv with id, image, caption).",
)
@click.option("--dataset", default=None, help="Use a dataset split's references as sources (needs --root).")
@click.option("--root", "dataset_root", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--split", default="test", show_default=True)
@click.option(
    "--backend",
    type=click.Choice(["transformers", "vllm", "openai"]),
    default="transformers",
    show_default=True,
)
@click.option("--model", required=True, help="LLM hub id / local folder (openai: the served model name).")
@click.option("--base-url", default=None, help="openai backend endpoint.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True)
@opt.device()
@click.option(
    "--instruction",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="paraphrase: your own instruction file ({caption} placeholder).",
)
@click.option(
    "--kinds",
    default="object,count,colour,spatial",
    show_default=True,
    help="perturb: fact kinds, cycled over the captions.",
)
@click.option("--every-kind", is_flag=True, help="perturb: one row per kind for every caption.")
@click.option("--lengths", default="short,medium,long", show_default=True, help="length: which rewrites.")
@click.option(
    "--n-triplets",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="length: triplets to extract per image (seed 004: 10).",
)
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--top-p", type=float, default=0.9, show_default=True)
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=512, show_default=True)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Per prompt: derived from it and the prompt."
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N sources.")
@opt.overwrite()
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def command(
    kind,
    captions,
    dataset,
    dataset_root,
    split,
    backend,
    model,
    base_url,
    api_key_env,
    concurrency,
    device,
    instruction,
    kinds,
    every_kind,
    lengths,
    n_triplets,
    temperature,
    top_p,
    max_new_tokens,
    seed,
    limit,
    overwrite,
    out,
) -> int:
    """Generate paraphrased, perturbed or length-controlled captions with a text LLM."""
    from describer.backends import Sampling
    from describer.backends.text import build_text_llm
    from preference_data import generators as gen
    from recon_score.atomic_io import read_jsonl, sha256_json, write_json_atomic, write_jsonl_atomic
    from recon_score.run_engine import Journal
    from recon_score.runtime import provenance, resolve_device, utc_now

    every_source = _sources(captions, dataset, dataset_root, split)
    if limit:
        every_source = every_source[:limit]
    sources = [s for s in every_source if not s.get("error")]  # the others are error rows, never sent
    llm = build_text_llm(
        backend,
        model,
        device=resolve_device(device),
        base_url=base_url,
        api_key_env=api_key_env,
        concurrency=concurrency,
    )
    llm.preflight()
    sampling = Sampling(n=1, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)

    def complete(prompts: list[str]) -> list[tuple[str | None, str | None]]:
        return [(c.text, c.error) for c in llm.complete(prompts, sampling)]

    config = {
        "kind": kind,
        "model": llm.identity(),
        "sampling": sampling.__dict__,
        "kinds": kinds,
        "every_kind": every_kind,
        "lengths": lengths,
        "n_triplets": n_triplets,
        "instruction": str(instruction) if instruction else None,
    }
    fp = sha256_json(config)[:16]
    out.mkdir(parents=True, exist_ok=True)
    if overwrite:
        import shutil

        shutil.rmtree(out / "journal", ignore_errors=True)
    started = utc_now()

    def stage(name: str, requests) -> list[dict]:
        path = out / "journal" / f"{name}.jsonl"
        done = {r["id"]: r for r in read_jsonl(path)[1:]}
        with Journal(path, fingerprint=fp, header=config) as journal:
            gen.run_requests(requests, complete, done=set(done), on_rows=journal.write)
        rows = {r["id"]: r for r in read_jsonl(path)[1:]}
        return [rows[r.id] for r in requests]

    extracted: list[dict] = []
    if kind == "paraphrase":
        rows = stage("generated", gen.paraphrase_requests(sources, instruction=instruction or "paraphrase"))
    elif kind == "perturb":
        rows = stage(
            "generated",
            gen.perturb_requests(
                sources, kinds=tuple(k.strip() for k in kinds.split(",")), every_kind=every_kind
            ),
        )
    else:
        images = _by_image(sources)
        extracted = stage("triplets", gen.triplet_requests(images, n=n_triplets))
        for r in extracted:
            r["triplets"] = [list(t) for t in gen.parse_triplets(r["caption"] or "")][:n_triplets]
            if not r["triplets"] and not r["error"]:
                r["error"] = "no <subject, relation, object> triplet could be parsed from the answer"
        write_jsonl_atomic(out / "triplets.jsonl", extracted)
        rows = stage(
            "generated", gen.rewrite_requests(extracted, lengths=tuple(x.strip() for x in lengths.split(",")))
        )
    rows = _with_error_rows(rows, every_source, kind)
    write_jsonl_atomic(out / "generated.jsonl", rows)
    failed = sum(1 for r in rows if r.get("error"))
    if kind == "length":
        failed += sum(1 for r in extracted if r.get("error"))
    write_json_atomic(
        out / "run.json",
        {
            "command": "generate",
            **config,
            "sources": len(sources),
            "rows": len(rows),
            "failed": failed,
            "started": started,
            "finished": utc_now(),
            "provenance": {**provenance(), "argv": ["reconscore", *sys.argv[1:]]},
        },
    )
    click.echo(f"{len(rows)} rows ({failed} failed) -> {out / 'generated.jsonl'}")
    return EXIT_PARTIAL if failed else EXIT_OK


def _sources(captions: Path | None, dataset: str | None, root: Path | None, split: str) -> list[dict]:
    if (captions is None) == (dataset is None):
        raise click.UsageError("give exactly one of --captions or --dataset")
    if dataset:
        if root is None:
            raise click.UsageError("--dataset needs --root")
        from eval.datasets import load_dataset

        ds = load_dataset(dataset, root, split, check_images=False)
        return [
            {"id": f"{s.image_id}#{k}", "image": s.image, "caption": ref}
            for s in ds.listed
            for k, ref in enumerate(s.references)
        ]
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
