"""What every study shares: tables as CSV + markdown files, seeds from the command line."""

from __future__ import annotations

import math

import pandas as pd


def markdown_table(df: pd.DataFrame, *, digits: int = 2, index: bool = True) -> str:
    def fmt(v) -> str:
        if isinstance(v, float):
            text = "–" if math.isnan(v) else f"{v:.{digits}f}"
            return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.00"
        return str(v)

    cols = ([df.index.name or ""] if index else []) + [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for idx, *values in df.itertuples(name=None):  # per-column types: a count stays an integer
        cells = ([fmt(idx)] if index else []) + [fmt(v) for v in values]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_files(name: str, df: pd.DataFrame, *, title: str, digits: int = 2, index: bool = True) -> dict:
    """NAME.csv and NAME.md (markdown under a bold title), as the run's files to publish."""
    from recon_score.run_outputs import table_files as names

    md = f"**{title}**\n\n" + markdown_table(df, digits=digits, index=index)
    csv_name, md_name = names(name)
    return {csv_name: df.to_csv(index=index).encode("utf-8"), md_name: md.encode("utf-8")}


def selection_seeds(run: dict) -> list[int]:
    """The T2I seeds a describe run rendered its candidates with to *select* (run.json `selection`); empty for a
    run selected by a deterministic metric (no selection render)."""
    return [int(s) for s in (run.get("selection") or {}).get("selection_seeds") or []]


def recon_eval_seeds(options: dict) -> list[int]:
    """The seeds the study's `recon_score` metric renders with (its preset's seed, then derive_seeds for K)."""
    from recon_score.presets import get_preset
    from recon_score.seeds import derive_seeds

    recon = options.get("recon_score") or {}
    preset = recon.get("preset", "paper")
    p = get_preset(preset) if isinstance(preset, str) else preset
    seed = (recon.get("overrides") or {}).get("seed", p.seed)
    return derive_seeds(int(seed), int(recon.get("seeds") or 1))


def refuse_selection_seeds(run: dict, seeds: list[int], where: str) -> None:
    """A study's evaluation render must be independent of the render that selected: refuse seeds the run
    selected with (the score would be an in-sample maximum, not an evaluation)."""
    from recon_score.errors import ReconScoreError

    shared = sorted(set(seeds) & set(selection_seeds(run)))
    if shared:
        raise ReconScoreError(
            f"{where}: evaluation seed(s) {shared} are the run's selection seeds {selection_seeds(run)} "
            "(run.json `selection.selection_seeds`); a ReconScore rendered with them is the in-sample maximum "
            "that chose the caption. Evaluate with another seed (--eval-seed)"
        )
