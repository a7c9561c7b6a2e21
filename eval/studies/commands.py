"""What each `reconscore study` command computes from its parsed options: the tables it writes (name -> (frame,
title)), the configuration run.json records and its other run.json fields. eval.cli.study only parses and
prints; `write_study` writes both."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eval.studies.common import parse_pairs, table_files
from recon_score import run_outputs as outputs
from recon_score.run_engine import RunSpec
from recon_score.runtime import utc_now


@dataclass
class Study:
    name: str
    tables: dict  # name -> (DataFrame, title)
    config: dict
    started: str
    note: str | None = None
    extra: dict = field(default_factory=dict)  # other run.json fields
    partial: bool = False  # exit status 3: some item was skipped


def write_study(run, study: Study) -> dict:
    """Publish the study's tables and record in its run folder (a RunFolder of kind `study`); returns the
    markdown of each table by name, for the CLI to print."""
    files: dict[str, bytes] = {}
    for name, (df, title) in study.tables.items():
        files |= table_files(name, df, title=title)
    info = {"study": study.name, "note": study.note, "config": study.config, **study.extra}
    cfg, points = study.config, study.extra.get("points") or {}
    upstream = [*(cfg.get("runs") or {}).values(), *([cfg["run"]] if cfg.get("run") else [])]
    upstream += [p["run"] for p in points.values()]  # compodiff-sweep: a retrieve run per point
    record = {**info, "started": study.started}
    run.run(RunSpec({}, outputs=lambda _: files, record=lambda _: record, upstream=upstream))
    return {name: files[outputs.table_files(name)[1]].decode("utf-8") for name in study.tables}


def metric_options(preset: str, encoder: str | None, long_text: str, device: str | None) -> dict:
    from eval.metrics import metric_options as options

    return options(encoder=encoder, long_text=long_text, preset=preset, device=device)


def smoke_note(preset: str) -> str | None:
    from recon_score.presets import PRESETS, SMOKE_NOTE

    p = PRESETS.get(preset)
    return SMOKE_NOTE if p is not None and p.meaningless else None


def models(datasets, captions, metrics, paradigms_spec, pubs, metric_opts: dict, recon_seeds: int) -> Study:
    """Table 3: several captioning models on several datasets."""
    from eval.metrics import parse_metric_names
    from eval.studies.paradigms import parse_paradigms
    from eval.studies.tables import evaluate_models, models_tables

    started, names = utc_now(), parse_metric_names(metrics)
    ds_specs, runs = parse_pairs(datasets, "--dataset"), parse_pairs(captions, "--captions")
    options = metric_options(**metric_opts)
    options["recon_score"]["seeds"] = recon_seeds
    long, model_names, joins, cis = evaluate_models(ds_specs, runs, names, options=options)
    paradigm_of = parse_paradigms(paradigms_spec) if paradigms_spec else None
    pub = parse_pairs(pubs, "--pub")
    tables = models_tables(
        long, model_names, list(ds_specs), names[0], paradigm_of=paradigm_of, pub=pub, cis=cis
    )
    config = {"datasets": ds_specs, "captions": runs, "metrics": names, "preset": metric_opts["preset"]}
    config |= {"encoder": metric_opts["encoder"], "recon_seeds": recon_seeds, "paradigms": paradigm_of}
    ci = {f"{m}@{lab}": v for (m, lab), v in cis.items()}
    extra = {"joins": joins, "recon_score_ci": ci}
    return Study("models", tables, {**config, "pub": pub}, started, smoke_note(metric_opts["preset"]), extra)


def n_sweep(runs, ns: str) -> tuple[Study, dict]:
    """Table 8; also returns, per run label, which picks lack a held-out score."""
    from eval.studies.tables import n_sweep_curve, n_sweep_table

    started = utc_now()
    labels = {k: Path(v) for k, v in parse_pairs(runs, "--run").items()}
    n_values = tuple(int(x) for x in ns.split(","))
    held, insample, counts, lacking = n_sweep_table(labels, n_values)
    tables = {
        outputs.STUDY_TABLE: (
            held,
            "Table 8 layout: mean held-out ReconScore of the selected caption per pool size N",
        ),
        outputs.IN_SAMPLE: (insample, "In-sample: the selection score of the same picks (optimistic)"),
    }
    config = {"runs": {k: str(v) for k, v in labels.items()}, "ns": list(n_values)}
    extra = {
        "images_per_n": counts,
        "picks_without_held_out": lacking,
        "curve": n_sweep_curve(held, insample),
    }
    return Study("n-sweep", tables, config, started, extra=extra), lacking


def selection(
    run_dir, selectors, metrics, human, images_root, selection_seed, eval_seed, metric_opts
) -> Study:
    """Table 7: what each selection metric picks from the same pool, and how often humans agree."""
    from eval.metrics import parse_metric_names
    from eval.studies.tables import selection_table

    started = utc_now()
    sel, names = parse_metric_names(selectors), parse_metric_names(metrics)
    options = metric_options(**metric_opts)
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
    tables = {outputs.RATINGS: (ratings, "Selection metric -> rating of its picks (x100 except ReconScore)")}
    if preference is not None:
        tables = {
            outputs.STUDY_TABLE: (
                preference,
                "Table 7 layout: human preference rate of each selection metric",
            ),
            **tables,
        }
    config = {"run": str(run_dir), "selectors": sel, "metrics": names, "human": str(human) if human else None}
    config |= {"preset": metric_opts["preset"], "encoder": metric_opts["encoder"]}
    config |= {"selection_seed": selection_seed, "eval_seed": eval_seed}
    return Study("selection", tables, config, started, smoke_note(metric_opts["preset"]), {"details": info})


def encoders(runs, encoder_specs: str, device) -> tuple[Study, list]:
    """Fig. 4; also returns the rows skipped because an image could not be read."""
    from eval.studies.tables import encoders_table

    started = utc_now()
    systems = {k: Path(v) for k, v in parse_pairs(runs, "--run").items()}
    specs = [e.strip() for e in encoder_specs.split(",") if e.strip()]
    table, tau, skipped = encoders_table(systems, specs, device=device)
    tables = {
        outputs.STUDY_TABLE: (table, "Fig. 4 data: mean ReconScore per system (rows) and encoder (columns)"),
        outputs.RANK_CONSISTENCY: (tau, "Kendall tau-b between the system rankings of two encoders"),
    }
    config = {"runs": {k: str(v) for k, v in systems.items()}, "encoders": specs}
    extra = {"skipped_images": {"count": len(skipped), "items": skipped}}
    return Study("encoders", tables, config, started, extra=extra, partial=bool(skipped)), skipped


def t2i(captions, images_root, presets, batch_size, limit, device, trust_remote_code) -> Study:
    """Table 9: several T2I presets on the same captions."""
    from eval.studies.robustness import read_pairs, t2i_table

    started = utc_now()
    pairs = read_pairs(captions, images_root, limit)
    names = [p.strip() for p in presets.split(",") if p.strip()]
    df, configs = t2i_table(
        names, pairs, device=device, batch_size=batch_size, trust_remote_code=trust_remote_code
    )
    notes = {smoke_note(n) for n in names} - {None}
    tables = {
        outputs.STUDY_TABLE: (df, "Table 9 layout: T2I model -> max tokens, seconds per image, ReconScore")
    }
    config = {"captions": str(captions), "presets": names, "rows": len(pairs), "batch_size": batch_size}
    return Study("t2i", tables, config, started, next(iter(notes), None), {"preset_configs": configs})


def paraphrase(paraphrased, perturbed, references, images_root, metrics, metric_opts) -> Study:
    """Table 4: paraphrased vs one-fact-perturbed captions."""
    from eval.metrics import parse_metric_names
    from eval.studies.robustness import paraphrase_table
    from recon_score.run_outputs import GENERATED, read_rows

    started, names = utc_now(), parse_metric_names(metrics)
    df = paraphrase_table(
        read_rows(paraphrased, GENERATED),
        read_rows(perturbed, GENERATED),
        names,
        options=metric_options(**metric_opts),
        images_root=images_root,
        references=references,
    )
    tables = {
        outputs.STUDY_TABLE: (df, "Table 4 layout: paraphrased vs perturbed GT (x100 except ReconScore)")
    }
    config = {"paraphrased": str(paraphrased), "perturbed": str(perturbed), "metrics": names}
    config |= {"preset": metric_opts["preset"], "encoder": metric_opts["encoder"]}
    return Study("paraphrase", tables, config, started, smoke_note(metric_opts["preset"]))


def length(generated, references, images_root, metrics, metric_opts) -> Study:
    """Table 5: short / medium / long captions from the same triplets."""
    from eval.metrics import parse_metric_names
    from eval.studies.robustness import length_table
    from recon_score.presets import get_preset
    from recon_score.run_outputs import GENERATED, read_rows

    started, names, preset = utc_now(), parse_metric_names(metrics), metric_opts["preset"]
    limits = {"clipscore": 77, "refclipscore": 77, "recon_score": get_preset(preset).max_sequence_length}
    df = length_table(
        read_rows(generated, GENERATED),
        names,
        options=metric_options(**metric_opts),
        images_root=images_root,
        references=references,
        token_limits=limits,
    )
    tables = {
        outputs.STUDY_TABLE: (df, "Table 5 layout: mean per caption length and σ (x100 except ReconScore)")
    }
    config = {
        "generated": str(generated),
        "metrics": names,
        "preset": preset,
        "encoder": metric_opts["encoder"],
    }
    return Study("length", tables, config, started, smoke_note(preset))


def paradigms(ranking, paradigms_spec, score_run, images_root, preset, device) -> Study:
    """Table 6: zero-shot vs fine-tuned models."""
    from eval.studies.paradigms import paradigms_table, parse_paradigms, read_score_run, score_candidates
    from preference_data.ranking import load_ranking

    started = utc_now()
    table = load_ranking(ranking)
    mapping = parse_paradigms(paradigms_spec)
    if score_run is not None:
        recon = read_score_run(score_run)
    else:
        recon = score_candidates(table, images_root, preset=preset, device=device)
    df, info = paradigms_table(table, mapping, recon)
    tables = {outputs.STUDY_TABLE: (df, "Table 6 layout: human preference of each model paradigm")}
    config = {"ranking": str(ranking), "paradigms": mapping, "scores": str(score_run) if score_run else None}
    config["preset"] = None if score_run else preset
    note = None if score_run else smoke_note(preset)
    return Study("paradigms", tables, config, started, note, {"details": info})


def compodiff_sweep(base, weights, steps, log) -> Study:
    """The RS-CIR benchmark paper's Fig. 12 (eval.studies.compodiff_sweep)."""
    from eval.studies.compodiff_sweep import compodiff_sweep as sweep

    started = utc_now()
    table, info = sweep(base, weights, steps, log=log)
    config = {**base.as_dict(), "weights": list(weights), "steps": list(steps)}
    title = f"Fig. 12 data: CompoDiff {info['metric']} (%, Avg.) per steps (rows) and source weight (columns)"
    partial = any(p["exit_code"] for p in info["points"].values())
    return Study(
        "compodiff-sweep", {outputs.STUDY_TABLE: (table, title)}, config, started, extra=info, partial=partial
    )


