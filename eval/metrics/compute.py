"""Run several metrics over one batch: fail fast on what cannot work, share the expensive steps, collect one
table."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eval.metrics.base import CaptionBatch, Metric
from eval.metrics.registry import get_metric_info
from recon_score.errors import ReconScoreError
from recon_score.preflight import needs_of, require_models
from recon_score.progress import Progress, announce

if TYPE_CHECKING:
    import pandas as pd


def build_metric(name: str, **options) -> Metric:
    """An instance of metric `name`; `options` go to its constructor (see `MetricEntry.options`)."""
    info = get_metric_info(name)
    unknown = set(options) - set(info.options)
    if unknown:
        allowed = ", ".join(info.options) or "none"
        raise ReconScoreError(
            f"metric {name!r} takes no option(s) {', '.join(sorted(unknown))} (allowed: {allowed})"
        )
    return info.load()(**options)


def metric_options(
    *, encoder: str, long_text: str, preset: str, device: str | None, recon_seeds: int = 1
) -> dict[str, dict]:
    """Command-line settings -> constructor options of the metrics that take them (each entry's `settings`)."""
    from eval.metrics.registry import METRICS

    # released weights: the smoke preset builds them tiny and random, as it does the T2I
    weights = "smoke" if preset == "smoke" else "released"
    given = dict(encoder=encoder, long_text=long_text, preset=preset, device=device, seeds=recon_seeds)
    given["weights"] = weights
    return {m.name: {k: given[k] for k in m.settings} for m in METRICS.values() if m.settings}


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
    """One column per metric (plus its extra per-row columns) and, per metric, what run.json records. `metrics`
    supplies ready instances (a shared METEOR); the others are built from `options[name]` and closed after."""
    import pandas as pd  # here, not at import: listing metrics (and `--help`) stays light

    options, given = options or {}, metrics or {}
    check_inputs(names, batch)
    preset = next((o["preset"] for o in options.values() if "preset" in o), None)
    if batch.image_reader is None and preset is not None:
        from recon_score.presets import reader_for

        batch.image_reader = reader_for(preset)  # every image metric sees the pixels ReconScore sees
    built: dict[str, Metric] = {}
    table = pd.DataFrame(index=range(len(batch)))
    report: dict[str, dict] = {}
    bar = None
    try:
        instances = {}
        for i, name in enumerate(names, start=1):  # construct all first: SPICE's missing jars fail early
            if name in given:
                instances[name] = given[name]
            else:
                announce(f"metrics: setting up {name} ({i}/{len(names)})")
                instances[name] = built[name] = build_metric(name, **options.get(name, {}))
        require_models(needs_of(*instances.values()))  # every missing model named at once, before any loads
        # a line per metric (a model may load in its first call), and the bar's heartbeat while one runs
        bar = Progress(len(names), desc="metrics", unit="metric")
        for i, name in enumerate(names, start=1):
            start = time.perf_counter()
            announce(f"metrics: {name} on {len(batch)} captions ({i}/{len(names)})")
            bar.stage(f"{name} on {len(batch)} captions")
            out = instances[name].score(batch)
            table[name] = out.values
            for col, values in out.extra.items():
                table[col] = values
            report[name] = {
                "config": instances[name].config(),
                **out.info,
                "seconds": round(time.perf_counter() - start, 3),
            }
            bar.update(1, stage=f"{name} done in {report[name]['seconds']:.0f} s")
    finally:
        if bar is not None:
            bar.close()
        for m in built.values():
            m.close()
    return table, report
