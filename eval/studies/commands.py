"""What each `reconscore study` command computes from its parsed options (each function takes them by their
names): the tables it writes (name -> (frame, title)), the configuration run.json records, its other run.json
fields and its warnings. eval.cli.study only parses and prints; `write_study` writes both."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eval.studies.common import table_files
from recon_score import run_outputs as outputs
from recon_score.key_values import key_values
from recon_score.run_engine import RunSpec


@dataclass
class Study:
    tables: dict  # name -> (DataFrame, title)
    config: dict
    note: str | None = None  # the study's own finding (explain: nothing attributed)
    extra: dict = field(default_factory=dict)  # other run.json fields
    partial: bool = False  # exit status 3: some item was skipped
    warnings: list[str] = field(default_factory=list)  # printed on stderr, one line each
    # computed with a synthetic preset: run.json says so (the Run finds model names, not preset names)
    meaningless: bool = False


def write_study(run, name: str, study: Study) -> tuple[dict, dict]:
    """Publish the study's tables and record in its run folder (a RunFolder of kind `study`); returns the
    markdown of each table by name and the record, for the CLI to print."""
    files: dict[str, bytes] = {}
    for table, (df, title) in study.tables.items():
        files |= table_files(table, df, title=title)
    cfg, points = study.config, study.extra.get("points") or {}
    upstream = [*(cfg.get("runs") or {}).values(), *([cfg["run"]] if cfg.get("run") else [])]
    upstream += [p["run"] for p in points.values()]  # compodiff-sweep: a retrieve run per point
    record = {
        "study": name,
        "note": study.note,
        "meaningless": study.meaningless,
        "config": cfg,
        **study.extra,
    }
    info = run.run(RunSpec({}, outputs=lambda _: files, record=lambda _: record, upstream=upstream)).info
    return {table: files[outputs.table_files(table)[1]].decode("utf-8") for table in study.tables}, info


def _meaningless(preset: str) -> bool:
    from recon_score.presets import PRESETS

    return PRESETS.get(preset) is not None and PRESETS[preset].meaningless


def _labelled_runs(runs: tuple[str, ...]) -> dict[str, Path]:
    """Repeated --run LABEL=RUN_DIR -> {label: folder}."""
    return {k: Path(v) for k, v in key_values(runs, "--run").items()}


def models(*, datasets, captions, metrics, paradigms_spec, pubs, recon_seeds, **metric_opts) -> Study:
    """Table 3: several captioning models on several datasets."""
    from eval.metrics import metric_options, parse_metric_names
    from eval.studies.paradigms import parse_paradigms
    from eval.studies.tables import evaluate_models, models_tables

    names = parse_metric_names(metrics)
    ds_specs, runs = key_values(datasets, "--dataset"), key_values(captions, "--captions")
    options = metric_options(**metric_opts, recon_seeds=recon_seeds)
    long, model_names, joins, cis = evaluate_models(ds_specs, runs, names, options=options)
    paradigm_of = parse_paradigms(paradigms_spec) if paradigms_spec else None
    pub = key_values(pubs, "--pub")
    tables = models_tables(
        long, model_names, list(ds_specs), names[0], paradigm_of=paradigm_of, pub=pub, cis=cis
    )
    preset, encoder = metric_opts["preset"], metric_opts["encoder"]
    config = {"datasets": ds_specs, "captions": runs, "metrics": names, "preset": preset, "encoder": encoder}
    config |= {"recon_seeds": recon_seeds, "paradigms": paradigm_of, "pub": pub}
    extra = {"joins": joins, "recon_score_ci": {f"{m}@{lab}": v for (m, lab), v in cis.items()}}
    return Study(tables, config, extra=extra, meaningless=_meaningless(preset))


def n_sweep(*, runs, ns: str) -> Study:
    """Table 8; warns, per run label, about the picks that lack a held-out score."""
    from eval.studies.tables import n_sweep_curve, n_sweep_table

    labels = _labelled_runs(runs)
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
    warnings = [
        f"{label}: {sum(miss)} picks have no held-out score (NaN rows); rerun `reconscore describe` with "
        "--eval-candidates all"
        for label, miss in lacking.items()
        if any(miss)
    ]
    return Study(tables, config, extra=extra, warnings=warnings)


def selection(
    *, run, selectors, metrics, human, images_root, selection_seed, eval_seed, **metric_opts
) -> Study:
    """Table 7: what each selection metric picks from the same pool, and how often humans agree."""
    from eval.metrics import metric_options, parse_metric_names
    from eval.studies.tables import selection_table

    sel, names = parse_metric_names(selectors), parse_metric_names(metrics)
    options = metric_options(**metric_opts)
    if eval_seed is not None:
        options["recon_score"]["overrides"] = {"seed": eval_seed}
    ratings, preference, info = selection_table(
        run,
        sel,
        names,
        options=options,
        human=human,
        images_root=images_root,
        selection_seed=selection_seed,
    )
    tables = {outputs.RATINGS: (ratings, "Selection metric -> rating of its picks (x100 except ReconScore)")}
    if preference is not None:
        title = "Table 7 layout: human preference rate of each selection metric"
        tables = {outputs.STUDY_TABLE: (preference, title), **tables}
    preset, encoder = metric_opts["preset"], metric_opts["encoder"]
    config = {"run": str(run), "selectors": sel, "metrics": names, "human": str(human) if human else None}
    config |= {"preset": preset, "encoder": encoder, "selection_seed": selection_seed, "eval_seed": eval_seed}
    return Study(tables, config, extra={"details": info}, meaningless=_meaningless(preset))


def encoders(*, runs, encoders: str, device) -> Study:
    """Fig. 4; a row whose image cannot be read is skipped, listed in run.json and warned about."""
    from eval.studies.tables import encoders_table

    systems = _labelled_runs(runs)
    specs = [e.strip() for e in encoders.split(",") if e.strip()]
    table, tau, skipped = encoders_table(systems, specs, device=device)
    tables = {
        outputs.STUDY_TABLE: (table, "Fig. 4 data: mean ReconScore per system (rows) and encoder (columns)"),
        outputs.RANK_CONSISTENCY: (tau, "Kendall tau-b between the system rankings of two encoders"),
    }
    config = {"runs": {k: str(v) for k, v in systems.items()}, "encoders": specs}
    extra = {"skipped_images": {"count": len(skipped), "items": skipped}}
    warnings = [
        f"warning: skipped {len(skipped)} row(s) whose image could not be read, e.g. {skipped[0]['error']}; "
        "all listed in run.json skipped_images"
    ] if skipped else []  # fmt: skip
    return Study(tables, config, extra=extra, partial=bool(skipped), warnings=warnings)


def t2i(*, captions, images_root, presets, batch_size, limit, device, trust_remote_code) -> Study:
    """Table 9: several T2I presets on the same captions."""
    from eval.studies.robustness import read_pairs, t2i_table

    pairs = read_pairs(captions, images_root, limit)
    names = [p.strip() for p in presets.split(",") if p.strip()]
    df, configs = t2i_table(
        names, pairs, device=device, batch_size=batch_size, trust_remote_code=trust_remote_code
    )
    tables = {
        outputs.STUDY_TABLE: (df, "Table 9 layout: T2I model -> max tokens, seconds per image, ReconScore")
    }
    config = {"captions": str(captions), "presets": names, "rows": len(pairs), "batch_size": batch_size}
    meaningless = any(map(_meaningless, names))
    return Study(tables, config, extra={"preset_configs": configs}, meaningless=meaningless)


def paraphrase(*, paraphrased, perturbed, references, images_root, metrics, **metric_opts) -> Study:
    """Table 4: paraphrased vs one-fact-perturbed captions."""
    from eval.metrics import metric_options, parse_metric_names
    from eval.studies.robustness import paraphrase_table
    from recon_score.run_outputs import GENERATED, read_rows

    names = parse_metric_names(metrics)
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
    preset, encoder = metric_opts["preset"], metric_opts["encoder"]
    config = {"paraphrased": str(paraphrased), "perturbed": str(perturbed), "metrics": names}
    config |= {"preset": preset, "encoder": encoder}
    return Study(tables, config, meaningless=_meaningless(preset))


def length(*, generated, references, images_root, metrics, **metric_opts) -> Study:
    """Table 5: short / medium / long captions from the same triplets."""
    from eval.metrics import metric_options, parse_metric_names
    from eval.studies.robustness import length_table
    from recon_score.presets import get_preset
    from recon_score.run_outputs import GENERATED, read_rows

    names, preset = parse_metric_names(metrics), metric_opts["preset"]
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
    return Study(tables, config, meaningless=_meaningless(preset))


def paradigms(*, ranking, paradigms_spec, scores, images_root, preset, device) -> Study:
    """Table 6: zero-shot vs fine-tuned models; `scores`: a score run over the candidates, else they are
    scored now."""
    from eval.studies.paradigms import paradigms_table, parse_paradigms, read_score_run, score_candidates
    from preference_data.ranking import load_ranking

    table = load_ranking(ranking)
    mapping = parse_paradigms(paradigms_spec)
    if scores is not None:
        recon = read_score_run(scores)
    else:
        recon = score_candidates(table, images_root, preset=preset, device=device)
    df, info = paradigms_table(table, mapping, recon)
    tables = {outputs.STUDY_TABLE: (df, "Table 6 layout: human preference of each model paradigm")}
    config = {"ranking": str(ranking), "paradigms": mapping, "scores": str(scores) if scores else None}
    config["preset"] = None if scores else preset
    return Study(tables, config, extra={"details": info}, meaningless=not scores and _meaningless(preset))


def compodiff_sweep(*, base, weights, steps, log) -> Study:
    """The RS-CIR benchmark paper's Fig. 12 (eval.studies.compodiff_sweep)."""
    from eval.studies.compodiff_sweep import compodiff_sweep as sweep

    table, info = sweep(base, weights, steps, log=log)
    config = {**base.as_dict(), "weights": list(weights), "steps": list(steps)}
    title = f"Fig. 12 data: CompoDiff {info['metric']} (%, Avg.) per steps (rows) and source weight (columns)"
    partial = any(p["exit_code"] for p in info["points"].values())
    return Study({outputs.STUDY_TABLE: (table, title)}, config, extra=info, partial=partial)