def explain(runs) -> Study:
    """Which phrase kinds most often hurt, over `score --explain` runs (eval.studies.explain)."""
    from eval.studies.explain import explained_phrases, kinds_table, worst_table

    started = utc_now()
    systems = {k: Path(v) for k, v in parse_pairs(runs, "--run").items()}
    found = explained_phrases(systems)
    phrases, helped = found.phrases, worst_table(found.phrases)
    tables = {
        outputs.PHRASE_KINDS: (kinds_table(phrases), "Phrase kinds: leaving a phrase out and re-rendering (mean delta; hurt = "
                  "negative and significant over the run's seeds, Holm-corrected over each caption's phrases)"),
        outputs.WORST_PHRASES: (helped, "The phrases whose removal helped the reconstruction most (negative delta only)"),
    }  # fmt: skip
    notes = []
    if phrases.empty:
        notes.append(
            f"nothing was attributed: {found.rows} explained row(s), none with a phrase delta (captions of one "
            "phrase have nothing to leave it out against; try recon_score/sample/explain_captions.jsonl)"
        )
    elif helped.empty:
        notes.append(f"no phrase's removal helped: all {len(phrases)} attributed phrases have delta >= 0")
    config = {"runs": {k: str(v) for k, v in systems.items()}, "phrases": len(phrases), "rows": found.rows}
    extra = {"problems": found.problems} if found.problems else {}
    note = " ".join(notes) or None
    return Study("explain", tables, config, started, note, extra, partial=bool(found.problems))
