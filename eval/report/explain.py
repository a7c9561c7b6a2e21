"""What the report shows of a row's explanation (`score --explain`, docs/explain.md): the caption cut into its
phrases, a significant one coloured by its delta (green helps, red hurts, stronger for larger |delta|, marked *),
one within the seed noise grey whatever its sign (LEGEND says so on the page), and the gap-map overlay's file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# (css class, swatch style, what it means): the legend drawn above an explained run's captions
NOISE_STYLE = "background: rgba(140,140,140,0.16); color: #5b6675"
LEGEND = (
    (
        "sig helps",
        "background: rgba(46,160,67,0.55)",
        "helps: leaving it out lowers the score (significant*)",
    ),
    (
        "sig hurts",
        "background: rgba(215,58,73,0.55)",
        "hurts: leaving it out raises the score (significant*)",
    ),
    ("noise", NOISE_STYLE, "within the seed noise (not significant), or one seed: no noise estimate"),
)
LEGEND_NOTE = (
    "* significant: paired t-test over the explanation's seeds, Holm-corrected over the caption's phrases; the "
    "stronger the colour, the larger |delta|. Hover a phrase for its delta, se and adjusted p."
)


@dataclass
class Segment:
    text: str
    phrase: bool = False
    style: str = ""  # inline background colour, built from numbers only
    title: str = ""  # tooltip: delta, se, significance
    significant: bool = False
    noise: bool = False  # attributed but within the seed noise: greyed


@dataclass
class ExplainView:
    segments: list[Segment]
    heatmap: str | None = None  # img src of the original with its gap map
    worst: str | None = None  # "phrase (delta)" of the worst phrase
    note: str | None = None
    notes: list[str] = field(default_factory=list)
    verdict: str | None = None  # when no phrase hurt: why there is no worst phrase, in words


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
    adjusted = _finite(p.get("p_adjusted"))
    if adjusted is not None:
        text += f", Holm-adjusted p {adjusted:.3g}"
    return f"{text}; {sig.get(p.get('significant'), '')}; kind: {p.get('kind')}"


def segments(caption: str, phrases: list[dict]) -> list[Segment]:
    """The caption as plain text and phrase spans (by their recorded start/end), in order."""
    spans = sorted(
        (p for p in phrases if isinstance(p.get("start"), int) and isinstance(p.get("end"), int)),
        key=lambda p: p["start"],
    )
    sig = [p for p in spans if p.get("significant") is True]
    scale = max((abs(_finite(p.get("delta")) or 0.0) for p in sig), default=0.0) or 1.0
    out, pos = [], 0
    for p in spans:
        a, b = p["start"], p["end"]
        if a < pos or b > len(caption) or a >= b:
            continue  # spans that do not fit the caption are not drawn
        if a > pos:
            out.append(Segment(caption[pos:a]))
        delta, significant = _finite(p.get("delta")), p.get("significant") is True
        style, noise = "", delta is not None and not significant
        if delta is not None and significant:
            alpha = 0.15 + 0.6 * min(abs(delta) / scale, 1.0)
            rgb = "46,160,67" if delta > 0 else "215,58,73"
            style = f"background: rgba({rgb},{alpha:.2f})"
        elif noise:
            style = NOISE_STYLE
        out.append(Segment(caption[a:b], True, style, _tooltip(p), significant, noise))
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
        view.worst = f"{worst} ({delta:+.3f})"
    elif isinstance(ex.get("worst_note"), str):
        view.verdict = ex["worst_note"]
    if ex.get("skipped_phrases"):
        view.notes.append(f"{ex['skipped_phrases']} phrase(s) beyond --explain-max-phrases not attributed")
    return view
