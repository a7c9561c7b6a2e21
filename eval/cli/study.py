"""`reconscore study NAME`: the ReconScore paper's experiments as commands, each writing its table (markdown +
CSV, the paper's layout) and a run.json with the full configuration. Tables are shaped in eval.studies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from eval.cli import options as opt
from recon_score.errors import EXIT_PARTIAL

_METRIC_OPTS = [
    click.option(
        "--preset", default="paper", show_default=True, help="ReconScore preset for the recon_score metric."
    ),
    opt.clip_encoder(),
    opt.long_text(),
    opt.device(),
]


metric_opts = opt.options(*_METRIC_OPTS)


def _options(preset, encoder, long_text, device) -> dict:
    from eval.metrics import metric_options

    return metric_options(encoder=encoder, long_text=long_text, preset=preset, device=device)


def _note(preset: str) -> str | None:
    from recon_score.presets import PRESETS, SMOKE_NOTE

    p = PRESETS.get(preset)
    return SMOKE_NOTE if p is not None and p.meaningless else None


def _finish(out: Path, tables: dict, study: str, config: dict, started: str, *, note=None, **extra) -> int:
    from eval.studies.common import write_run, write_table

    for name, (df, title) in tables.items():
        write_table(out, name, df, title=title)
        click.echo(f"{title}\n")
        click.echo((out / f"{name}.md").read_text().split("\n", 2)[2])
    write_run(out, study, config, started=started, note=note, **extra)
    return 0


@click.group("study")
def command() -> None:
    """The ReconScore paper's experiments (Tables 3-9, Fig. 4) on your models and data."""


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
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def models(
    datasets, captions, metrics, paradigms_spec, pubs, preset, encoder, long_text, device, recon_seeds, out
) -> int:
    """Table 3: several captioning models on several datasets (ReconScore; other metrics in all_metrics.csv)."""
    from eval.metrics import parse_metric_names
    from eval.studies.common import parse_pairs
    from eval.studies.paradigms import parse_paradigms
    from eval.studies.tables import evaluate_models, models_tables
    from recon_score.runtime import utc_now

    started, names = utc_now(), parse_metric_names(metrics)
    ds_specs, runs = parse_pairs(datasets, "--dataset"), parse_pairs(captions, "--captions")
    options = _options(preset, encoder, long_text, device)
    options["recon_score"]["seeds"] = recon_seeds
    long, model_names, joins, cis = evaluate_models(ds_specs, runs, names, options=options)
    paradigm_of = parse_paradigms(paradigms_spec) if paradigms_spec else None
    tables = models_tables(
        long,
        model_names,
        list(ds_specs),
        names[0],
        paradigm_of=paradigm_of,
        pub=parse_pairs(pubs, "--pub"),
        cis=cis,
    )
    config = {
        "datasets": ds_specs,
        "captions": runs,
        "metrics": names,
        "preset": preset,
        "encoder": encoder,
        "recon_seeds": recon_seeds,
        "paradigms": paradigm_of,
        "pub": parse_pairs(pubs, "--pub"),
    }
    ci = {f"{m}@{lab}": v for (m, lab), v in cis.items()}
    return _finish(out, tables, "models", config, started, note=_note(preset), joins=joins, recon_score_ci=ci)


@command.command("n-sweep")
@click.option(
    "--run",
    "runs",
    multiple=True,
    required=True,
    help="LABEL=DESCRIBE_RUN_DIR: a `reconscore describe` run with >= max(N) candidates (repeatable).",
)
@click.option("--ns", default="1,2,4,6,8,10", show_default=True, help="Pool sizes N.")
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def n_sweep(runs, ns, out) -> int:
    """Table 8: held-out score of the selected caption vs pool size N (in-sample beside it), from one pool per
    image (the first N samples; no resampling). Held-out scores for every N need `describe --eval-candidates
    all`."""
    from eval.studies.common import parse_pairs
    from eval.studies.tables import n_sweep_curve, n_sweep_table
    from recon_score.runtime import utc_now

    started = utc_now()
    labels = {k: Path(v) for k, v in parse_pairs(runs, "--run").items()}
    n_values = tuple(int(x) for x in ns.split(","))
    held, insample, counts, lacking = n_sweep_table(labels, n_values)
    curve = n_sweep_curve(held, insample)
    for label, miss in lacking.items():
        if any(miss):
            click.echo(
                f"{label}: {sum(miss)} picks have no held-out score (NaN rows); rerun `reconscore describe` "
                "with --eval-candidates all",
                err=True,
            )
    return _finish(
        out,
        {
            "table": (
                held,
                "Table 8 layout: mean held-out ReconScore of the selected caption per pool size N",
            ),
            "in_sample": (insample, "In-sample: the selection score of the same picks (optimistic)"),
        },
        "n-sweep",
        {"runs": {k: str(v) for k, v in labels.items()}, "ns": list(n_values)},
        started,
        images_per_n=counts,
        picks_without_held_out=lacking,
        curve=curve,
    )


