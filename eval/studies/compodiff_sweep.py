"""The RS-CIR benchmark paper's Fig. 12: CompoDiff's average mAP per source weight and number of diffusion
steps, each point one `reconscore retrieve` run under <out>/points/. See docs/studies.md, `compodiff-sweep`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pandas as pd

from recon_score.errors import InputError
from recon_score.run_outputs import POINTS
from retrieval.run import RetrieveConfig, run_retrieve

# the paper (A.5) gives no exact grid: these cover its "very small" to mid-range weights and t = 10-20
FIG12_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)
FIG12_STEPS = (5, 10, 20)


def point_name(steps: int, weight: float) -> str:
    return f"t{steps}-w{weight:g}"


def _check_grid(weights: Sequence[float], steps: Sequence[int]) -> None:
    bad = [w for w in weights if not 0.0 <= w <= 1.0]
    if bad:
        raise InputError(f"source weights must lie in [0, 1], got {bad}")
    if any(t < 1 for t in steps):
        raise InputError(f"steps must be positive integers, got {list(steps)}")
    if len(set(weights)) != len(weights) or len(set(steps)) != len(steps):
        raise InputError("the source weights and steps must not repeat a value")


def _headline(record: dict) -> tuple[str, float | None]:
    """The benchmark's first headline metric: its macro mean over groups where it has groups (PatternCom's
    attribute-balanced Avg.), else the mean over queries."""
    metric = record["metrics"]["headline"][0]
    method = record["methods"]["compodiff"]
    if method["status"] != "ok":
        return metric, None
    s = method["summary"][metric]
    value = s["macro"] if s["macro"] is not None else s["overall"]
    return metric, None if value is None else 100.0 * value


def compodiff_sweep(
    base: RetrieveConfig,
    weights: Sequence[float] = FIG12_WEIGHTS,
    steps: Sequence[int] = FIG12_STEPS,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Run CompoDiff at every (steps, source weight) of the grid on `base`'s benchmark and encoder; returns the
    table (rows: steps, columns: source weight, percent) and each point's run folder, status and exit code."""
    _check_grid(weights, steps)
    say = log or (lambda _msg: None)
    settings = dict(base.overrides.get("compodiff", {}))
    fixed = {"steps", "source_weight"} & set(settings)
    if fixed:
        raise InputError(
            f"{sorted(fixed)} is what the sweep varies: give it with --weights / --sampler-steps, not --set"
        )
    table = pd.DataFrame(index=pd.Index(list(steps), name="steps"), columns=list(weights), dtype=float)
    points: dict[str, dict] = {}
    metric = None
    for t in steps:
        for w in weights:
            name = point_name(t, w)
            cfg = dataclasses.replace(
                base,
                methods=["compodiff"],
                overrides={"compodiff": {**settings, "steps": str(t), "source_weight": str(w)}},
                out=base.out / POINTS / name,
            )
            say(f"{name}: CompoDiff, {t} steps, source weight {w:g}")
            outcome = run_retrieve(cfg, log=say)
            metric, value = _headline(outcome.record)
            table.loc[t, w] = float("nan") if value is None else value
            status = outcome.record["methods"]["compodiff"]
            points[name] = {
                "steps": t,
                "source_weight": w,
                "run": str(cfg.out),
                "status": status["status"],
                "reason": status.get("reason"),
                "exit_code": outcome.exit_code,
                metric: value,
            }
    table.columns = pd.Index([f"{w:g}" for w in weights], name="source weight")
    return table, {"metric": metric, "points": points}
