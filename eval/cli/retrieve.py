"""`reconscore retrieve`: run composed image retrieval methods on a benchmark and write per-query, per-group and
seed-layout results."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import options as opt

# Kept in sync with retrieval.datasets.BENCHMARKS / retrieval.methods.METHODS (not imported: --help loads no torch).
BENCHMARK_NAMES = ("patterncom", "xview2-cir", "icir", "edir", "circo", "cirr", "fashioniq")
TRAINING_FREE = ("text", "image", "sum", "product", "weicom", "basic", "freedom", "cirevl")


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def _method_sets(values: tuple[str, ...]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for key, value in _pairs(values, "--set").items():
        method, dot, name = key.partition(".")
        if not dot or not name:
            raise click.BadParameter(f"expected METHOD.KEY=VALUE, got {key}={value}", param_hint="--set")
        out.setdefault(method, {})[name] = value
    return out


def build_captioner(spec: str, *, device: str | None, prompt: str):
    """CIReVL's captioner from the describer's backends: BACKEND:MODEL, greedy, one caption per image."""
    from describer.backends import CaptionRequest, Sampling
    from describer.backends import build_captioner as build
    from recon_score.errors import ReconScoreError
    from recon_score.runtime import resolve_device

    backend, sep, model = spec.partition(":")
    if not sep or not model:
        raise click.BadParameter(
            f"expected BACKEND:MODEL (e.g. transformers:Salesforce/blip2-opt-2.7b), got {spec!r}",
            param_hint="--captioner",
        )
    # one-line captions for the rewriter's prompt, from the image as read
    captioner = build(backend, model, device=resolve_device(device), collapse_whitespace=True)
    sampling = Sampling(n=1, temperature=0.0, top_p=1.0, max_new_tokens=77)

    def caption(images: list) -> list[str]:
        requests = [CaptionRequest(image=im, seed=0, key=str(i)) for i, im in enumerate(images)]
        out = []
        for i, candidates in enumerate(captioner.generate(requests, prompt, sampling)):
            if candidates[0].text is None:
                raise ReconScoreError(
                    f"captioner {spec}: no caption for reference image {i}: {candidates[0].error}"
                )
            out.append(candidates[0].text)
        return out

    return caption


def build_rewriter(name: str, *, device: str | None, template: str):
    """CIReVL's LLM rewriter: a transformers causal LM (hub id or local folder), greedy decoding."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recon_score.hub import resolve_model
    from recon_score.runtime import resolve_device

    resolved = resolve_model(name, kind="text LLM", option="--rewriter")
    dev = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(str(resolved.path))
    model = AutoModelForCausalLM.from_pretrained(str(resolved.path)).to(dev).eval()

    @torch.inference_mode()
    def rewrite(captions: list[str], texts: list[str]) -> list[str]:
        out = []
        for caption, text in zip(captions, texts):
            prompt = template.format(caption=caption, text=text)
            if tokenizer.chat_template:
                ids = tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
                )
            else:
                ids = tokenizer(prompt, return_tensors="pt").input_ids
            gen = model.generate(ids.to(dev), do_sample=False, max_new_tokens=77)
            out.append(" ".join(tokenizer.decode(gen[0, ids.shape[1] :], skip_special_tokens=True).split()))
        return out

    return rewrite