@command.command("selection")
@click.option(
    "--run",
    "run_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="A `reconscore describe` run (its candidate pool).",
)
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
@click.option(
    "--human",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="JSONL {image_id, index}: the candidate humans chose; adds the preference rate (Table 7).",
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
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def selection(
    run_dir,
    selectors,
    metrics,
    human,
    images_root,
    selection_seed,
    eval_seed,
    preset,
    encoder,
    long_text,
    device,
    out,
) -> int:
    """Table 7: what each selection metric picks from the same pool, and how often humans agree."""
    from eval.metrics import parse_metric_names
    from eval.studies.tables import selection_table
    from recon_score.runtime import utc_now

    started = utc_now()
    sel, names = parse_metric_names(selectors), parse_metric_names(metrics)
    options = _options(preset, encoder, long_text, device)
    if eval_seed is not None:
        options["recon_score"]["overrides"] = {"seed": eval_seed}
    ratings, preference, info = selection_table(
        run_dir,
        sel,
        names,
        options=options,
        human=human,
        images_root=images_root,
        selection_seed=selection_seed,
    )
    tables = {"ratings": (ratings, "Selection metric -> rating of its picks (x100 except ReconScore)")}
    if preference is not None:
        tables = {
            "table": (preference, "Table 7 layout: human preference rate of each selection metric"),
            **tables,
        }
    config = {
        "run": str(run_dir),
        "selectors": sel,
        "metrics": names,
        "human": str(human) if human else None,
        "preset": preset,
        "encoder": encoder,
        "selection_seed": selection_seed,
        "eval_seed": eval_seed,
    }
    return _finish(out, tables, "selection", config, started, note=_note(preset), details=info)


@command.command("encoders")
@click.option(
    "--run",
    "runs",
    multiple=True,
    required=True,
    help="SYSTEM=SCORE_RUN_DIR: a `reconscore score` run per captioning system (repeatable).",
)
@click.option(
    "--encoders",
    required=True,
    help="Comma-separated encoder specs, e.g. dreamsim:ensemble,"
    "open_clip:ViT-L-14/openai,hf:facebook/dinov2-base,lpips:alex.",
)
@opt.device()
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def encoders(runs, encoders, device, out) -> int:
    """Fig. 4: the same reconstructions under several encoders; rank consistency of systems (Kendall tau-b).

    A row whose original or reconstruction cannot be read is skipped and listed in run.json (exit status 3).
    """
    from eval.studies.common import parse_pairs
    from eval.studies.tables import encoders_table
    from recon_score.runtime import utc_now

    started = utc_now()
    systems = {k: Path(v) for k, v in parse_pairs(runs, "--run").items()}
    specs = [e.strip() for e in encoders.split(",") if e.strip()]
    table, tau, skipped = encoders_table(systems, specs, device=device)
    if skipped:
        click.echo(
            f"warning: skipped {len(skipped)} row(s) whose image could not be read, e.g. {skipped[0]['error']}; "
            "all listed in run.json skipped_images",
            err=True,
        )
    rc = _finish(
        out,
        {
            "table": (table, "Fig. 4 data: mean ReconScore per system (rows) and encoder (columns)"),
            "rank_consistency": (tau, "Kendall tau-b between the system rankings of two encoders"),
        },
        "encoders",
        {"runs": {k: str(v) for k, v in systems.items()}, "encoders": specs},
        started,
        skipped_images={"count": len(skipped), "items": skipped},
    )
    return EXIT_PARTIAL if skipped else rc


@command.command("t2i")
@click.option("--captions", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@opt.images_root("the captions file's folder")
@click.option("--presets", default="paper,text2earth,flux1-dev,flux2-dev,flux2-klein", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None)
@opt.device()
@opt.trust_remote_code("the T2I models (text2earth's custom pipeline)")
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def t2i(captions, images_root, presets, batch_size, limit, device, trust_remote_code, out) -> int:
    """Table 9: several T2I presets on the same captions: token limit, render seconds per image, ReconScore."""
    from eval.studies.robustness import read_pairs, t2i_table
    from recon_score.runtime import utc_now

    started = utc_now()
    pairs = read_pairs(captions, images_root, limit)
    names = [p.strip() for p in presets.split(",") if p.strip()]
    df, configs = t2i_table(
        names, pairs, device=device, batch_size=batch_size, trust_remote_code=trust_remote_code
    )
    notes = {_note(n) for n in names} - {None}
    return _finish(
        out,
        {"table": (df, "Table 9 layout: T2I model -> max tokens, seconds per image, ReconScore")},
        "t2i",
        {"captions": str(captions), "presets": names, "rows": len(pairs), "batch_size": batch_size},
        started,
        note=next(iter(notes), None),
        preset_configs=configs,
    )


@command.command("paraphrase")
@click.option(
    "--paraphrased",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="generated.jsonl of `reconscore generate paraphrase`.",
)
@click.option(
    "--perturbed",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="generated.jsonl of `reconscore generate perturb`.",
)
@click.option(
    "--references",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="GT captions table (image, caption); default: the generated rows' source captions.",
)
@opt.images_root("none", extra=" Needed by the image metrics (clipscore, recon_score).")
@click.option(
    "--metrics", default="bleu1,bleu2,bleu3,bleu4,meteor,rouge,cider,clipscore,recon_score", show_default=True
)
@metric_opts
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def paraphrase(
    paraphrased, perturbed, references, images_root, metrics, preset, encoder, long_text, device, out
) -> int:
    """Table 4: paraphrased vs one-fact-perturbed captions; a faithful metric prefers the paraphrase (Δ > 0)."""
    from eval.metrics import parse_metric_names
    from eval.studies.robustness import paraphrase_table, read_generated
    from recon_score.runtime import utc_now

    started, names = utc_now(), parse_metric_names(metrics)
    df = paraphrase_table(
        read_generated(paraphrased),
        read_generated(perturbed),
        names,
        options=_options(preset, encoder, long_text, device),
        images_root=images_root,
        references=references,
    )
    return _finish(
        out,
        {"table": (df, "Table 4 layout: paraphrased vs perturbed GT (x100 except ReconScore)")},
        "paraphrase",
        {
            "paraphrased": str(paraphrased),
            "perturbed": str(perturbed),
            "metrics": names,
            "preset": preset,
            "encoder": encoder,
        },
        started,
        note=_note(preset),
    )


@command.command("length")
@click.option(
    "--generated",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="generated.jsonl of `reconscore generate length`.",
)
@click.option(
    "--references",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="GT captions table (image, caption); default: the references kept in the generated rows.",
)
@opt.images_root("none", extra=" Needed by the image metrics (clipscore, longclipscore, recon_score).")
@click.option(
    "--metrics",
    default="bleu1,bleu2,bleu3,bleu4,meteor,rouge,cider,clipscore,longclipscore,recon_score",
    show_default=True,
)
@metric_opts
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def length(generated, references, images_root, metrics, preset, encoder, long_text, device, out) -> int:
    """Table 5: short / medium / long captions from the same triplets: mean per length and σ."""
    from eval.metrics import parse_metric_names
    from eval.studies.robustness import length_table, read_generated
    from recon_score.presets import get_preset
    from recon_score.runtime import utc_now

    started, names = utc_now(), parse_metric_names(metrics)
    limits = {"clipscore": 77, "refclipscore": 77, "recon_score": get_preset(preset).max_sequence_length}
    df = length_table(
        read_generated(generated),
        names,
        options=_options(preset, encoder, long_text, device),
        images_root=images_root,
        references=references,
        token_limits=limits,
    )
    return _finish(
        out,
        {"table": (df, "Table 5 layout: mean per caption length and σ (x100 except ReconScore)")},
        "length",
        {"generated": str(generated), "metrics": names, "preset": preset, "encoder": encoder},
        started,
        note=_note(preset),
    )


@command.command("paradigms")
@click.option(
    "--ranking",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="Ranking file (.jsonl/.csv, UCM-preference format) whose candidates name their `model`.",
)
@click.option(
    "--paradigms",
    "paradigms_spec",
    required=True,
    help="MODEL=PARADIGM,... or a .json object / .csv (model, paradigm), e.g. GeoChat=Fine-Tuned,"
    "Qwen3-VL-8B=Zero-Shot.",
)
@click.option(
    "--scores",
    "score_run",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A `reconscore score` run over the candidates (matched by image + caption); else they are scored now.",
)
@opt.images_root("none", extra=" Needed to score the ranking's candidates now (without --scores).")
@click.option("--preset", default="paper", show_default=True, help="ReconScore preset (scoring now).")
@opt.device()
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def paradigms(ranking, paradigms_spec, score_run, images_root, preset, device, out) -> int:
    """Table 6: zero-shot vs fine-tuned models: human wins, preference share and mean ReconScore per paradigm."""
    from eval.studies.paradigms import paradigms_table, parse_paradigms, read_score_run, score_candidates
    from preference_data.ranking import load_ranking
    from recon_score.runtime import utc_now

    started = utc_now()
    table = load_ranking(ranking)
    mapping = parse_paradigms(paradigms_spec)
    if score_run is not None:
        recon = read_score_run(score_run)
    elif images_root is not None:
        recon = score_candidates(table, images_root, preset=preset, device=device)
    else:
        raise click.UsageError("give --scores RUN_DIR or --images ROOT (to score the candidates)")
    df, info = paradigms_table(table, mapping, recon)
    out.mkdir(parents=True, exist_ok=True)
    return _finish(
        out,
        {"table": (df, "Table 6 layout: human preference of each model paradigm")},
        "paradigms",
        {
            "ranking": str(ranking),
            "paradigms": mapping,
            "scores": str(score_run) if score_run else None,
            "preset": None if score_run else preset,
        },
        started,
        note=None if score_run else _note(preset),
        details=info,
    )


def _numbers(kind: type) -> Callable:
    def parse(ctx, param, value: str) -> tuple:
        try:
            return tuple(kind(x) for x in value.split(",") if x.strip())
        except ValueError:
            raise click.BadParameter(f"expected comma-separated {kind.__name__}s, got {value!r}") from None

    return parse


@command.command("compodiff-sweep")
@click.option("--benchmark", default="patterncom", show_default=True, help="Benchmark loader.")
@click.option(
    "--root", type=click.Path(file_okay=False, path_type=Path), required=True, help="Dataset folder."
)
@click.option(
    "--encoder", required=True, help="CLIP ViT-L/14 spec, e.g. open_clip:ViT-L-14-quickgelu/openai."
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="The CompoDiff release folder (e.g. navervision/CompoDiff-Aesthetic).",
)
@click.option("--weights", default="0.1,0.2,0.3,0.4,0.5", show_default=True, callback=_numbers(float))
@click.option("--steps", default="5,10,20", show_default=True, callback=_numbers(int))
@click.option("--set", "sets", multiple=True, help="Another CompoDiff setting KEY=VALUE (repeatable).")
@click.option("--option", "options", multiple=True, help="Loader option KEY=VALUE (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N queries.")
@opt.device()
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Encoder batch size.")
@opt.cache("feature")
@click.option("--out", type=opt.RUN_FOLDER, required=True)
def compodiff_sweep(
    benchmark, root, encoder, checkpoint, weights, steps, sets, options, limit, device, batch_size, cache_dir,
    no_cache, out,
) -> int:  # fmt: skip
    """The RS-CIR benchmark paper's Fig. 12: CompoDiff's mAP per source weight (columns) and steps (rows).

    Each point is a `reconscore retrieve` run under OUT/points/ (features cached, finished points read back).
    """
    from eval.studies.compodiff_sweep import compodiff_sweep as sweep
    from recon_score.runtime import utc_now
    from retrieval.run import RetrieveConfig

    started = utc_now()
    base = RetrieveConfig(
        benchmark=benchmark, root=root, encoder=encoder, methods=["compodiff"], out=out,
        options=opt.key_values(options, "--option"), overrides={"compodiff": opt.key_values(sets, "--set")},
        checkpoints={"compodiff": checkpoint}, device=device, batch_size=batch_size, cache=not no_cache,
        cache_dir=cache_dir, limit=limit,
    )  # fmt: skip
    table, info = sweep(base, weights, steps, log=lambda m: click.echo(m, err=True))
    config = {**base.as_dict(), "weights": list(weights), "steps": list(steps)}
    title = f"Fig. 12 data: CompoDiff {info['metric']} (%, Avg.) per steps (rows) and source weight (columns)"
    rc = _finish(out, {"table": (table, title)}, "compodiff-sweep", config, started, **info)
    return EXIT_PARTIAL if any(p["exit_code"] for p in info["points"].values()) else rc
