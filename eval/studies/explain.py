"""`reconscore study explain`: which kinds of phrase most often hurt a caption, over `score --explain` runs; a
malformed `explain` record is one line naming its file and line, the rest still read. See docs/explain.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from recon_score.errors import ReconScoreError
from recon_score.explain import KINDS

COLUMNS = ["system", "id", "caption", "phrase", "kind", "delta", "significant"]
DELTA_RANGE = 100.0  # ReconScore is in [0, 100], so a delta is within +-100


@dataclass
class Explained:
    """The attributed phrases of every explained row, and a line per record that could not be read."""

    phrases: pd.DataFrame
    rows: int = 0  # explained rows read
    problems: list[str] = field(default_factory=list)


def _lines(path: Path) -> list[int]:
    """The 1-based line number of each record of a JSONL file (blank lines hold none)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [i for i, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _phrase_row(p: object, where: str) -> tuple[dict | None, str | None]:
    """(the phrase's fields, None), (None, None) for a phrase without a delta, or (None, why not)."""
    if not isinstance(p, dict):
        return None, f"{where}: a phrase is {type(p).__name__} {p!r:.40}, not an object"
    delta = p.get("delta")
    if delta is None:
        return None, None  # not attributed (the only phrase, or its render failed): said in its `error`
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta):
        return None, f"{where}: phrase {p.get('text')!r:.40} has delta {delta!r:.40}, not a finite number"
    if abs(delta) > DELTA_RANGE:
        return None, f"{where}: phrase {p.get('text')!r:.40} has delta {delta:g}, outside the score's +-100"
    text, kind, sig = p.get("text"), p.get("kind"), p.get("significant")
    if not isinstance(text, str) or kind not in KINDS or sig not in (True, False, None):
        return None, f"{where}: phrase {text!r:.40} has a text, kind or significance that is not valid"
    return {"phrase": text, "kind": kind, "delta": float(delta), "significant": sig}, None


def explained_phrases(runs: dict[str, Path]) -> Explained:
    """One row per attributed phrase of every explained row of every run (system, id, caption, phrase, kind,
    delta, significant); malformed records are listed, not fatal."""
    from recon_score.run_outputs import SCORES, output_file, read_rows

    out, problems, n_rows = [], [], 0
    for system, folder in runs.items():
        scored = read_rows(folder, SCORES)
        path = output_file(folder, SCORES)
        lines = _lines(path)
        explained = [(i, r) for i, r in enumerate(scored) if isinstance(r.get("explain"), dict)]
        if not explained:
            raise ReconScoreError(f"{folder}: no explained rows; run `reconscore score --explain` first")
        for i, r in explained:
            where = f"{path}:{lines[i] if i < len(lines) else i + 1}"
            phrases = r["explain"].get("phrases")
            if not isinstance(phrases, list):
                problems.append(
                    f"{where}: explain.phrases is {type(phrases).__name__}, not a list; row skipped"
                )
                continue
            n_rows += 1
            for p in phrases:
                fields, why = _phrase_row(p, where)
                if why:
                    problems.append(why)
                elif fields:
                    out.append({"system": system, "id": r.get("id"), "caption": r.get("caption"), **fields})
    return Explained(pd.DataFrame(out, columns=COLUMNS), n_rows, problems)


def kinds_table(phrases: pd.DataFrame) -> pd.DataFrame:
    """Per phrase kind: how many phrases, their mean delta, how many hurt (negative delta; significant)."""
    out = []
    for kind in KINDS:
        sub = phrases[phrases["kind"] == kind]
        hurt = sub[(sub["delta"] < 0) & (sub["significant"] == True)]  # noqa: E712  (None: one seed)
        mean = float(sub["delta"].mean()) if len(sub) else math.nan
        out.append({
            "kind": kind,
            "phrases": len(sub),
            "mean delta": mean,
            "negative delta": int((sub["delta"] < 0).sum()),
            "hurt (significant)": len(hurt),
            "share hurt %": 100 * len(hurt) / len(sub) if len(sub) else math.nan,
        })  # fmt: skip
    table = pd.DataFrame(out).set_index("kind")
    table = table.astype({"phrases": int, "negative delta": int, "hurt (significant)": int})
    return table.sort_values("share hurt %", ascending=False, na_position="last")


def worst_table(phrases: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """Up to `n` phrases whose removal helped the reconstruction (negative delta), most first; the row number
    is the rank (1 = helped most)."""
    cols = ["system", "id", "phrase", "kind", "delta", "significant"]
    helped = phrases[phrases["delta"] < 0].sort_values(["delta", "system", "id"]).head(n)[cols]
    helped.index = pd.RangeIndex(1, len(helped) + 1, name="rank")
    return helped
