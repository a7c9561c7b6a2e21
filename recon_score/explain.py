"""Explanations of a ReconScore: where the reconstruction misses the original, and what each phrase contributed.

Gap maps from the scoring encoder's patch tokens; phrase attributions by leaving each phrase out and re-rendering
with the same seeds (a paired t-test, Holm-corrected). The definitions and the cost: docs/explain.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise

import numpy as np
from PIL import Image

from recon_score.errors import ArgumentError, InputError
from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS
from recon_score.run_outputs import EXPLAIN

# Connectives that open a new phrase (kept with the phrase they open, so leaving it out removes them too):
# coordinating conjunctions, "with"/"without", relative pronouns and adverbs. Whole words between spaces: one
# joined to its neighbours by a hyphen or a slash ("red-and-white", "and/or") is part of that word.
CONNECTIVES = (
    "and", "or", "but", "nor", "yet", "with", "without", "which", "that", "who", "whose", "where", "while",
)  # fmt: skip
# The closed list of abbreviations whose final dot ends no sentence and whose comma ("e.g.,") cuts nothing:
# street and place names, titles, and the Latin ones of captions. Matched as whole words, any letter case.
ABBREVIATIONS = (
    "St", "Ste", "Ave", "Rd", "Blvd", "Hwy", "Mt", "Ft", "Pt", "No", "Nos", "Dr", "Mr", "Mrs", "Ms", "Prof",
    "Jr", "Sr", "Co", "Corp", "Inc", "Ltd", "Dept", "Univ", "Intl", "Fig", "approx", "ca", "cf", "vs", "etc",
    "e.g", "i.e", "U.S", "U.K", "U.N", "U.S.A",
)  # fmt: skip
_CONNECTIVE = re.compile(r"(?<=\s)(?:" + "|".join(CONNECTIVES) + r")\b(?![-/])", re.IGNORECASE)
_ABBREVIATION = re.compile(
    r"(?<![\w.])(?:" + "|".join(re.escape(a) for a in sorted(ABBREVIATIONS, key=len, reverse=True)) + r")\.",
    re.IGNORECASE,
)
_PUNCT = re.compile(r"[,;:]\s*|[.!?]\s+")
_BRACKETS = {"(": ")", "[": "]"}

# Phrase kinds for `study explain` (first match wins, in this order); the word lists are the documented rule.
KIND_WORDS = {
    "count": (
        "one two three four five six seven eight nine ten eleven twelve dozen dozens several many few "
        "numerous multiple single pair couple some lots"
    ),
    "colour": (
        "red green blue yellow orange purple pink brown black white grey gray dark light bright pale "
        "beige tan golden silver turquoise cyan teal colored coloured colorful colourful"
    ),
    "spatial": (
        "left right top bottom upper lower middle center centre corner edge side near next beside between "
        "above below under over around along across behind front surrounded surrounding adjacent north "
        "south east west northern southern eastern western parallel diagonal opposite"
    ),
}
KINDS = (*KIND_WORDS, "object")
ONLY_PHRASE = "the caption's only phrase: nothing to leave it out against"
NO_HURT = "no phrase hurt"
CORRECTION = "holm"  # the family-wise correction over one caption's phrases


@dataclass(frozen=True)
class Phrase:
    """A span of the caption: `text` is caption[start:end] without surrounding spaces and punctuation."""

    text: str
    start: int
    end: int
    kind: str


def phrase_kind(text: str) -> str:
    words = set(re.findall(r"[a-z]+", text.lower()))
    if any(ch.isdigit() for ch in text):
        return "count"
    for kind, vocab in KIND_WORDS.items():
        if words & set(vocab.split()):
            return kind
    return "object"


def _bracket_groups(caption: str) -> list[tuple[int, int]]:
    """(start, end) of each outermost balanced ( ... ) or [ ... ] group; an unbalanced bracket is plain text."""
    groups, stack = [], []
    for i, ch in enumerate(caption):
        if ch in _BRACKETS:
            stack.append((i, _BRACKETS[ch]))
        elif stack and ch == stack[-1][1]:
            start = stack.pop()[0]
            if not stack:
                groups.append((start, i + 1))
        elif ch in _BRACKETS.values():
            stack = []  # a closing bracket that closes nothing: forget what was open
    return groups


def _cuts(caption: str) -> list[int]:
    """Where phrases start (docs/explain.md, "The split rule"): after , ; : and after . ! ? followed by a space,
    except between digits ("3,000", "12:30") and after a listed abbreviation ("St.", "e.g.,"); before each
    connective; around each bracketed group, with no cut inside it."""
    abbrev_ends = {m.end() for m in _ABBREVIATION.finditer(caption)}
    cuts = {0, len(caption)}
    for m in _PUNCT.finditer(caption):
        at, ch = m.start(), caption[m.start()]
        between_digits = ch in ",:." and 0 < at < len(caption) - 1 and caption[at - 1].isdigit()
        between_digits = between_digits and caption[at + 1].isdigit()
        after_abbrev = (at + 1 if ch == "." else at) in abbrev_ends
        if not between_digits and not after_abbrev:
            cuts.add(m.end())
    cuts.update(m.start() for m in _CONNECTIVE.finditer(caption))
    for a, b in _bracket_groups(caption):
        cuts = {c for c in cuts if not a < c < b} | {a, b}
    return sorted(cuts)


def split_phrases(caption: str) -> list[Phrase]:
    """Deterministic phrases by the documented rule (`_cuts`). Pieces without a letter or digit, or only an
    abbreviation ("etc."), join the phrase before them. A phrase's span is its words: the punctuation after it
    stays with the sentence, but an abbreviation keeps its dot ("St.")."""
    abbrev_ends = {m.end() for m in _ABBREVIATION.finditer(caption)}
    spans: list[list[int]] = []
    for a, b in pairwise(_cuts(caption)):
        if spans and (
            not any(ch.isalnum() for ch in caption[a:b])
            or _ABBREVIATION.fullmatch(caption[a:b].strip(" ,;:"))
        ):
            spans[-1][1] = b
        elif b > a:
            spans.append([a, b])
    phrases = []
    for a, b in spans:
        raw = caption[a:b]
        start = a + len(raw) - len(raw.lstrip())
        end = a + len(raw.rstrip())
        while end > start and caption[end - 1] in ",;:.!?" and end not in abbrev_ends:
            end -= 1
            while end > start and caption[end - 1].isspace():
                end -= 1
        text = caption[start:end]
        if any(ch.isalnum() for ch in text):
            phrases.append(Phrase(text, start, end, phrase_kind(text)))
    return phrases


def without(caption: str, phrase: Phrase) -> str:
    """The caption with `phrase`'s words removed, spaces and the punctuation left dangling tidied."""
    text = caption[: phrase.start] + " " + caption[phrase.end :]
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([,;:.!?])", r"\1", text)
    text = re.sub(r"[,;:]+(?=[,;:.!?])", "", text)
    return text.strip().lstrip(",;:.!? ").rstrip(",;: ").strip()