@click.command(
    "retrieve",
    epilog="""\b
Examples:
  reconscore retrieve --benchmark xview2-cir --root /data/xview2 --annotations xview2_cir.csv \\
      --encoder open_clip:ViT-L-14/openai --methods text,image,sum,product,weicom --out runs/xview2
  reconscore retrieve --benchmark patterncom --root /data/PatternNet --encoder open_clip:ViT-L-14/openai \\
      --methods all --vocabulary openimages_boxable_classes.csv \\
      --corpus-pos icir_generic_subjects.csv --corpus-neg icir_generic_styles.csv --out runs/patterncom
  reconscore retrieve --benchmark icir --root /data/icir --encoder open_clip:ViT-L-14/openai --methods basic \\
      --corpus-pos icir_generic_subjects.csv --corpus-neg icir_generic_styles.csv --set basic.query_expansion=false --out runs/icir
\b
Methods: text, image, sum, product, weicom (λ=0.5), basic (needs --corpus-pos/--corpus-neg), freedom (needs
--vocabulary), cirevl (needs --captioner and --rewriter), pic2word and searle (need --checkpoint NAME=PATH, the
released weights, and the CLIP they were trained on as --encoder), searle-oti (seed 000's SEARLE: needs
--vocabulary and --phrases, or --set searle-oti.lambda_gpt=0); compodiff and magiclens are refused with the
reason (`reconscore models check compodiff`). `all` = every training-free method. Hyperparameters: --set
METHOD.KEY=VALUE (e.g. weicom.lam=0.3, freedom.k=1, basic.harris=false). Loader options: --option KEY=VALUE
(xview2-cir: phrasing=default|alt1|alt2, database=pre+post|post; patterncom: text_template="being {value}").
\b
Output in --out: per_query.csv/.parquet (AP and recall/hit/precision@K per method and query), per_group.csv,
table.md + table_<metric>.csv (methods x groups, Avg. = macro, Total = overall, percent), run.json (settings,
encoder, per-method status and notes, provenance); --save-bundle adds bundle.npz for `retrieve-eval`; --topk K
adds topk.csv/.parquet (method, query, rank, item, score, relevant), searched with --index for linear methods.
Features are cached (safetensors, $RECONSCORE_CACHE/retrieval/features) and extraction resumes after a crash.
An unreadable image is skipped (with its queries), named in run.json skipped_images.
Exit status: 0 every method ran on every image, 3 some method could not run or some image was skipped (reasons
printed and in run.json), 1 the run could not start.""",
)
@click.option("--benchmark", required=True, type=click.Choice(BENCHMARK_NAMES), help="Benchmark loader.")
@click.option(
    "--root",
    "dataset_root",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Dataset folder (annotations + images).",
)
@click.option("--encoder", required=True, help="Image+text encoder spec (`reconscore models list`).")
@click.option(
    "--methods", default="text,image,sum,product,weicom", show_default=True, help="Comma-separated, or `all`."
)
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
@click.option(
    "--annotations",
    type=click.Path(path_type=Path),
    default=None,
    help="Annotation file/folder if not under --root.",
)
@click.option("--option", "options", multiple=True, help="Loader option KEY=VALUE (repeatable).")
@click.option("--set", "sets", multiple=True, help="Method hyperparameter METHOD.KEY=VALUE (repeatable).")
@click.option(
    "--vocabulary",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="FreeDom's / SEARLE-OTI's vocabulary (.csv/.txt), or a bundled one by name (freedom:openimages-v7).",
)
@click.option(
    "--phrases",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SEARLE-OTI's LLM phrases per concept (.csv concept,phrase or .json).",
)
@click.option(
    "--corpus-pos",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="BASIC's positive corpus.",
)
@click.option(
    "--corpus-neg",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="BASIC's negative corpus.",
)
@click.option("--captioner", default=None, help="CIReVL captioner BACKEND:MODEL (describer backends).")
@click.option(
    "--rewriter", default=None, help="CIReVL rewriting LLM (transformers causal LM: hub id or folder)."
)
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    help="Learned method checkpoint NAME=PATH (pic2word=pic2word_model.pt, searle=SEARLE_ViT-L14.pt).",
)
@opt.device(" Places the encoder (and CIReVL's models).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Encoder batch size.")
@opt.weights_dir()
@opt.cache("feature")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Queries scored at once.")
@click.option(
    "--ties", type=click.Choice(["index", "pessimistic", "optimistic"]), default="index", show_default=True
)
@click.option(
    "--empty-positives", type=click.Choice(["zero", "skip", "error"]), default="zero", show_default=True
)
@click.option(
    "--group-mean", type=click.Choice(["queries", "subgroups"]), default="queries", show_default=True
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Only the first N queries (a quick look)."
)
@click.option(
    "--topk",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also write each query's K best database images (topk.csv/.parquet); 0 = off.",
)
@click.option(
    "--index",
    "index_kind",
    type=click.Choice(["exact", "faiss-flat", "faiss-ivf", "faiss-hnsw"]),
    default="exact",
    show_default=True,
    help="How --topk searches for linear methods (FAISS needs the faiss extra). Metrics are always exact.",
)
@click.option(
    "--save-bundle", is_flag=True, help="Also write bundle.npz (features-level, for retrieve-eval)."
)
@opt.overwrite()
def command(
    benchmark,
    dataset_root,
    encoder,
    methods,
    out,
    annotations,
    options,
    sets,
    vocabulary,
    phrases,
    corpus_pos,
    corpus_neg,
    captioner,
    rewriter,
    checkpoints,
    device,
    batch_size,
    weights_dir,
    cache_dir,
    no_cache,
    chunk_size,
    ties,
    empty_positives,
    group_mean,
    limit,
    topk,
    index_kind,
    save_bundle,
    overwrite,
) -> int:
    """Run composed image retrieval methods on a benchmark and report mAP/recall in the seeds' layout."""
    from retrieval.methods import METHODS, UnknownMethodError, build_method
    from retrieval.run import RetrieveConfig, run_retrieve

    names = (
        list(TRAINING_FREE)
        if methods.strip() == "all"
        else [m.strip() for m in methods.split(",") if m.strip()]
    )
    for name in names:
        if name not in METHODS:
            raise UnknownMethodError(name)
    overrides = _method_sets(sets)
    cfg = RetrieveConfig(
        benchmark=benchmark,
        root=dataset_root,
        encoder=encoder,
        methods=list(dict.fromkeys(names)),
        out=out,
        annotations=annotations,
        options=_pairs(options, "--option"),
        overrides=overrides,
        vocabulary=vocabulary,
        phrases=phrases,
        corpus_pos=corpus_pos,
        corpus_neg=corpus_neg,
        checkpoints={k: Path(v) for k, v in _pairs(checkpoints, "--checkpoint").items()},
        captioner=captioner,
        rewriter=rewriter,
        device=device,
        batch_size=batch_size,
        weights_dir=weights_dir,
        cache=not no_cache,
        cache_dir=cache_dir,
        chunk_size=chunk_size,
        ties=ties,
        empty_positives=empty_positives,
        group_mean=group_mean,
        limit=limit,
        topk=topk,
        index=index_kind,
        save_bundle=save_bundle,
        overwrite=overwrite,
    )
    caption_fn = rewrite_fn = None
    if "cirevl" in cfg.methods and captioner and rewriter:
        prompts = build_method("cirevl", overrides.get("cirevl")).config
        caption_fn = build_captioner(captioner, device=device, prompt=prompts.caption_prompt)
        rewrite_fn = build_rewriter(rewriter, device=device, template=prompts.rewrite_template)
    if limit:
        click.echo(
            f"--limit {limit}: only the first {limit} queries; the numbers are not the benchmark's.", err=True
        )
    outcome = run_retrieve(
        cfg, captioner=caption_fn, rewriter=rewrite_fn, log=lambda m: click.echo(m, err=True)
    )
    table = out / "table.md"
    if table.is_file():
        click.echo(table.read_text())
    click.echo(f"results in {out}", err=True)
    return outcome.exit_code
