"""What the report shows of a row's explanation (`score --explain`, docs/explain.md): the caption cut into its
phrases, each coloured by its delta (green helps, red hurts, stronger for larger |delta|; significant ones
marked), and the gap-map overlay's file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Segment:
    text: str
    phrase: bool = False
    style: str = ""  # inline background colour, built from numbers only
    title: str = ""  # tooltip: delta, se, significance
    significant: bool = False


@dataclass
class ExplainView:
    segments: list[Segment]
    heatmap: str | None = None  # img src of the original with its gap map
    worst: str | None = None  # "phrase (delta)" of the worst phrase
    worst_delta: float | None = None
    note: str | None = None
    notes: list[str] = field(default_factory=list)


def _finite(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _tooltip(p: dict) -> str:
    if p.get("error"):
        return str(p["error"])
    delta, se = _finite(p.get("delta")), _finite(p.get("se"))
    sig = {True: "significant", False: "within the seed noise", None: "one seed: no noise estimate"}
    text = f"delta {delta:+.3f}" if delta is not None else "no delta"
    if se is not None:
        text += f" ± {se:.3f} (se)"
    return f"{text}; {sig.get(p.get('significant'), '')}; kind: {p.get('kind')}"


def segments(caption: str, phrases: list[dict]) -> list[Segment]:
    """The caption as plain text and phrase spans (by their recorded start/end), in order."""
    spans = sorted(
        (p for p in phrases if isinstance(p.get("start"), int) and isinstance(p.get("end"), int)),
        key=lambda p: p["start"],
    )
    scale = max((abs(_finite(p.get("delta")) or 0.0) for p in spans), default=0.0) or 1.0
    out, pos = [], 0
    for p in spans:
        a, b = p["start"], p["end"]
        if a < pos or b > len(caption) or a >= b:
            continue  # spans that do not fit the caption are not drawn
        if a > pos:
            out.append(Segment(caption[pos:a]))
        delta = _finite(p.get("delta"))
        style = ""
        if delta is not None:
            alpha = 0.15 + 0.6 * min(abs(delta) / scale, 1.0)
            rgb = "46,160,67" if delta > 0 else "215,58,73"
            style = f"background: rgba({rgb},{alpha:.2f})"
        out.append(Segment(caption[a:b], True, style, _tooltip(p), p.get("significant") is True))
        pos = b
    if pos < len(caption):
        out.append(Segment(caption[pos:]))
    return out


def explain_view(ex: dict, heatmap_src: str | None) -> ExplainView:
    caption = ex.get("caption") if isinstance(ex.get("caption"), str) else ""
    phrases = [p for p in ex.get("phrases") or [] if isinstance(p, dict)]
    worst, delta = ex.get("worst_phrase"), _finite(ex.get("worst_delta"))
    view = ExplainView(segments(caption, phrases), heatmap_src, note=ex.get("maps_note") or ex.get("error"))
    if isinstance(worst, str) and delta is not None:
        view.worst, view.worst_delta = f"{worst} ({delta:+.3f})", delta
    if ex.get("skipped_phrases"):
        view.notes.append(f"{ex['skipped_phrases']} phrase(s) beyond --explain-max-phrases not attributed")
    return view