@dataclass
class PhraseEffect:
    """One phrase's contribution: `delta` = mean over seeds of score(full) - score(without it)."""

    text: str
    start: int
    end: int
    kind: str
    delta: float | None
    per_seed: list[float] | None
    se: float | None = None
    t: float | None = None
    p: float | None = None  # two-sided p of the paired t-test over seeds
    p_adjusted: float | None = None  # Holm-adjusted over the caption's attributed phrases
    significant: bool | None = None  # p_adjusted < level; None with one seed: no noise estimate
    region: list[float] | None = None  # (x0, y0, x1, y1) fractions of the original: where recall drops most
    region_drop: float | None = None  # that drop in recall (cosine units), beyond the seed noise of the map
    region_se: float | None = None  # its standard error over seeds
    error: str | None = None


@dataclass
class Explanation:
    """What `ReconScorer.explain` returns for one (image, caption)."""

    caption: str
    recon_score: float | None
    seeds: list[int]
    per_seed: list[float | None]
    phrases: list[PhraseEffect]
    level: float
    recall: np.ndarray | None = field(default=None, repr=False)  # (rows, cols), mean over towers and seeds
    aligned: np.ndarray | None = field(default=None, repr=False)
    box: tuple[float, float, float, float] | None = None  # the part of the original the grids cover
    phrase_drops: np.ndarray | None = field(default=None, repr=False)  # (phrases, rows, cols)
    maps_note: str | None = None  # why there are no maps (an encoder without patch tokens)
    skipped_phrases: int = 0  # phrases beyond max_phrases, not attributed
    error: str | None = None
    correction: str = CORRECTION

    @property
    def worst_phrase(self) -> PhraseEffect | None:
        """The most negative of the significant negative phrases (a likely wrong phrase), or None."""
        hurt = [p for p in self.phrases if p.significant is True and p.delta is not None and p.delta < 0]
        return min(hurt, key=lambda p: p.delta) if hurt else None

    @property
    def worst_note(self) -> str | None:
        """Why there is no worst phrase, in words (None when there is one)."""
        if self.worst_phrase is not None:
            return None
        if not any(p.delta is not None for p in self.phrases):
            return "no phrase attributed"
        if len(self.seeds) < 2:
            return "one seed: no noise estimate, nothing can be significant"
        return NO_HURT

    def record(self) -> dict:
        """The JSON-ready summary (no grids): what a results row carries."""
        worst = self.worst_phrase
        return {
            "caption": self.caption,  # the cleaned caption the phrase spans index
            "seeds": self.seeds,
            "per_seed": self.per_seed,
            "level": self.level,
            "correction": self.correction,
            "box": list(self.box) if self.box else None,
            "recall_mean": _round(float(self.recall.mean())) if self.recall is not None else None,
            "aligned_mean": _round(float(self.aligned.mean())) if self.aligned is not None else None,
            "maps_note": self.maps_note,
            "skipped_phrases": self.skipped_phrases,
            "worst_phrase": worst.text if worst else None,
            "worst_delta": worst.delta if worst else None,
            "worst_note": self.worst_note,
            "phrases": [asdict(p) for p in self.phrases],
            "error": self.error,
        }

    def __repr__(self) -> str:
        worst = self.worst_phrase
        tail = f", worst={worst.text!r} ({worst.delta:+.3f})" if worst else f", {self.worst_note}"
        return f"Explanation(score={self.recon_score}, phrases={len(self.phrases)}{tail})"


