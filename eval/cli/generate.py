"""`reconscore generate`: robustness sets (the ReconScore paper Tables 4 and 5) with any text LLM backend."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from describer.backends import BACKENDS
from eval.cli import options as opt
from recon_score.errors import EXIT_OK, EXIT_PARTIAL

KINDS = ("paraphrase", "perturb", "length")  # eval.generate.KINDS (not imported: --help stays light)


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
@click.argument("kind", type=opt.Choice(KINDS))
@click.option(
    "--captions",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Source captions (.jsonl/.csv with id, image, caption).",
)
@opt.dataset_split("Use a dataset split's references as sources", annotations=False)
@opt.choice("--backend", choices=BACKENDS, default="transformers")
@click.option("--model", required=True, help="LLM hub id / local folder (openai: the served model name).")
@click.option("--base-url", default=None, help="openai backend endpoint.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True)
@opt.positive_int("--concurrency", default=8, help="openai backend: requests in flight.")
@opt.device()
@opt.optional_file("--instruction", help="paraphrase: your own instruction file ({caption} placeholder).")
@click.option(
    "--kinds",
    default="object,count,colour,spatial",
    show_default=True,
    help="perturb: fact kinds, cycled over the captions.",
)
@click.option("--every-kind", is_flag=True, help="perturb: one row per kind for every caption.")
@click.option("--lengths", default="short,medium,long", show_default=True, help="length: which rewrites.")
@opt.positive_int(
    "--n-triplets", default=10, help="length: triplets to extract per image (the ReconScore paper: 10)."
)
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--top-p", type=float, default=0.9, show_default=True)
@opt.positive_int("--max-new-tokens", default=512, help="Tokens each rewrite may generate.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Per prompt: derived from it and the prompt."
)
@opt.positive_int("--limit", default=None, help="Only the first N sources.")
@opt.overwrite()
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def command(kind, captions, dataset, dataset_root, split, device, kinds, lengths, limit, **kw) -> int:
    """Generate paraphrased, perturbed or length-controlled captions with a text LLM."""
    from describer.backends import Sampling, build_backend
    from eval.generate import GenerateJob, caption_sources, dataset_sources, run_generate
    from recon_score.runtime import resolve_device

    if (captions is None) == (dataset is None):
        raise click.UsageError("give exactly one of --captions or --dataset")
    opt.dataset_root(dataset, dataset_root)
    sources = dataset_sources(dataset, dataset_root, split) if dataset else caption_sources(captions)
    backend = {k: kw.pop(k) for k in ("backend", "model", "base_url", "api_key_env", "concurrency")}
    llm = build_backend(**backend, text_only=True, device=resolve_device(device))
    llm.preflight()
    sampling = Sampling(n=1, **{k: kw.pop(k) for k in ("temperature", "top_p", "max_new_tokens", "seed")})
    job = GenerateJob(
        kind=kind,
        sources=sources[:limit] if limit else sources,
        llm=llm,
        sampling=sampling,
        kinds=tuple(k.strip() for k in kinds.split(",")),
        lengths=tuple(x.strip() for x in lengths.split(",")),
        argv=["reconscore", *sys.argv[1:]],
        **kw,  # out, instruction, every_kind, n_triplets, overwrite: named as the job's fields
    )
    result = run_generate(job)
    click.echo(f"{result.rows} rows ({result.failed} failed) -> {result.path}")
    opt.smoke_banner(result.record)
    return EXIT_PARTIAL if result.failed else EXIT_OK
