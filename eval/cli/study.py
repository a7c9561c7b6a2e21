"""`reconscore study NAME`: the ReconScore paper's experiments as commands, each writing its table (markdown +
CSV, the paper's layout) and a run.json with the full configuration. What each computes is in
eval.studies.commands; this module parses and prints."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.errors import EXIT_PARTIAL
from recon_score.key_values import key_values

metric_opts = opt.options(
    click.option(
        "--preset", default="paper", show_default=True, help="ReconScore preset for the recon_score metric."
    ),
    opt.clip_encoder(),
    opt.long_text(),
    opt.device(),
)


out_option = click.option("--out", type=opt.RUN_FOLDER, required=True)


def _file(flag: str, help: str, *, required: bool = True, folder: bool = False) -> Callable:
    kind = click.Path(file_okay=not folder, dir_okay=folder, exists=True, path_type=Path)
    return click.option(flag, type=kind, required=required, default=None, help=help)


def _runs(help: str) -> Callable:
    return click.option("--run", "runs", multiple=True, required=True, help=help)


def _references(default: str) -> Callable:
    return _file("--references", f"GT captions table (image, caption); default: {default}.", required=False)


def _metrics(default: str) -> Callable:
    return click.option("--metrics", default=default, show_default=True)


def _show(out: Path, name: str, options: dict, *, print_note: bool = False) -> int:
    """Compute the study (eval.studies.commands, given the options by name) in its run folder, write it, print
    its warnings and tables; exit status 3 when it skipped items. The folder is checked and locked first: a
    refused --out costs no computing."""
    from eval.studies import commands
    from recon_score.run_engine import RunFolder

    with RunFolder("study", out) as run:
        study = getattr(commands, name.replace("-", "_"))(**options)
        for line in study.warnings:
            click.echo(line, err=True)
        markdown, record = commands.write_study(run, name, study)
    for table, (_df, title) in study.tables.items():
        click.echo(f"{title}\n")
        click.echo(markdown[table].split("\n", 2)[2])
    if print_note and study.note:
        click.echo(study.note)
    opt.smoke_banner(record)
    return EXIT_PARTIAL if study.partial else 0


@click.group("study")
def command() -> None:
    """The ReconScore paper's experiments (Tables 3-9, Fig. 4) and the RS-CIR benchmark paper's Fig. 12."""


@command.command("models")
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    required=True,
    help="LABEL=NAME:ROOT[:SPLIT], e.g. ucm=ucm-captions:/data/ucm:test (repeatable).",
)
@click.option(
    "--captions",
    "captions",
    multiple=True,
    required=True,
    help="MODEL@LABEL=captions.jsonl: a model's captions on a dataset (repeatable).",
)
@click.option(
    "--metrics", default="recon_score", show_default=True, help="Comma-separated; the first is tabled."
)
@click.option(
    "--paradigms",
    "paradigms_spec",
    default=None,
    help="MODEL=GROUP,... (or a .json / .csv file): group rows of the table, e.g. GeoChat=Fine-tuned,"
    "Qwen3-VL-8B=Zero-shot.",
)
@click.option("--pub", "pubs", multiple=True, help="MODEL=VENUE for the Pub. column, e.g. GeoChat=CVPR24.")
@metric_opts
@opt.recon_seeds()
@out_option
def models(out, **options) -> int:
    """Table 3: several captioning models on several datasets (ReconScore; other metrics in all_metrics.csv)."""
    return _show(out, "models", options)


@command.command("n-sweep")
@_runs("LABEL=DESCRIBE_RUN_DIR: a `reconscore describe` run with >= max(N) candidates (repeatable).")
@click.option("--ns", default="1,2,4,6,8,10", show_default=True, help="Pool sizes N.")
@out_option
def n_sweep(out, **options) -> int:
    """Table 8: held-out score of the selected caption vs pool size N (in-sample beside it), from one pool per
    image (the first N samples; no resampling). Held-out scores for every N need `describe --eval-candidates
    all`."""
    return _show(out, "n-sweep", options)


@command.command("selection")
@_file("--run", "A `reconscore describe` run (its candidate pool).", folder=True)
@click.option(
    "--selectors",
    default="meteor,clipscore,recon_score",
    show_default=True,
    help="Selection metrics to compare.",
)
@click.option(
    "--metrics",
    default="recon_score,clipscore,bleu4,meteor,cider",
    show_default=True,
    help="How the picks are rated.",
)
@_file(
    "--human",
    "JSONL {image_id, index}: the candidate humans chose; adds the preference rate (Table 7).",
    required=False,
)
@opt.images_root("the describe run's")
@click.option(
    "--selection-seed",
    type=int,
    default=0,
    show_default=True,
    help="T2I seed ReconScore selects by when the run was selected by another metric (never the evaluation "
    "seed: its picks are rated on independent renders).",
)
@click.option(
    "--eval-seed",
    type=int,
    default=None,
    help="T2I seed of the recon_score evaluation column [default: the preset's]; refused when it is one of "
    "the run's selection seeds.",
)
@metric_opts
@out_option
def selection(out, **options) -> int:
    """Table 7: what each selection metric picks from the same pool, and how often humans agree."""
    return _show(out, "selection", options)


@command.command("encoders")
@_runs("SYSTEM=SCORE_RUN_DIR: a `reconscore score` run per captioning system (repeatable).")
@click.option(
    "--encoders",
    required=True,
    help="Comma-separated encoder specs, e.g. dreamsim:ensemble,"
    "open_clip:ViT-L-14/openai,hf:facebook/dinov2-base,lpips:alex.",
)
@opt.device()
@out_option
def encoders(out, **options) -> int:
    """Fig. 4: the same reconstructions under several encoders; rank consistency of systems (Kendall tau-b).

    A row whose original or reconstruction cannot be read is skipped and listed in run.json (exit status 3).
    """
    return _show(out, "encoders", options)


@command.command("explain")
@_runs("SYSTEM=SCORE_RUN_DIR: a `reconscore score --explain` run (repeatable).")
@out_option
def explain(out, **options) -> int:
    """Which phrase kinds (counts, colours, spatial relations, object names) most often hurt a caption: a phrase
    hurts when leaving it out brings the reconstruction significantly closer (docs/explain.md)."""
    return _show(out, "explain", options, print_note=True)


@command.command("t2i")
@_file("--captions", None)
@opt.images_root("the captions file's folder")
@click.option("--presets", default="paper,text2earth,flux1-dev,flux2-dev,flux2-klein", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None)
@opt.device()
@opt.trust_remote_code("the T2I models (text2earth's custom pipeline)")
@out_option
def t2i(out, **options) -> int:
    """Table 9: several T2I presets on the same captions: token limit, render seconds per image, ReconScore."""
    return _show(out, "t2i", options)


@command.command("paraphrase")
@_file("--paraphrased", "generated.jsonl of `reconscore generate paraphrase`.")
@_file("--perturbed", "generated.jsonl of `reconscore generate perturb`.")
@_references("the generated rows' source captions")
@opt.images_root("none", extra=" Needed by the image metrics (clipscore, recon_score).")
@_metrics("bleu1,bleu2,bleu3,bleu4,meteor,rouge,cider,clipscore,recon_score")
@metric_opts
@out_option
def paraphrase(out, **options) -> int:
    """Table 4: paraphrased vs one-fact-perturbed captions; a faithful metric prefers the paraphrase (Δ > 0)."""
    return _show(out, "paraphrase", options)


@command.command("length")
@_file("--generated", "generated.jsonl of `reconscore generate length`.")
@_references("the references kept in the generated rows")
@opt.images_root("none", extra=" Needed by the image metrics (clipscore, longclipscore, recon_score).")
@_metrics("bleu1,bleu2,bleu3,bleu4,meteor,rouge,cider,clipscore,longclipscore,recon_score")
@metric_opts
@out_option
def length(out, **options) -> int:
    """Table 5: short / medium / long captions from the same triplets: mean per length and σ."""
    return _show(out, "length", options)


@command.command("paradigms")
@_file("--ranking", "Ranking file (.jsonl/.csv, UCM-preference format) whose candidates name their `model`.")
@click.option(
    "--paradigms",
    "paradigms_spec",
    required=True,
    help="MODEL=PARADIGM,... or a .json object / .csv (model, paradigm), e.g. GeoChat=Fine-Tuned,"
    "Qwen3-VL-8B=Zero-Shot.",
)
@_file(
    "--scores",
    "A `reconscore score` run over the candidates (matched by image + caption); else they are scored now.",
    required=False,
    folder=True,
)
@opt.images_root("none", extra=" Needed to score the ranking's candidates now (without --scores).")
@click.option("--preset", default="paper", show_default=True, help="ReconScore preset (scoring now).")
@opt.device()
@out_option
def paradigms(out, **options) -> int:
    """Table 6: zero-shot vs fine-tuned models: human wins, preference share and mean ReconScore per paradigm."""
    if options["scores"] is None and options["images_root"] is None:
        raise click.UsageError("give --scores RUN_DIR or --images ROOT (to score the candidates)")
    return _show(out, "paradigms", options)


def _numbers(kind: type) -> Callable:
    def parse(ctx, param, value: str) -> tuple:
        items = [x.strip() for x in value.split(",")]
        if not any(items):
            raise click.BadParameter(f"needs at least one {kind.__name__}, got {value!r}")
        if not all(items):
            raise click.BadParameter(f"an empty value at position {items.index('') + 1} of {value!r}")
        try:
            return tuple(kind(x) for x in items)
        except ValueError:
            raise click.BadParameter(f"expected comma-separated {kind.__name__}s, got {value!r}") from None

    return parse


@command.command("compodiff-sweep")
@opt.benchmark_root(default="patterncom")
@click.option(
    "--encoder", required=True, help="CLIP ViT-L/14 spec, e.g. open_clip:ViT-L-14-quickgelu/openai."
)
@_file("--checkpoint", "The CompoDiff release folder (e.g. navervision/CompoDiff-Aesthetic).", folder=True)
@click.option("--weights", default="0.1,0.2,0.3,0.4,0.5", show_default=True, callback=_numbers(float))
@click.option(
    "--sampler-steps",
    default="5,10,20",
    show_default=True,
    callback=_numbers(int),
    help="CompoDiff's denoising step counts (the rows).",
)
@click.option("--set", "sets", multiple=True, help="Another CompoDiff setting KEY=VALUE (repeatable).")
@click.option("--option", "options", multiple=True, help="Loader option KEY=VALUE (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N queries.")
@opt.device()
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Encoder batch size.")
@opt.cache("feature")
@out_option
def compodiff_sweep(checkpoint, dataset_root, weights, sampler_steps, sets, options, no_cache, **same) -> int:
    """The RS-CIR benchmark paper's Fig. 12: CompoDiff's mAP per source weight (columns) and steps (rows).

    Each point is a `reconscore retrieve` run under OUT/points/ (features cached, finished points read back).
    (`same`: the options named as RetrieveConfig's fields.)
    """
    from retrieval.run import RetrieveConfig

    if not dataset_root.is_dir():
        raise click.BadParameter(f"{dataset_root} is not a folder", param_hint="'--root'")
    base = RetrieveConfig(
        methods=["compodiff"],
        options=key_values(options, "--option"),
        overrides={"compodiff": key_values(sets, "--set")},
        checkpoints={"compodiff": checkpoint},
        root=dataset_root,
        cache=not no_cache,
        **same,
    )
    log = functools.partial(click.echo, err=True)
    return _show(
        base.out, "compodiff-sweep", {"base": base, "weights": weights, "steps": sampler_steps, "log": log}
    )