def _round(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


# -- maps -------------------------------------------------------------------------------------------------------
def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def tower_maps(original: np.ndarray, recon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(recall, aligned) maps of one tower: `original` and `recon` are (rows, cols, d) patch grids."""
    rows, cols, d = original.shape
    a = _unit(original.reshape(-1, d).astype(np.float64))
    b = _unit(recon.reshape(-1, d).astype(np.float64))
    sim = a @ b.T
    return sim.max(axis=1).reshape(rows, cols), np.einsum("id,id->i", a, b).reshape(rows, cols)


def _resize(grid: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if grid.shape == shape:
        return grid
    img = Image.fromarray(grid.astype(np.float32), mode="F").resize(
        (shape[1], shape[0]), Image.Resampling.BILINEAR
    )
    return np.asarray(img, dtype=np.float64)


def gap_maps(original: Sequence[np.ndarray], recon: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Recall and aligned maps averaged over towers (each tower's grid resized to the finest one first)."""
    maps = [tower_maps(o, r) for o, r in zip(original, recon)]
    shape = max((m[0].shape for m in maps), key=lambda s: s[0] * s[1])
    recall = np.mean([_resize(m[0], shape) for m in maps], axis=0)
    aligned = np.mean([_resize(m[1], shape) for m in maps], axis=0)
    return recall, aligned


def cell_box(index: tuple[int, int], shape: tuple[int, int], box) -> list[float]:
    """A grid cell's (x0, y0, x1, y1) as fractions of the original image."""
    (r, c), (rows, cols) = index, shape
    x0, y0, x1, y1 = box
    w, h = (x1 - x0) / cols, (y1 - y0) / rows
    return [round(v, 6) for v in (x0 + c * w, y0 + r * h, x0 + (c + 1) * w, y0 + (r + 1) * h)]


# -- statistics -------------------------------------------------------------------------------------------------
def paired_effect(full: Sequence[float], reduced: Sequence[float]) -> tuple:
    """(mean delta, se, t, two-sided p) of the paired t-test on per-seed differences full - reduced (scipy's
    `ttest_rel`); se, t and p are None with one seed."""
    from scipy import stats

    d = np.asarray(full, np.float64) - np.asarray(reduced, np.float64)
    mean = float(d.mean())
    if len(d) < 2:
        return mean, None, None, None
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    t = math.copysign(math.inf, mean) if se == 0 and mean != 0 else (0.0 if se == 0 else mean / se)
    p = float(2 * stats.t.sf(abs(t), len(d) - 1))
    return mean, se, t, p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): rejecting where the adjusted p < level holds the
    family-wise error rate at `level` over the m phrases of one caption, whatever their dependence."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _significance(effects: list[PhraseEffect], level: float) -> None:
    """Holm over the caption's phrases that have a p-value: each one's p_adjusted and significant."""
    tested = [e for e in effects if e.p is not None]
    for e, adj in zip(tested, holm([e.p for e in tested])):
        e.p_adjusted, e.significant = adj, bool(adj < level)


# -- the explanation of one (image, caption) --------------------------------------------------------------------
def check_arguments(
    *, seeds: object = None, max_phrases: object = 8, level: object = 0.05
) -> list[int] | None:
    """The seeds as a list (None when not given), or ArgumentError naming the argument the CLI would refuse: at
    least two distinct integer seeds, max_phrases an integer >= 1, 0 < level < 1."""

    def integer(x: object) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))

    if not integer(max_phrases) or max_phrases < 1:
        raise ArgumentError(f"max_phrases must be an integer >= 1, got {max_phrases!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ArgumentError(f"level must be a number strictly between 0 and 1, got {level!r}")
    if seeds is None:
        return None
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence | np.ndarray):
        raise ArgumentError(f"seeds must be a list of integers, got {seeds!r}")
    out = list(seeds)
    if not all(integer(s) for s in out):
        raise ArgumentError(f"seeds must be integers, got {out!r}")
    if len(out) < 2 or len(set(out)) < len(out):
        raise ArgumentError(
            f"explain needs at least 2 distinct seeds (one tests nothing, a repeated one fakes a zero spread), "
            f"got {out!r}"
        )
    return [int(s) for s in out]


