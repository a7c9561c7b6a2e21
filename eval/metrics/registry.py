"""The metric registry: one `MetricEntry` per name with the facts every command reads and the "module:Class"
that computes it, imported only when built. Adding a metric: its module, and one entry here."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from functools import cache

from recon_score.errors import ReconScoreError
from recon_score.registry import Entry, Registry


@dataclass(frozen=True)
class MetricEntry(Entry):
    """`help` is the metric's one-line description; `target` its class. The facts every caller reads live here,
    never in a check of the name: direction, inputs, the values it can take (which clip its CIs), how the papers'
    tables name and scale it, and which command-line settings its constructor takes."""

    higher_is_better: bool
    needs_references: bool
    needs_images: bool
    value_range: tuple[float, float]  # every value lies in [low, high] (inf: unbounded); clips its CIs
    backend: str  # what computes it (pycocoevalcap scorer, Java jar, encoder)
    paper_name: str  # its name in the papers' tables
    display_scale: float = 100.0  # the papers' tables show caption metrics x100
    settings: tuple[str, ...] = ()  # the command-line settings `metric_options` hands its constructor

    @property
    def range_text(self) -> str:
        """`value_range` for people: "[0, 2.5]", "(-inf, inf)"."""
        low, high = self.value_range
        left = "(" if math.isinf(low) else "["
        right = ")" if math.isinf(high) else "]"
        return f"{left}{low:g}, {high:g}{right}"

    @property
    def options(self) -> tuple[str, ...]:
        """The constructor's keyword arguments (what `build_metric` accepts); imports the metric's module."""
        return _options(self.load())


@cache
def _options(cls: type) -> tuple[str, ...]:
    return tuple(p for p in inspect.signature(cls).parameters if p != "self")


_PTB = dict(higher_is_better=True, needs_references=True, needs_images=False)
_IMAGE = dict(higher_is_better=True, needs_references=False, needs_images=True)
_IMAGE_REFS = dict(higher_is_better=True, needs_references=True, needs_images=True)
_UNIT = (0.0, 1.0)
_UNBOUNDED = (-math.inf, math.inf)
_ENCODER = ("encoder", "long_text", "device")  # --encoder picks CLIP-S's encoder (the others ship their own)
# released weights of their own; the smoke preset builds them tiny and random
_RELEASED = ("weights", "device")
# what a metric and its reference-based variant share: the backend, and the settings their constructors take
_CLIP = dict(backend="encoder registry (CLIP ViT-B/32 by default; --encoder)", settings=_ENCODER)
_PACS = dict(
    backend="encoder registry (default open_clip:pacs-ViT-B-32, the authors' clip_ViT-B-32.pth)",
    settings=(*_RELEASED, "long_text"),
)
_LONGCLIP = dict(
    backend="encoder registry (default open_clip:longclip-B, BeichenZhang/LongCLIP-B)",
    settings=(*_RELEASED, "long_text"),
)
_FLEUR = dict(
    backend="describer backends with log-probabilities (transformers; vllm, openai servers)",
    settings=_RELEASED,
)
_BLEU = "BLEU-{n} (Papineni et al. 2002) per caption, pycocoevalcap Bleu(4) on PTB tokens"

METRICS: Registry[MetricEntry] = Registry(
    "metric",
    (
        *(
            MetricEntry(
                f"bleu{n}",
                f"eval.metrics.ngram:Bleu{n}",
                _BLEU.format(n=n),
                **_PTB,
                value_range=_UNIT,
                backend="pycocoevalcap.bleu",
                paper_name=f"BLEU-{n}",
            )
            for n in (1, 2, 3, 4)
        ),
        MetricEntry(
            "cider",
            "eval.metrics.ngram:CIDEr",
            "CIDEr-D (Vedantam et al. 2015) as pycocoevalcap computes it; IDF over the evaluated corpus' references",
            **_PTB,
            value_range=(0.0, 10.0),  # CIDEr-D: 10 x a mean of clipped, length-penalised cosines
            backend="pycocoevalcap.cider",
            paper_name="CIDEr",
        ),
        MetricEntry(
            "meteor",
            "eval.metrics.meteor:Meteor",
            "METEOR 1.5 (pycocoevalcap's jar, -l en -norm) on PTB tokens; one JVM reused for the run",
            **_PTB,
            value_range=_UNIT,
            backend="pycocoevalcap meteor-1.5.jar (Java)",
            paper_name="METEOR",
        ),
        MetricEntry(
            "rouge",
            "eval.metrics.ngram:RougeL",
            "ROUGE-L (Lin 2004): LCS F-measure, beta 1.2, pycocoevalcap Rouge on PTB tokens",
            **_PTB,
            value_range=_UNIT,
            backend="pycocoevalcap.rouge",
            paper_name="ROUGE",
        ),
        MetricEntry(
            "spice",
            "eval.metrics.spice:Spice",
            "SPICE F-score (pycocoevalcap's spice-1.0.jar); needs the Stanford CoreNLP 3.6.0 jars",
            **_PTB,
            value_range=_UNIT,
            backend="pycocoevalcap spice-1.0.jar + CoreNLP 3.6.0 (Java)",
            paper_name="SPICE",
        ),
        MetricEntry(
            "clipscore",
            "eval.metrics.clip:CLIPScore",
            "CLIP-S (Hessel et al. 2021): 2.5*max(cos,0), prefix 'A photo depicts', ViT-B/32 by default",
            **_IMAGE,
            value_range=(0.0, 2.5),
            **_CLIP,
            paper_name="CLIPScore",
        ),
        MetricEntry(
            "cyclereward",
            "eval.metrics.cyclereward:CycleReward",
            "CycleReward (Bahng et al. 2025): BLIP reward model on cycle-consistency preferences (hjbahng/cyclereward)",
            **_IMAGE,
            value_range=_UNBOUNDED,
            paper_name="CycleReward",
            settings=_RELEASED,
            backend="BLIP ITM port on transformers' Blip modules; the authors' CycleReward-*.pth, loaded strictly",
        ),
        MetricEntry(
            "fleur",
            "eval.metrics.fleur:Fleur",
            "FLEUR (Lee et al. 2024): MLLM judge's 0-1 score smoothed over digit probabilities (Yebin46/FLEUR)",
            **_IMAGE,
            value_range=_UNIT,
            **_FLEUR,
            paper_name="FLEUR",
        ),
        MetricEntry(
            "longclipscore",
            "eval.metrics.longclip:LongCLIPScore",
            "Long-CLIP-S: CLIP-S (2.5*max(cos,0), 'A photo depicts') on Long-CLIP, 248 text tokens "
            "(BeichenZhang/LongCLIP-B)",
            **_IMAGE,
            value_range=(0.0, 2.5),
            **_LONGCLIP,
            paper_name="Long-CLIP-S",
        ),
        MetricEntry(
            "pacscore",
            "eval.metrics.pacs:PACScore",
            "PAC-S (Sarto et al. 2023): 2*max(cos,0) on the authors' PAC fine-tune of CLIP ViT-B/32 "
            "(aimagelab/pacscore)",
            **_IMAGE,
            value_range=(0.0, 2.0),
            **_PACS,
            paper_name="PAC-S",
        ),
        MetricEntry(
            "recon_score",
            "eval.metrics.recon:ReconScoreMetric",
            "ReconScore (the ReconScore paper): T2I reconstruction of the caption vs the image, 100*(1+cos)/2",
            **_IMAGE,
            value_range=(0.0, 100.0),  # 100 * (1 + cos) / 2 with cos in [-1, 1]
            backend="recon_score.ReconScorer (preset: paper by default)",
            paper_name="ReconScore",
            display_scale=1.0,  # already 0-100 in the paper's tables
            settings=("preset", "device", "seeds"),
        ),
        MetricEntry(
            "refclipscore",
            "eval.metrics.clip:RefCLIPScore",
            "RefCLIP-S (Hessel et al. 2021): harmonic mean of CLIP-S and the max reference similarity",
            **_IMAGE_REFS,
            value_range=(0.0, 2.5),
            **_CLIP,
            paper_name="RefCLIPScore",
        ),
        MetricEntry(
            "reffleur",
            "eval.metrics.fleur:RefFleur",
            "RefFLEUR (Lee et al. 2024): FLEUR with the reference captions in the prompt (Yebin46/FLEUR)",
            **_IMAGE_REFS,
            value_range=_UNIT,
            **_FLEUR,
            paper_name="RefFLEUR",
        ),
        MetricEntry(
            "reflongclipscore",
            "eval.metrics.longclip:RefLongCLIPScore",
            "RefLong-CLIP-S: RefCLIP-S's harmonic mean (reference cosine clipped at 0) on Long-CLIP, 248 text tokens "
            "(BeichenZhang/LongCLIP-B)",
            **_IMAGE_REFS,
            value_range=(0.0, 10 / 7),  # reference_floor='zero'; unbounded with 'none'
            **_LONGCLIP,
            paper_name="RefLong-CLIP-S",
        ),
        MetricEntry(
            "refpacscore",
            "eval.metrics.pacs:RefPACScore",
            "RefPAC-S (Sarto et al. 2023): harmonic mean of PAC-S and the max reference cosine, not clipped at 0 "
            "(aimagelab/pacscore)",
            **_IMAGE_REFS,
            value_range=_UNBOUNDED,  # a negative max reference cosine (not clipped) makes 2ps/(p+s) < 0 or large
            **_PACS,
            paper_name="RefPAC-S",
        ),
    ),
    see="`reconscore metrics list` describes them.",
)


def list_metrics() -> list[MetricEntry]:
    """Text-only metrics first, then those that need images; by name within each group."""
    return sorted(METRICS.values(), key=lambda m: (m.needs_images, m.name))


def get_metric_info(name: str) -> MetricEntry:
    return METRICS[name]


def entry_of(cls: type) -> MetricEntry:
    """The entry whose target is `cls` (or the registered class it derives from)."""
    targets = {m.target: m for m in METRICS.values()}
    for c in cls.__mro__:
        entry = targets.get(f"{c.__module__}:{c.__qualname__}")
        if entry is not None:
            return entry
    raise LookupError(f"{cls.__qualname__} is not a registered metric class")


def parse_metric_names(spec: str | list[str]) -> list[str]:
    """'bleu1, cider' or ['bleu1', 'cider'] -> validated names in order, duplicates dropped."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = []
    for raw in items:
        name = raw.strip().lower()
        if not name:
            continue
        name = METRICS[name].name
        if name not in names:
            names.append(name)
    if not names:
        raise ReconScoreError(f"no metric names in {spec!r}; `reconscore metrics list` shows them")
    return names
