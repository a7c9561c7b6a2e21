"""The seed 004 studies as functions over runs: each returns pandas tables in the paper's layout.

- models_table      Table 3: ReconScore (and any metric) of several captioning models on several datasets;
- n_sweep_table     Table 8: RemoteDescriber's selected score for N in {1, 2, 4, 6, 8, 10} from ONE pool of
                    candidates per image (the first N of the same samples: no resampling per N);
- selection_table   Table 7: the candidate each selection metric picks from the same pool, how every metric
                    rates the picks, and the agreement with a human choice file;
- encoders_table    Fig. 4: the same reconstructions scored by several encoders, and the Kendall tau between
                    the system rankings each encoder gives;
- robustness tables Tables 4 and 5 (paraphrase vs perturbation; short/medium/long) - see robustness.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eval.studies.common import PAPER_NAMES, paper_scale
from recon_score.errors import ReconScoreError
from recon_score.textfiles import json_objects, read_json, read_lines

N_SWEEP = (1, 2, 4, 6, 8, 10)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise ReconScoreError(f"{path} not found")
    return [obj for _, obj in json_objects(path)]


def _run_json(run_dir: Path) -> dict:
    p = run_dir / "run.json"
    if not p.exists():
        raise ReconScoreError(f"{run_dir} has no run.json: not a reconscore run folder")
    return read_json(p, expect=dict)


# --- Table 8 ------------------------------------------------------------------------------------------------


def candidate_pool(describe_run: Path) -> dict[str, list[dict]]:
    """{image_id: candidates in sampling order} of a describe run, under today's columns (`selection_score`;
    older runs included: describer.selection.candidate_columns)."""
    from describer.selection import candidate_columns

    run = _run_json(describe_run)
    pool: dict[str, list[dict]] = {}
    for c in _read_jsonl(describe_run / "candidates.jsonl"):
        c = candidate_columns(c, run)
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
    """Rows N, columns = run labels (datasets) + Total: (held-out table, in-sample table, {label: images per N},
    {label: picks per N without a held-out score}).

    In-sample: the pick's own selection score (the maximum over N noisy renders, optimistic). Held-out: the
    pick's `recon_score`, rendered with the run's evaluation seed (describe --eval-candidates all gives it for
    every candidate; otherwise only the final pick has one). An N whose picks lack it is NaN, never in-sample.
    """
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
) -> tuple[pd.DataFrame, dict]:
    """Rows = selection metrics; columns = each evaluation metric over the picks (paper scale): the corpus value
    where pycocoevalcap reports one (BLEU, METEOR; as `reconscore evaluate`), else the mean; plus the preference
    rate (share of images where the pick is the human's choice) when a human file is given.

    The run's own selection metric picks by the pool's `selection_score` (what `describe` picked); every
    evaluation column rates the picks with the metric itself — for ReconScore the held-out render, never the
    in-sample maximum that selected them."""
    from eval.metrics import CaptionBatch, build_metric, compute_metrics, get_metric_info
    from eval.metrics.registry import canonical_metric_name

    run = _run_json(describe_run)
    pool = candidate_pool(describe_run)
    caps = {str(c["image_id"]): c for c in _read_jsonl(describe_run / "captions.jsonl")}
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
    own = canonical_metric_name((run.get("selection") or {}).get("metric") or "", warn=False)
    if own not in selectors or not all(c.get("selection_score") is not None for _, c in flat):
        own = None  # the run's selection value is absent: its metric is computed like any other
    all_names = list(dict.fromkeys([*(s for s in selectors if s != own), *metrics]))
    have = {m for m in all_names if all(m in c for _, c in flat)}  # e.g. recon_score, already in the run
    compute = [m for m in all_names if m not in have]
    table = pd.DataFrame(index=range(len(flat)))
    corpus_level: list[str] = []
    if compute:
        computed, report = compute_metrics(
            compute, CaptionBatch([c["caption"] for _, c in flat], refs, images), options=options
        )
        for m in compute:
            table[m] = computed[m].to_numpy()
        corpus_level = [m for m in metrics if "corpus" in report.get(m, {})]
    shared = {m: build_metric(m, **options.get(m, {})) for m in corpus_level}  # one METEOR JVM for all rows
    for m in have:
        table[m] = [c[m] for _, c in flat]
    by = {s: table[s] for s in selectors if s != own}
    if own is not None:
        by[own] = pd.Series([c["selection_score"] for _, c in flat])
    human_pick = _read_human(human) if human else None
    rows, agreement = {}, {}
    try:
        for sel in selectors:
            picks: dict[str, int] = {}
            for k, (img, _) in enumerate(flat):
                v = by[sel].iloc[k]
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                if img not in picks or v > by[sel].iloc[picks[img]]:
                    picks[img] = k
            chosen = list(picks.values())
            values = {m: float(np.nanmean([table[m].iloc[k] for k in chosen])) for m in metrics}
            if corpus_level and chosen:
                batch = CaptionBatch([flat[k][1]["caption"] for k in chosen], [refs[k] for k in chosen])
                _, rep = compute_metrics(corpus_level, batch, metrics=shared)
                values.update({m: rep[m].get("corpus", math.nan) for m in corpus_level})
            row = {PAPER_NAMES.get(m, m): v * paper_scale(m) for m, v in values.items()}
            if human_pick is not None:
                judged = [img for img in picks if img in human_pick]
                hits = sum(flat[picks[img]][1]["index"] == human_pick[img] for img in judged)
                row["Preference rate (%)"] = 100.0 * hits / len(judged) if judged else math.nan
                agreement[sel] = {"judged_images": len(judged), "agreements": hits}
            rows[PAPER_NAMES.get(sel, sel)] = row
    finally:
        for metric in shared.values():
            metric.close()
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "Selection metric"
    info = {"images": len(ids), "candidates": len(flat), "precomputed": sorted(have), "human": agreement}
    info["selected_by_the_run"] = own  # this selector used the run's selection_score
    info["corpus_level"] = corpus_level
    return df, info


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
    """Mean ReconScore of each system's existing reconstructions under each encoder (nothing is re-rendered),
    the Kendall tau-b between the system rankings of every pair of encoders, and the rows skipped because an
    image (original or reconstruction) could not be read: [{system, id, path, error}], a per-item error.
    Originals are read with the score run's --bands, as the run read them."""
    from scipy.stats import kendalltau

    from recon_score.errors import ImageLoadError
    from recon_score.images import load_image
    from recon_score.scorer import ReconScorer

    pairs: dict[str, tuple[list, list]] = {}
    skipped: list[dict] = []
    for name, run_dir in systems.items():
        run = _run_json(run_dir)
        root = (images_root or {}).get(name) or Path(run.get("images_root") or "")
        orig, recon = [], []
        for row in _read_jsonl(run_dir / "scores.jsonl"):
            if row.get("reconstruction") and not row.get("error"):
                path = root / row["image"]
                try:
                    o = load_image(path, bands=run.get("bands"))
                    path = run_dir / row["reconstruction"]
                    r = load_image(path)
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
        scorer = ReconScorer.from_preset("paper", overrides={"encoder": spec}, device=device)
        col = {}
        for name, (orig, recon) in pairs.items():
            results = scorer.compare(orig, recon)
            bad = next((r.error for r in results if not r.ok), None)
            if bad is not None:
                raise ReconScoreError(f"encoder {spec} on system {name}: {bad}")
            col[name] = float(np.mean([r.recon_score for r in results]))
        scorer.unload()
        scores[spec] = col
    table = pd.DataFrame(scores)
    table.index.name = "system"
    tau = pd.DataFrame(index=encoders, columns=encoders, dtype=float)
    for a in encoders:
        for b in encoders:
            if len(systems) < 2:
                tau.loc[a, b] = math.nan
                continue
            t = kendalltau(table[a].to_numpy(), table[b].to_numpy(), variant="b").statistic
            tau.loc[a, b] = float(t)
    tau.index.name = "encoder"
    return table, tau, skipped
