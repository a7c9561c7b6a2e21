"""`reconscore study explain`: which kinds of phrase most often hurt a caption, over `score --explain` runs.

A phrase hurts when leaving it out brings the reconstruction significantly closer to the original (negative
delta, significant over the run's seeds). Kinds are recon_score.explain's documented word lists (counts, colours,
spatial relations, else object names); docs/explain.md.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recon_score.errors import ReconScoreError
from recon_score.explain import KINDS


def explained_phrases(runs: dict[str, Path]) -> pd.DataFrame:
    """One row per attributed phrase of every explained row of every run (system, id, caption, phrase, kind,
    delta, significant)."""
    from recon_score.run_outputs import score_rows

    rows = []
    for system, folder in runs.items():
        scored = score_rows(folder)
        explained = [r for r in scored if isinstance(r.get("explain"), dict)]
        if not explained:
            raise ReconScoreError(f"{folder}: no explained rows; run `reconscore score --explain` first")
        for r in explained:
            for p in r["explain"]["phrases"]:
                if p.get("delta") is None:
                    continue
                rows.append({"system": system, "id": r["id"], "caption": r["caption"], "phrase": p["text"],
                             "kind": p["kind"], "delta": p["delta"], "significant": p["significant"]})  # fmt: skip
    return pd.DataFrame(rows, columns=["system", "id", "caption", "phrase", "kind", "delta", "significant"])


def kinds_table(phrases: pd.DataFrame) -> pd.DataFrame:
    """Per phrase kind: how many phrases, their mean delta, how many hurt (negative delta; significant)."""
    out = []
    for kind in KINDS:
        sub = phrases[phrases["kind"] == kind]
        hurt = sub[(sub["delta"] < 0) & (sub["significant"] == True)]  # noqa: E712  (None: one seed)
        out.append({
            "kind": kind,
            "phrases": len(sub),
            "mean delta": sub["delta"].mean() if len(sub) else float("nan"),
            "negative delta": int((sub["delta"] < 0).sum()),
            "hurt (significant)": len(hurt),
            "share hurt %": 100 * len(hurt) / len(sub) if len(sub) else float("nan"),
        })  # fmt: skip
    return (
        pd.DataFrame(out).set_index("kind").sort_values("share hurt %", ascending=False, na_position="last")
    )


def worst_table(phrases: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The `n` phrases with the most negative delta."""
    cols = ["system", "id", "phrase", "kind", "delta", "significant"]
    return phrases.sort_values(["delta", "system", "id"]).head(n)[cols].reset_index(drop=True)
