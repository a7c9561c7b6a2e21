"""Table 6 (the ReconScore paper): human preference of zero-shot vs fine-tuned captioning models, from a
ranking file and a model -> paradigm map. See docs/studies.md for how wins, ties and ReconScore are counted."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from recon_score.errors import ReconScoreError
from recon_score.key_values import key_values
from recon_score.textfiles import csv_dicts, read_json


def parse_paradigms(spec: str) -> dict[str, str]:
    """`MODEL=PARADIGM,...`, or a .json object / .csv (columns model, paradigm) file."""
    path = Path(spec)
    if path.suffix.lower() in (".json", ".csv"):
        if not path.exists():
            raise ReconScoreError(f"--paradigms: {path} not found")
        if path.suffix.lower() == ".json":  # the one text policy: bounded, strict UTF-8, a model named once
            data = read_json(path, expect=dict, what="--paradigms file")
            if not all(isinstance(v, str) for v in data.values()):
                raise ReconScoreError(f'{path}: expected an object {{"MODEL": "PARADIGM", ...}}')
            return {str(k): v for k, v in data.items()}
        out = {}
        header, records = csv_dicts(path)  # the project's one CSV policy
        if not {"model", "paradigm"} <= set(header):
            raise ReconScoreError(f"{path}: needs columns `model` and `paradigm`")
        for line, rec in records:
            if rec["model"] is None or rec["paradigm"] is None:
                raise ReconScoreError(f"{path}:{line}: fewer fields than the header's {len(header)}")
            if rec["model"].strip() in out:
                raise ReconScoreError(f"{path}:{line}: model {rec['model'].strip()!r} given twice")
            out[rec["model"].strip()] = rec["paradigm"].strip()
        return out
    out = key_values([x for x in spec.split(",") if x.strip()], "--paradigms")  # the one KEY=VALUE policy
    if not out:
        raise ReconScoreError("--paradigms: no MODEL=PARADIGM pair given")
    return out


def paradigms_table(
    ranking: pd.DataFrame, paradigm_of: dict[str, str], recon: dict[tuple[str, str], float]
) -> tuple[pd.DataFrame, dict]:
    """`ranking`: preference_data.load_ranking's table; `recon`: ReconScore by (image, candidate)."""
    missing = ranking[ranking["model"].isna()]
    if len(missing):
        raise ReconScoreError(f"{missing['source'].iloc[0]}: candidate has no `model`; Table 6 needs one")
    unmapped = ranking[~ranking["model"].isin(list(paradigm_of))]
    if len(unmapped):
        row = unmapped.iloc[0]
        raise ReconScoreError(
            f"{row['source']}: model {row['model']!r} has no paradigm in --paradigms "
            f"(known: {', '.join(sorted(paradigm_of))})"
        )
    order = list(dict.fromkeys(paradigm_of[m] for m in ranking["model"]))
    wins = dict.fromkeys(order, 0.0)
    rankings = 0
    for _, group in ranking.groupby(["image", "rater"], dropna=False, sort=False):
        rankings += 1
        top = group[group["judgment"] == group["judgment"].min()]
        for model in top["model"]:
            wins[paradigm_of[model]] += 1.0 / len(top)
    distinct = ranking.drop_duplicates(["image", "candidate", "model"])
    scores: dict[str, list[float]] = {p: [] for p in order}
    for _, row in distinct.iterrows():
        v = recon.get((row["image"], row["candidate"]))
        if v is not None and math.isfinite(v):
            scores[paradigm_of[row["model"]]].append(v)
    df = pd.DataFrame(
        {
            "ReconScore": [sum(scores[p]) / len(scores[p]) if scores[p] else math.nan for p in order],
            "Wins": [wins[p] for p in order],
            "Proportion (%)": [100.0 * wins[p] / rankings for p in order],
        },
        index=pd.Index(order, name="Model Paradigm"),
    )
    info = {
        "rankings": rankings,
        "candidates": len(distinct),
        "scored_candidates": {p: len(v) for p, v in scores.items()},
        "ties_at_top": "split equally",
    }
    return df, info


def read_score_run(run_dir: Path) -> dict[tuple[str, str], float]:
    """ReconScore by (image, caption) from a `reconscore score` run over the ranking's candidates."""
    from preference_data.schema import normalize_space
    from recon_score.run_outputs import SCORES, output_file, read_rows

    if not output_file(run_dir, SCORES).exists():
        raise ReconScoreError(f"{run_dir}: no {SCORES} (not a `reconscore score` run)")
    return {
        (r["image"], normalize_space(r["caption"])): r["recon_score"]
        for r in read_rows(run_dir, SCORES)
        if r.get("recon_score") is not None and isinstance(r.get("caption"), str)
    }


def score_candidates(
    ranking: pd.DataFrame, images_root: Path, *, preset: str, device: str | None
) -> dict[tuple[str, str], float]:
    """ReconScore by (image, candidate) of the ranking's distinct candidates, scored now (no score run given)."""
    from eval.metrics import CaptionBatch, compute_metrics

    distinct = ranking.drop_duplicates(["image", "candidate"])
    batch = CaptionBatch(
        list(distinct["candidate"]),
        [[] for _ in range(len(distinct))],
        [images_root / i for i in distinct["image"]],
    )
    scored, _ = compute_metrics(
        ["recon_score"], batch, options={"recon_score": {"preset": preset, "device": device}}
    )
    return dict(zip(zip(distinct["image"], distinct["candidate"]), scored["recon_score"].tolist()))
