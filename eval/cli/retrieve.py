"""`reconscore retrieve`: run composed image retrieval methods on a benchmark and write per-query, per-group and
seed-layout results."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.key_values import key_values
from retrieval.choices import INDEX_KINDS
from retrieval.methods import METHODS, TRAINING_FREE


def _methods_help() -> str:
    """The method list of the epilog, from the registry: each method with what it takes beyond the features."""
    import textwrap

    def one(m) -> str:
        needs = m.usage or m.needs()
        return f"{m.name} ({needs})" if needs else m.name

    text = "Methods (`all` = every training-free one): " + ", ".join(one(m) for m in METHODS.values()) + "."
    return textwrap.fill(text, 116)


METHODS_HELP = _methods_help()


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
"""
    + METHODS_HELP
    + """
Hyperparameters: --set METHOD.KEY=VALUE (e.g. weicom.lam=0.3, freedom.k=1, basic.harris=false). Loader options:
--option KEY=VALUE (xview2-cir: phrasing=default|alt1|alt2, database=pre+post|post; patterncom: text_template="being {value}").
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
@opt.benchmark_root()
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
@opt.optional_file(
    "--vocabulary",
    help="FreeDom's / SEARLE-OTI's vocabulary (.csv/.txt), or a bundled one by name (freedom:openimages-v7).",
)
@opt.optional_file("--phrases", help="SEARLE-OTI's LLM phrases per concept (.csv concept,phrase or .json).")
@opt.optional_file("--corpus-pos", help="BASIC's positive corpus.")
@opt.optional_file("--corpus-neg", help="BASIC's negative corpus.")
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
@opt.positive_int("--batch-size", default=None, help="Encoder batch size.")
@opt.weights_dir()
@opt.cache("feature")
@opt.positive_int("--chunk-size", default=None, help="Queries scored at once.")
@opt.retrieval_protocol()
@opt.positive_int("--limit", default=None, help="Only the first N queries (a quick look).")
@click.option(
    "--topk",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also write each query's K best database images (topk.csv/.parquet); 0 = off.",
)
@opt.choice(
    "--index",
    "index_kind",
    choices=INDEX_KINDS,
    default="exact",
    help="How --topk searches for linear methods (FAISS needs the faiss extra). Metrics are always exact.",
)
@click.option(
    "--save-bundle", is_flag=True, help="Also write bundle.npz (features-level, for retrieve-eval)."
)
@opt.overwrite()
def command(methods, dataset_root, options, sets, checkpoints, no_cache, index_kind, **same) -> int:
    """Run composed image retrieval methods on a benchmark and report mAP/recall in the papers' layout.
    (`same`: the options named as RetrieveConfig's fields.)"""
    from retrieval.methods import build_method
    from retrieval.run import RetrieveConfig, run_retrieve

    names = (
        TRAINING_FREE if methods.strip() == "all" else [m.strip() for m in methods.split(",") if m.strip()]
    )
    for name in names:
        METHODS[name]  # an unknown name fails here, before anything runs
    overrides = opt.method_sets(sets)
    cfg = RetrieveConfig(
        root=dataset_root,
        methods=list(dict.fromkeys(names)),
        options=key_values(options, "--option"),
        overrides=overrides,
        checkpoints={k: Path(v) for k, v in key_values(checkpoints, "--checkpoint").items()},
        cache=not no_cache,
        index=index_kind,
        **same,
    )
    caption_fn = rewrite_fn = None
    if "cirevl" in cfg.methods and cfg.captioner and cfg.rewriter:
        from eval import cirevl as cirevl_models

        prompts = build_method("cirevl", overrides.get("cirevl")).config
        caption_fn = cirevl_models.build_captioner(
            cfg.captioner, device=cfg.device, prompt=prompts.caption_prompt
        )
        rewrite_fn = cirevl_models.build_rewriter(
            cfg.rewriter, device=cfg.device, template=prompts.rewrite_template
        )
    if cfg.limit:
        click.echo(
            f"--limit {cfg.limit}: only the first {cfg.limit} queries; the numbers are not the benchmark's.",
            err=True,
        )
    outcome = run_retrieve(
        cfg, captioner=caption_fn, rewriter=rewrite_fn, log=lambda m: click.echo(m, err=True)
    )
    if outcome.table:
        click.echo(outcome.table)
    click.echo(f"results in {cfg.out}", err=True)
    opt.smoke_banner(outcome.record)
    return outcome.exit_code