def explain(*, runs) -> Study:
    """Which phrase kinds most often hurt, over `score --explain` runs (eval.studies.explain); a malformed
    record is a warning of one line, the rest still reported."""
    from eval.studies.explain import explained_phrases, kinds_table, worst_table

    systems = _labelled_runs(runs)
    found = explained_phrases(systems)
    phrases, helped = found.phrases, worst_table(found.phrases)
    tables = {
        outputs.PHRASE_KINDS: (kinds_table(phrases), "Phrase kinds: leaving a phrase out and re-rendering (mean delta; hurt = "
                  "negative and significant over the run's seeds, Holm-corrected over each caption's phrases)"),
        outputs.WORST_PHRASES: (helped, "The phrases whose removal helped the reconstruction most (negative delta only)"),
    }  # fmt: skip
    note = None
    if phrases.empty:
        note = (
            f"nothing was attributed: {found.rows} explained row(s), none with a phrase delta (captions of one "
            "phrase have nothing to leave it out against; try recon_score/sample/explain_captions.jsonl)"
        )
    elif helped.empty:
        note = f"no phrase's removal helped: all {len(phrases)} attributed phrases have delta >= 0"
    config = {"runs": {k: str(v) for k, v in systems.items()}, "phrases": len(phrases), "rows": found.rows}
    extra = {"problems": found.problems} if found.problems else {}
    return Study(tables, config, note, extra, partial=bool(found.problems), warnings=list(found.problems))