@dataclass
class _Renders:
    """Per variant (0 = the full caption, k = without phrase k), per seed: score or error, and the patch grids
    of each reconstruction (None without patch tokens); the original's grids and the box they cover."""

    scores: list[list[float | None]]
    errors: list[str | None]
    grids: list[list[list[np.ndarray] | None]]
    original: list[np.ndarray] | None = None
    box: tuple | None = None


def _render_variants(
    scorer, image: Image.Image, variants: list[str], seeds: list[int], progress: Callable[[int], None] | None
) -> _Renders:
    """Each variant rendered under every seed (one `score_pairs` call, so one encoder batch, per variant), the
    embeddings and patch grids from one encoder pass; `progress(K)` after each variant."""
    renders = _Renders([], [], [])
    with scorer.patch_tokens() as sink:
        for variant in variants:
            row = scorer.score_pairs([(image, variant)] * len(seeds), seeds=seeds)
            renders.scores.append([r.recon_score for r in row])
            renders.errors.append(next((r.error for r in row if r.error), None))
            renders.grids.append([_grid_of(scorer, sink, r.reconstruction) for r in row])
            if progress is not None:
                progress(len(seeds))
        if sink is not None and sink.grids:
            renders.original, renders.box = sink.grids[scorer._digest(image)]
    return renders


def _grid_of(scorer, sink, image: Image.Image | None) -> list[np.ndarray] | None:
    if sink is None or image is None:
        return None
    known = sink.grids.get(scorer._digest(image))
    return known[0] if known else None


