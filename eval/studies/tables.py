"""The ReconScore paper's studies as functions over runs, each returning pandas tables in the paper's layout:
Table 3 (models), Table 7 (selection), Table 8 (N-sweep) and Fig. 4 (encoders); Tables 4, 5 and 9 are in
robustness.py. See docs/studies.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eval.metrics.registry import METRICS
from recon_score import run_outputs as outputs
from recon_score.errors import ReconScoreError
from recon_score.run_engine import load_record
from recon_score.run_outputs import CANDIDATES, CAPTIONS, SCORES, output_file, read_rows
from recon_score.textfiles import read_lines

N_SWEEP = (1, 2, 4, 6, 8, 10)


# --- Table 8 ------------------------------------------------------------------------------------------------


def candidate_pool(describe_run: Path) -> dict[str, list[dict]]:
    """{image_id: candidates in sampling order} of a describe run; the run's held-out evaluation is checked to
    be independent of its selection (run.json's seeds)."""
    from eval.studies.common import refuse_selection_seeds

    run = load_record(describe_run)
    if run.get("command") != "describe":
        raise ReconScoreError(f"{describe_run}: not a `reconscore describe` run (run.json command)")
    eval_seed = (run.get("selection") or {}).get("eval_seed")
    if eval_seed is not None:
        refuse_selection_seeds(run, [int(eval_seed)], str(describe_run))
    pool: dict[str, list[dict]] = {}
    for lineno, c in enumerate(read_rows(describe_run, CANDIDATES), 1):
        if "selection_score" not in c and not c.get("error"):
            raise ReconScoreError(
                f"{output_file(describe_run, CANDIDATES)}:{lineno}: no `selection_score` column"
            )
        pool.setdefault(str(c["image_id"]), []).append(c)
    for cands in pool.values():
        cands.sort(key=lambda c: c["index"])
    return pool


def best_of_first(cands: list[dict], n: int, column: str) -> dict | None:
    """The argmax (ties: first) of `column` among the first n candidates; None if none of them has a score."""
    best = None
    for c in cands[:n]:
        v = c.get(column)
        if c.get("error") or v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if best is None or v > best[column]:
            best = c
    return best


def n_sweep_table(
    runs: dict[str, Path], ns: tuple[int, ...] = N_SWEEP
) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """Rows N, columns = run labels + Total: (held-out table, in-sample table, {label: images per N}, {label:
    picks per N without a held-out score}). An N whose picks lack a held-out `recon_score` is NaN, never the
    optimistic in-sample selection score."""
    held, insample, counts, lacking = {}, {}, {}, {}
    for label, run_dir in runs.items():
        pool = candidate_pool(run_dir)
        pool_size = min(len(c) for c in pool.values())
        if max(ns) > pool_size:
            raise ReconScoreError(
                f"{run_dir}: the pool has {pool_size} candidates per image, N up to {max(ns)} "
                f"needs more (describe with --n {max(ns)})"
            )
        col_h, col_i, cnt, miss = [], [], [], []
        for n in ns:
            picks = [
                p for p in (best_of_first(c, n, "selection_score") for c in pool.values()) if p is not None
            ]
            vals = [p["selection_score"] for p in picks]
            out_vals = [p.get("recon_score") for p in picks]
            absent = sum(v is None for v in out_vals)
            col_i.append(float(np.mean(vals)) if vals else math.nan)
            col_h.append(float(np.mean(out_vals)) if picks and not absent else math.nan)
            cnt.append(len(vals))
            miss.append(absent)
        held[label], insample[label], counts[label], lacking[label] = col_h, col_i, cnt, miss
    index = pd.Index(list(ns), name="Candidates (N)")
    tables = []
    for data in (held, insample):
        df = pd.DataFrame(data, index=index)
        if len(runs) > 1:
            df["Total"] = df.sum(axis=1)
        tables.append(df)
    return tables[0], tables[1], counts, lacking


# --- Table 7 ------------------------------------------------------------------------------------------------


def selection_table(
    describe_run: Path,
    selectors: list[str],
    metrics: list[str],
    *,
    options: dict,
    human: Path | None = None,
    images_root: Path | None = None,
    selection_seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(ratings, preference, info): each selector's picks rated by every metric (paper scale, corpus values where
    pycocoevalcap reports one) and, with a human choice file, Table 7's preference rates. ReconScore is never
    rated on the renders that picked (docs/studies.md, `selection`)."""
    from eval.metrics import CaptionBatch, compute_metrics, get_metric_info
    from eval.studies.common import recon_eval_seeds, refuse_selection_seeds

    run = load_record(describe_run)
    pool = candidate_pool(describe_run)
    caps = {str(c["image_id"]): c for c in read_rows(describe_run, CAPTIONS)}
    root = images_root or (Path(run["images_root"]) if run.get("images_root") else None)
    ids = [i for i in pool if caps.get(i, {}).get("image")]
    flat = [(i, c) for i in ids for c in pool[i] if c.get("caption") and not c.get("error")]
    if not flat:
        raise ReconScoreError(f"{describe_run}: no valid candidate to select from")
    refs = [caps[i].get("references") or [] for i, _ in flat]
    need_images = any(get_metric_info(m).needs_images for m in {*selectors, *metrics})
    if need_images and root is None:
        raise ReconScoreError("image metrics need the images: pass --images ROOT")
    images = [root / caps[i]["image"] for i, _ in flat] if need_images else None
    own = (run.get("selection") or {}).get("metric")
    if own not in selectors or not all(c.get("selection_score") is not None for _, c in flat):
        own = None  # the run's selection value is absent: its metric is computed like any other
    eval_seeds = recon_eval_seeds(options)
    # a run column is reused only when every candidate has a value: `--eval-candidates selected` writes the
    # key with null on the candidates it did not pick, and those picks must be rated too
    have = {m for m in metrics if all(c.get(m) is not None for _, c in flat)}
    if eval_seeds != [(run.get("selection") or {}).get("eval_seed")]:
        have.discard("recon_score")  # the run's held-out render used another seed than the one asked for
    compute = [m for m in dict.fromkeys([*(s for s in selectors if s not in (own, "recon_score")), *metrics])]
    compute = [m for m in compute if m not in have]
    if "recon_score" in compute:
        refuse_selection_seeds(run, eval_seeds, f"study selection on {describe_run}")
    table = pd.DataFrame(index=range(len(flat)))
    batch = CaptionBatch([c["caption"] for _, c in flat], refs, images)
    corpus_level: list[str] = []
    if compute:
        computed, report = compute_metrics(compute, batch, options=options)
        for m in compute:
            table[m] = computed[m].to_numpy()
        corpus_level = [m for m in metrics if "corpus" in report.get(m, {})]
    for m in have:
        table[m] = [c[m] for _, c in flat]
    by = {s: table[s] for s in selectors if s not in (own, "recon_score")}
    if own is not None:
        by[own] = pd.Series([c["selection_score"] for _, c in flat])
    if "recon_score" in selectors and own != "recon_score":
        by["recon_score"] = _recon_selection_column(batch, options, selection_seed, eval_seeds)
    picks = {sel: _picks(flat, by[sel]) for sel in selectors}
    ratings = _rate_picks(flat, refs, picks, metrics, table, corpus_level, options)
    preference, agreement = _preference(flat, picks, _read_human(human)) if human else (None, {})
    info = {"images": len(ids), "candidates": len(flat), "precomputed": sorted(have), "human": agreement}
    info["selected_by_the_run"] = own  # this selector used the run's selection_score
    info["corpus_level"] = corpus_level
    info["recon_score_eval_seeds"] = (
        eval_seeds if "recon_score" in metrics and "recon_score" not in have else None
    )
    if "recon_score" in by and own != "recon_score":
        info["recon_score_selection_seed"] = selection_seed
    return ratings, preference, info


def _preference(flat: list, picks: dict, human_pick: dict[str, int]) -> tuple[pd.DataFrame, dict]:
    """Table 7's layout: one "Preference Rate (%)" row, one column per selector (the share of judged images
    where its pick is the human's choice), and the counts behind each rate."""
    rates, agreement = {}, {}
    for sel, chosen in picks.items():
        judged = [img for img in chosen if img in human_pick]
        hits = sum(flat[chosen[img]][1]["index"] == human_pick[img] for img in judged)
        rates[METRICS[sel].paper_name] = 100.0 * hits / len(judged) if judged else math.nan
        agreement[sel] = {"judged_images": len(judged), "agreements": hits}
    table = pd.DataFrame([rates], index=pd.Index(["Preference Rate (%)"], name="Selection Metric"))
    return table, agreement


def _recon_selection_column(batch, options: dict, seed: int, eval_seeds: list[int]) -> pd.Series:
    """ReconScore of every candidate rendered with the selection seed: what ReconScore picks by when the run
    was selected by another metric (never the evaluation render, which would rate its own maximum)."""
    from eval.metrics import compute_metrics

    if seed in eval_seeds:
        raise ReconScoreError(
            f"--selection-seed {seed} is an evaluation seed of the recon_score column ({eval_seeds}): the "
            "ReconScore picks would be rated on the renders that picked them; choose another selection seed"
        )
    recon = dict(options.get("recon_score") or {})
    recon.update(seeds=1, overrides={**(recon.get("overrides") or {}), "seed": seed})
    computed, _ = compute_metrics(["recon_score"], batch, options={**options, "recon_score": recon})
    return pd.Series(computed["recon_score"].to_numpy())


def _picks(flat: list, values: pd.Series) -> dict[str, int]:
    """{image: row of flat} of the argmax (ties: the first candidate) of `values` per image."""
    picks: dict[str, int] = {}
    for k, (img, _) in enumerate(flat):
        v = values.iloc[k]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if img not in picks or v > values.iloc[picks[img]]:
            picks[img] = k
    return picks


def _mean_of_all(values: list) -> float:
    """The mean over every pick, NaN when one lacks a value: a pick is never dropped from its selector's
    rating (a mean over the picks that happen to have a value would rate another set of images)."""
    floats = [math.nan if v is None else float(v) for v in values]
    return float(np.mean(floats)) if floats else math.nan


def _rate_picks(flat, refs, picks: dict, metrics, table, corpus_level, options) -> pd.DataFrame:
    """Rows = selectors, columns = evaluation metrics over each selector's picks (paper scale)."""
    from eval.metrics import CaptionBatch, build_metric, compute_metrics

    shared = {m: build_metric(m, **options.get(m, {})) for m in corpus_level}  # one METEOR JVM for all rows
    rows = {}
    try:
        for sel, chosen_by_image in picks.items():
            chosen = list(chosen_by_image.values())
            values = {m: _mean_of_all([table[m].iloc[k] for k in chosen]) for m in metrics}
            if corpus_level and chosen:
                batch = CaptionBatch([flat[k][1]["caption"] for k in chosen], [refs[k] for k in chosen])
                _, rep = compute_metrics(corpus_level, batch, metrics=shared)
                values.update({m: rep[m].get("corpus", math.nan) for m in corpus_level})
            rows[METRICS[sel].paper_name] = {
                METRICS[m].paper_name: v * METRICS[m].display_scale for m, v in values.items()
            }
    finally:
        for metric in shared.values():
            metric.close()
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("Selection metric")


def _read_human(path: Path) -> dict[str, int]:
    """Human choice file: JSONL rows {image_id, index} (the chosen candidate's index in the pool)."""
    out = {}
    for lineno, raw in read_lines(path):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            out[str(rec["image_id"])] = int(rec["index"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ReconScoreError(
                f'{path.name}:{lineno}: expected {{"image_id": ..., "index": N}} ({err})'
            ) from None
    return out


# --- Fig. 4 -------------------------------------------------------------------------------------------------


def encoders_table(
    systems: dict[str, Path],
    encoders: list[str],
    *,
    device: str | None = None,
    images_root: dict[str, Path] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """Mean ReconScore of each system's existing reconstructions under each encoder (nothing re-rendered), the
    Kendall tau-b between every two encoders' system rankings, and the rows skipped for an unreadable image
    ([{system, id, path, error}]). Originals are read as the score run read them (its --bands and reader)."""
    from scipy.stats import kendalltau

    from recon_score.errors import ImageLoadError
    from recon_score.images import READERS, load_image
    from recon_score.presets import reader_for
    from recon_score.scorer import ReconScorer

    pairs: dict[str, tuple[list, list]] = {}
    skipped: list[dict] = []
    for name, run_dir in systems.items():
        run = load_record(run_dir)
        root = (images_root or {}).get(name) or Path(run.get("images_root") or "")
        reader = (run.get("preset") or {}).get("image_reader")  # as the score run read its originals
        reader = reader if reader in READERS else reader_for(None)
        orig, recon = [], []
        for row in read_rows(run_dir, SCORES):
            if row.get("reconstruction") and not row.get("error"):
                path = root / row["image"]
                try:
                    o = load_image(path, bands=run.get("bands"), reader=reader)
                    path = run_dir / row["reconstruction"]
                    r = load_image(path, reader=reader)
                except ImageLoadError as err:
                    skipped.append(
                        {"system": name, "id": row.get("id"), "path": str(path), "error": str(err)}
                    )
                    continue
                orig.append(o)
                recon.append(r)
        if not orig:
            raise ReconScoreError(f"{run_dir}: no scored row with a reconstruction")
        pairs[name] = (orig, recon)
    scores = {}
    for spec in encoders:
        # only the encoder runs here (compare): the preset's T2I model need not be on this machine
        scorer = ReconScorer.from_preset(
            "paper", overrides={"encoder": spec}, device=device, check_models=False
        )
        col = {}
        for name, (orig, recon) in pairs.items():
            results = scorer.compare(orig, recon)
            bad = next((r.error for r in results if not r.ok), None)
            if bad is not None:
                raise ReconScoreError(f"encoder {spec} on system {name}: {bad}")
            col[name] = float(np.mean([r.recon_score for r in results]))
        scorer.unload()
        scores[spec] = col
    table = pd.DataFrame(scores).rename_axis("system")
    tau = pd.DataFrame(math.nan, index=pd.Index(encoders, name="encoder"), columns=encoders)
    if len(systems) > 1:  # one system has no ranking to compare: NaN
        for a in encoders:
            for b in encoders:
                tau.loc[a, b] = float(
                    kendalltau(table[a].to_numpy(), table[b].to_numpy(), variant="b").statistic
                )
    return table, tau, skipped


# --- Table 3 ------------------------------------------------------------------------------------------------


def parse_dataset_spec(label: str, spec: str) -> tuple[str, str, str]:
    """`NAME:ROOT[:SPLIT]` -> (name, root, split); split defaults to test."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ReconScoreError(f"--dataset {label}={spec}: expected NAME:ROOT[:SPLIT]")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "test"


def split_model_key(key: str, datasets: list[str]) -> tuple[str, str]:
    """`MODEL@LABEL` -> (model, dataset label)."""
    model, sep, label = key.partition("@")
    if not sep or label not in datasets:
        raise ReconScoreError(f"--captions {key}=...: expected MODEL@LABEL with LABEL one of {datasets}")
    return model, label


def models_tables(
    long: pd.DataFrame,
    models: list[str],
    datasets: list[str],
    metric: str,
    *,
    paradigm_of: dict[str, str] | None = None,
    pub: dict[str, str] | None = None,
    cis: dict[tuple[str, str], dict] | None = None,
) -> dict[str, tuple[pd.DataFrame, str]]:
    """Table 3 from long rows (model, dataset, metric, value): {file name: (table, title)}: the paper's layout
    with models grouped under one label row per paradigm (ungrouped last), every metric, and the K-seed CIs."""
    from recon_score.seeds import ci_heading, ci_text

    main = long[long.metric == metric].pivot(index="model", columns="dataset", values="value")
    main = main.reindex(index=models, columns=datasets)
    paradigm_of, pub = paradigm_of or {}, pub or {}
    unknown = sorted(set(paradigm_of) - set(models)) + sorted(set(pub) - set(models))
    if unknown:
        raise ReconScoreError(f"--paradigms/--pub name models without captions: {', '.join(unknown)}")
    groups = list(dict.fromkeys(paradigm_of[m] for m in models if m in paradigm_of))
    rows: list[tuple[str, dict]] = []
    for group in [*groups, None]:
        members = [m for m in models if paradigm_of.get(m) == group]
        if group is not None and members:
            rows.append((group, {"Pub.": "", **dict.fromkeys(datasets, "")}))
        rows += [(m, {"Pub.": pub.get(m, "-"), **main.loc[m].to_dict()}) for m in members]
    table = pd.DataFrame([r for _, r in rows], index=pd.Index([n for n, _ in rows], name="Method"))
    wide = long.assign(col=lambda d: d.dataset + " " + d.metric.map(lambda m: METRICS[m].paper_name)).pivot(
        index="model", columns="col", values="value"
    )
    name = METRICS[metric].paper_name
    out = {
        outputs.STUDY_TABLE: (table, f"Table 3 layout: {name} per model and dataset"),
        outputs.ALL_METRICS: (wide, "All metrics (x100 except ReconScore)"),
    }
    if cis:
        ci_df = pd.DataFrame(
            {lab: {m: ci_text(cis[(m, lab)]) if (m, lab) in cis else "–" for m in models} for lab in datasets}
        ).reindex(index=models)
        title = f"ReconScore mean [{ci_heading(next(iter(cis.values())))}, e.g.] per model and dataset"
        out[outputs.RECON_SCORE_CI] = (ci_df.rename_axis("model"), title)
    return out


def evaluate_models(
    datasets: dict[str, str], captions: dict[str, str], metrics: list[str], *, options: dict
) -> tuple[pd.DataFrame, list[str], dict, dict]:
    """Every `MODEL@LABEL=captions` file evaluated on its dataset (`LABEL=NAME:ROOT[:SPLIT]`): (long rows
    model/dataset/metric/value, models in order, per-file join counts, {(model, label): ReconScore CI})."""
    from eval.datasets import load_dataset
    from eval.evaluate import evaluate_join, join_captions, read_model_captions

    loaded = {label: load_dataset(*parse_dataset_spec(label, spec)) for label, spec in datasets.items()}
    long_rows, joins, cis = [], {}, {}
    for key, path in captions.items():
        model, label = split_model_key(key, list(loaded))
        join = join_captions(loaded[label], read_model_captions(Path(path)))
        _, summary, report = evaluate_join(join, metrics, options=options)
        if report.get("recon_score", {}).get("ci") is not None:
            cis[(model, label)] = report["recon_score"]["ci"]
        joins[key] = {
            "unmatched": len(join.unmatched),
            "uncaptioned": sum(r["error"] is not None for r in join.rows),
        }
        long_rows += [{"model": model, "dataset": label, "metric": m, "value": v} for m, v in summary.items()]
    models = list(dict.fromkeys(k.split("@")[0] for k in captions))
    return pd.DataFrame(long_rows), models, joins, cis


def n_sweep_curve(held: pd.DataFrame, insample: pd.DataFrame) -> dict:
    """The N-sweep as a report curve: one held-out and one in-sample series per run (Total left out)."""
    return {
        "x": [int(n) for n in held.index],
        "xlabel": "candidates N",
        "ylabel": "selected score",
        "title": "N-sweep",
        "series": {
            **{f"{c} held-out": [float(v) for v in held[c]] for c in held.columns if c != "Total"},
            **{f"{c} in-sample": [float(v) for v in insample[c]] for c in insample.columns if c != "Total"},
        },
    }
