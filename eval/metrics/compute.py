"""Run several metrics over one batch: fail fast on what cannot work, share the expensive steps, collect one
table."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd

from eval.metrics.base import CaptionBatch, Metric
from eval.metrics.registry import get_metric_info
from recon_score.errors import ReconScoreError
from recon_score.preflight import needs_of, require_models


def build_metric(name: str, **options) -> Metric:
    """An instance of metric `name`; `options` go to its constructor (see `MetricInfo.options`)."""
    info = get_metric_info(name)
    unknown = set(options) - set(info.options)
    if unknown:
        allowed = ", ".join(info.options) or "none"
        raise ReconScoreError(
            f"metric {name!r} takes no option(s) {', '.join(sorted(unknown))} (allowed: {allowed})"
        )
    return info.cls(**options)


def metric_options(
    *, encoder: str, long_text: str, preset: str, device: str | None, recon_seeds: int = 1
) -> dict[str, dict]:
    """Command-line settings -> constructor options of the metrics that take them."""
    clip = {"encoder": encoder, "long_text": long_text, "device": device}
    recon = {"preset": preset, "device": device, "seeds": recon_seeds}
    return {"clipscore": clip, "refclipscore": clip, "recon_score": recon}


def check_inputs(names: Sequence[str], batch: CaptionBatch) -> None:
    """Refuse metrics whose inputs are absent, before any model loads."""
    for name in names:
        info = get_metric_info(name)
        if info.needs_images and batch.images is None:
            raise ReconScoreError(
                f"metric {name!r} needs images and none were given: pass --images ROOT (the folder the `image` "
                "column is relative to), or drop it from --metrics"
            )
        if info.needs_references and not any(batch.references or []):
            raise ReconScoreError(
                f"metric {name!r} needs reference captions and no row has any; give references or drop it"
            )


def compute_metrics(
    names: Sequence[str],
    batch: CaptionBatch,
    *,
    options: dict[str, dict] | None = None,
    metrics: dict[str, Metric] | None = None,
) -> tuple[pd.DataFrame, dict]:
    """One column per metric (plus its extra per-row columns) and, per metric, what run.json records.

    `metrics` supplies ready instances (e.g. a shared METEOR process); the others are built from `options[name]`
    and closed afterwards.
    """
    canon = lambda n: get_metric_info(n).name  # noqa: E731  (old aliases -> today's names and columns)
    names = [canon(n) for n in names]
    options = {canon(k): v for k, v in (options or {}).items()}
    given = {canon(k): v for k, v in (metrics or {}).items()}
    check_inputs(names, batch)
    built: dict[str, Metric] = {}
    table = pd.DataFrame(index=range(len(batch)))
    report: dict[str, dict] = {}
    try:
        instances = {}
        for name in names:  # construct all first: SPICE's missing jars fail before METEOR starts
            if name in given:
                instances[name] = given[name]
            else:
                instances[name] = built[name] = build_metric(name, **options.get(name, {}))
        require_models(needs_of(*instances.values()))  # every missing model named at once, before any loads
        for name in names:
            start = time.perf_counter()
            out = instances[name].score(batch)
            table[name] = out.values
            for col, values in out.extra.items():
                table[col] = values
            report[name] = {
                "config": instances[name].config(),
                **out.info,
                "seconds": round(time.perf_counter() - start, 3),
            }
    finally:
        for m in built.values():
            m.close()
    return table, report