def _seed_maps(orig: list[np.ndarray], recons: list[list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(K, rows, cols) recall and aligned maps, one per seed's reconstruction."""
    maps = [gap_maps(orig, r) for r in recons]
    return np.stack([m[0] for m in maps]), np.stack([m[1] for m in maps])


def _region(effect: PhraseEffect, drops: np.ndarray, box, level: float) -> np.ndarray:
    """The phrase's mean recall drop map; its `region` is the cell where the drop is largest, only when that
    drop exceeds the seed noise of the map there (the paired t-test over seeds at `level`, two-sided)."""
    from scipy import stats

    mean = drops.mean(axis=0)
    r, c = np.unravel_index(int(np.argmax(mean)), mean.shape)
    k, top = drops.shape[0], float(mean[r, c])
    if k < 2 or top <= 0:
        return mean
    se = float(drops[:, r, c].std(ddof=1) / math.sqrt(k))
    if se == 0 or top / se > float(stats.t.ppf(1 - level / 2, k - 1)):
        effect.region = cell_box((int(r), int(c)), mean.shape, box)
        effect.region_drop, effect.region_se = _round(top), _round(se)
    return mean


def _attach_maps(expl: Explanation, scorer, renders: _Renders) -> None:
    """Recall/aligned maps of the full caption and each phrase's recall drop, all means over seeds; the drops
    are paired by seed (the same seed renders the caption with and without the phrase)."""
    if renders.original is None:
        expl.maps_note = scorer.encoder.no_patch_tokens_note
        return
    ok = {
        v: grids
        for v, grids in enumerate(renders.grids)
        if renders.errors[v] is None and all(g is not None for g in grids)
    }
    if 0 not in ok:
        return
    recall, aligned = _seed_maps(renders.original, ok[0])
    expl.recall, expl.aligned = recall.mean(axis=0), aligned.mean(axis=0)
    expl.box = tuple(float(x) for x in renders.box)
    drops = np.full((len(expl.phrases), *expl.recall.shape), np.nan)
    for n, effect in enumerate(expl.phrases):
        if n + 1 in ok:
            reduced = _seed_maps(renders.original, ok[n + 1])[0]
            drops[n] = _region(effect, recall - reduced, expl.box, expl.level)
    expl.phrase_drops = drops


def explain_one(
    scorer,
    image: Image.Image,
    caption: str,
    *,
    seeds: Sequence[int],
    max_phrases: int = 8,
    level: float = 0.05,
    progress: Callable[[int], None] | None = None,
) -> Explanation:
    """The explanation of one loaded image and its caption (docs/explain.md); `progress(n)` after n renders."""
    from recon_score.prompts import clean_caption

    seeds = [int(s) for s in seeds]
    try:
        text = clean_caption(caption, collapse_whitespace=scorer.preset.collapse_whitespace)
    except InputError as err:
        return Explanation(str(caption), None, seeds, [None] * len(seeds), [], level, error=str(err))
    phrases = split_phrases(text)
    attributed = phrases[:max_phrases] if len(phrases) > 1 else []
    variants = [text] + [without(text, p) for p in attributed]
    renders = _render_variants(scorer, image, variants, seeds, progress)
    full = renders.scores[0]
    expl = Explanation(text, None, seeds, full, [], level, skipped_phrases=len(phrases) - len(attributed))
    if renders.errors[0]:
        expl.error = renders.errors[0]
        return expl
    expl.recon_score = _round(float(np.mean(full)))
    if len(phrases) == 1:  # nothing to leave it out against: shown, not attributed
        expl.skipped_phrases = 0
        p = phrases[0]
        expl.phrases.append(PhraseEffect(p.text, p.start, p.end, p.kind, None, None, error=ONLY_PHRASE))
    for n, p in enumerate(attributed, start=1):
        effect = PhraseEffect(p.text, p.start, p.end, p.kind, None, None)
        if renders.errors[n] or not variants[n]:
            effect.error = renders.errors[n] or "nothing left without this phrase"
        else:
            mean, se, t, effect.p = paired_effect(full, renders.scores[n])
            effect.delta, effect.se, effect.t = _round(mean), _round(se), _round(t)
            effect.per_seed = [_round(a - b) for a, b in zip(full, renders.scores[n])]
        expl.phrases.append(effect)
    _significance(expl.phrases, level)
    _attach_maps(expl, scorer, renders)
    return expl


# -- files ------------------------------------------------------------------------------------------------------
def maps_npz(expl: Explanation) -> bytes:
    """The raw grids as an .npz (recall, aligned, phrase_drops, box), with fixed zip timestamps so the same
    explanation always gives the same bytes."""
    import io
    import zipfile

    arrays = {"recall": expl.recall, "aligned": expl.aligned, "phrase_drops": expl.phrase_drops}
    arrays["box"] = np.asarray(expl.box, np.float64)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buf.getvalue()


def heatmap(expl: Explanation, original: Image.Image, *, alpha: float = 0.65) -> Image.Image:
    """The original with its gap (1 - recall, clipped to [0, 1]) overlaid in red over the part the grid covers:
    the stronger the red, the less of that patch the reconstruction reproduced anywhere."""
    base = original.convert("RGB")
    x0, y0, x1, y1 = expl.box
    left, top = round(x0 * base.width), round(y0 * base.height)
    size = (max(1, round(x1 * base.width) - left), max(1, round(y1 * base.height) - top))
    gap = np.clip(1.0 - expl.recall, 0.0, 1.0).astype(np.float32)
    gap = np.asarray(Image.fromarray(gap, mode="F").resize(size, Image.Resampling.BILINEAR))
    layer = np.zeros((size[1], size[0], 4), np.uint8)
    layer[..., 0] = 255
    layer[..., 3] = np.clip(np.round(gap * alpha * 255), 0, 255).astype(np.uint8)
    out = base.convert("RGBA")
    out.alpha_composite(Image.fromarray(layer, mode="RGBA"), (left, top))
    return out.convert("RGB")


def heatmap_png(expl: Explanation, original: Image.Image) -> bytes:
    import io

    buf = io.BytesIO()
    heatmap(expl, original).save(buf, format="PNG")
    return buf.getvalue()


@dataclass(frozen=True)
class ExplainOptions:
    """`score --explain` / `describe --explain`: how many phrases are attributed, over how many seeds of their
    own (recon_score.explain_power: the default's power), at which family-wise significance level."""

    max_phrases: int = 8
    level: float = 0.05
    seeds: int = DEFAULT_EXPLAIN_SEEDS

    def __post_init__(self):
        check_arguments(max_phrases=self.max_phrases, level=self.level)
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(
                f"explain seeds must be an integer >= 2 (one seed tests nothing), got {self.seeds!r}"
            )

    def renders(self, caption: str) -> int:
        """Renders to explain `caption`: (attributed phrases + 1) x seeds, or K for a one-phrase caption."""
        n = len(split_phrases(caption))
        return (min(n, self.max_phrases) + 1 if n > 1 else 1) * self.seeds

    def cost(self, captions: Sequence[str], what: str = "caption(s)", *, besides: int = 0) -> str:
        """The line said before the first render: what explaining `captions` costs, and the score's `besides`."""
        n = sum(map(self.renders, captions))
        line = f"explain: {len(captions)} {what} x (phrases + 1) x {self.seeds} seeds = {n} renders"
        return line + (f", besides the score's {besides} ({n + besides} in all)" if besides else "")


def explain_summary(rows: Sequence[dict]) -> dict | None:
    """What a console says of an explained run's rows (attributed, significant and hurting phrases, where the
    maps are); None when no row is explained."""
    explained = [r["explain"] for r in rows if isinstance(r.get("explain"), dict)]
    if not explained:
        return None
    phrases = [p for ex in explained for p in ex.get("phrases") or [] if isinstance(p, dict)]
    scored = [p for p in phrases if isinstance(p.get("delta"), (int, float))]
    significant = [p for p in scored if p.get("significant") is True]
    return {
        "captions": len(explained),
        "phrases": len(scored),
        "significant": len(significant),
        "hurt": sum(1 for p in significant if p["delta"] < 0),
        "maps": sum(1 for ex in explained if ex.get("maps")),
        "folder": EXPLAIN,
        "correction": next((ex.get("correction") for ex in explained if ex.get("correction")), None),
    }


def explain_files(expl: Explanation, original: Image.Image, stem: str) -> dict[str, bytes]:
    """{run-relative path: bytes} of explain/`stem`.npz and .png (none without maps or after an error)."""
    if expl.recall is None:
        return {}
    return {f"{EXPLAIN}/{stem}.npz": maps_npz(expl), f"{EXPLAIN}/{stem}.png": heatmap_png(expl, original)}


def explain_row(
    scorer,
    image: Image.Image,
    caption: str,
    seeds: Sequence[int],
    options: ExplainOptions,
    stem: str,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict, dict[str, bytes]]:
    """A results row's `explain` field (naming its files) and the files' bytes, for the Run to write."""
    expl = explain_one(
        scorer,
        image,
        caption,
        seeds=seeds,
        max_phrases=options.max_phrases,
        level=options.level,
        progress=progress,
    )
    files = explain_files(expl, image, stem)
    rec = expl.record()
    rec.update({"maps": None, "heatmap": None})
    for rel in files:
        rec["maps" if rel.endswith(".npz") else "heatmap"] = rel
    return rec, files
