"""The ReconScore paper's Tables 4, 5 and 9: metric robustness to paraphrase vs perturbation, to caption length,
and the choice of T2I model, over the rows `reconscore generate` writes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from eval.metrics.registry import METRICS
from recon_score.errors import ReconScoreError


def references_by_image(rows: list[dict], references: Path | None = None) -> dict[str, list[str]]:
    """Each image's ground-truth captions: from a captions table (image, caption) when given, else the distinct
    source captions of the generated rows (the GT captions that were paraphrased/perturbed)."""
    refs: dict[str, list[str]] = {}
    if references is not None:
        from recon_score.inputs import read_caption_rows

        for r in read_caption_rows(references):
            if r.image and isinstance(r.caption, str):
                refs.setdefault(r.image, []).append(r.caption)
        return refs
    for r in rows:
        if r.get("references"):
            refs[str(r["image"])] = list(r["references"])
        else:
            lst = refs.setdefault(str(r["image"]), [])
            if r["source_caption"] not in lst:
                lst.append(r["source_caption"])
    return refs


def _scores(
    rows: list[dict], metrics: list[str], *, options: dict, images_root: Path | None, references: Path | None
) -> pd.DataFrame:
    """Every metric of each generated row that has a caption, with its kind and word count."""
    from eval.metrics import CaptionBatch, compute_metrics, get_metric_info

    ok = [r for r in rows if r.get("caption") and not r.get("error")]
    if not ok:
        raise ReconScoreError("no generated row has a caption")
    refs = references_by_image(rows, references)
    need_images = images_root is not None and any(get_metric_info(m).needs_images for m in metrics)
    batch = CaptionBatch(  # without --images, compute_metrics refuses image metrics, naming them
        [r["caption"] for r in ok],
        [refs.get(str(r["image"]), []) for r in ok],
        [images_root / r["image"] for r in ok] if need_images else None,
    )
    table, _ = compute_metrics(metrics, batch, options=options)
    table["kind"] = [r["kind"] for r in ok]
    table["words"] = [len(r["caption"].split()) for r in ok]
    return table


def paraphrase_table(
    paraphrased: list[dict], perturbed: list[dict], metrics: list[str], **scoring
) -> pd.DataFrame:
    """Table 4: per metric, the mean over paraphrased and perturbed captions (paper scale) and the difference
    (Paraphrased - Perturbed): a metric that rewards facts should have a positive difference. `scoring`: how
    `_scores` computes the metrics."""
    rows = [r for r in paraphrased if r.get("kind") == "paraphrase"] + [
        r for r in perturbed if r.get("kind") == "perturbed"
    ]
    table = _scores(rows, metrics, **scoring)
    out = {}
    for m in metrics:
        s = METRICS[m].display_scale
        para = float(np.nanmean(table.loc[table["kind"] == "paraphrase", m])) * s
        pert = float(np.nanmean(table.loc[table["kind"] == "perturbed", m])) * s
        out[METRICS[m].paper_name] = {"Paraphrased": para, "Perturbed GT": pert, "±Δ": para - pert}
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("Metric")


def length_table(
    generated: list[dict], metrics: list[str], *, token_limits: dict[str, int | None] | None = None, **scoring
) -> pd.DataFrame:
    """Table 5: per metric, the mean for short / medium / long captions written from the same triplets, and their
    standard deviation (sample, ddof=1, as the paper's σ); plus each metric's input token limit. `scoring`: how
    `_scores` computes the metrics."""
    from eval.metrics import get_metric_info

    rows = [r for r in generated if r.get("kind") in ("short", "medium", "long")]
    table = _scores(rows, metrics, **scoring)
    out = {}
    for m in metrics:
        s = METRICS[m].display_scale
        means = [float(np.nanmean(table.loc[table["kind"] == k, m])) * s for k in ("short", "medium", "long")]
        finite = [x for x in means if not math.isnan(x)]
        sigma = float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan
        limit = (token_limits or {}).get(m, getattr(get_metric_info(m).load(), "token_limit", None))
        out[METRICS[m].paper_name] = {
            "Max Tokens": "-" if limit is None else str(limit),
            "S.": means[0],
            "M.": means[1],
            "L.": means[2],
            "σ": sigma,
        }
    words = [float(table.loc[table["kind"] == k, "words"].mean()) for k in ("short", "medium", "long")]
    out["(average words)"] = {"Max Tokens": "", "S.": words[0], "M.": words[1], "L.": words[2], "σ": math.nan}
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("Metric")


def t2i_table(
    presets: list[str],
    pairs: list,
    *,
    device: str | None,
    batch_size: int = 1,
    use_cache: bool = False,
    trust_remote_code: bool = False,
) -> tuple[pd.DataFrame, dict]:
    """Table 9: per T2I preset, its token limit (M. T.), seconds per reconstruction inside the T2I pipeline only
    (I. T., the paper's "inference time per image"; cache off so every image renders) and mean ReconScore."""
    from recon_score.artifact_cache import ArtifactCache
    from recon_score.preflight import needs_of, require_models
    from recon_score.scorer import ReconScorer

    rows, configs = {}, {}
    scorers = [
        ReconScorer.from_preset(
            name,
            device=device,
            batch_size=batch_size,
            cache=ArtifactCache(enabled=use_cache),
            trust_remote_code=trust_remote_code,
        )
        for name in presets
    ]
    require_models(needs_of(*scorers), command="study t2i")  # every preset's models, before the first loads
    for name, scorer in zip(presets, scorers):
        scorer.preflight()
        mine = _read_as(pairs, scorer.preset)
        scorer.score_pairs(mine[:1])  # load the models outside the timed region
        before = dict(scorer.stats)
        res = scorer.score_pairs(mine)
        rendered = scorer.stats["rendered"] - before["rendered"]
        seconds = scorer.stats["render_seconds"] - before["render_seconds"]
        vals = [r.recon_score for r in res if r.recon_score is not None]
        rows[f"{name} ({scorer.preset.t2i_model})"] = {
            "M. T.": scorer.renderer.token_limit,
            "I. T. (s)": seconds / rendered if rendered else math.nan,
            "ReconScore": float(np.mean(vals)) if vals else math.nan,
            "truncated": sum(r.truncated for r in res),
        }
        configs[name] = scorer.config()
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("Model"), configs


def _read_as(pairs: list, preset) -> list:
    """(image or its load error, caption): paths read with the preset's reader (recon_score.presets.reader_for)."""
    from recon_score.errors import InputError
    from recon_score.images import load_image
    from recon_score.presets import reader_for

    out = []
    for img, caption in pairs:
        if isinstance(img, (str, Path)):
            try:
                img = load_image(img, reader=reader_for(preset))
            except InputError as err:
                img = err
        out.append((img, caption))
    return out


def read_pairs(captions: Path, images_root: Path | None, limit: int | None) -> list:
    """(image path, caption) of a captions table's usable rows, for `t2i_table`: each preset's scorer reads the
    image with that preset's reader (recon_score.presets.reader_for), as `score` would."""
    from recon_score.inputs import read_caption_rows

    rows = [r for r in read_caption_rows(captions, root=images_root) if r.error is None][:limit]
    return [(r.image_path, r.caption) for r in rows]
