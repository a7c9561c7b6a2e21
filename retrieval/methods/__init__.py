"""The one registry of composed retrieval methods. Entries hold import paths, so listing methods imports no torch;
each entry's `Input` flags say what the method takes beyond the three feature matrices, from which the CLI's
method list, what a bundle can run and the learned methods' status checks are derived. Hyperparameters are
frozen dataclasses with the papers' defaults; `overrides` (``--set METHOD.KEY=VALUE``) replace single fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from recon_score.errors import InputError
from recon_score.registry import Entry, Registry


class Kind(StrEnum):
    BASELINE = "baseline"
    TRAINING_FREE = "training-free"
    LEARNED = "learned"


class Input(Enum):
    """What a method takes beyond the feature matrices: (the option of `retrieve` that gives it, "" for what a
    benchmark run always has; whether a features bundle can hold it)."""

    TEXT_ENCODER = ("", False)  # the text tower of --encoder, to encode new texts
    ENCODER_TOWERS = ("--encoder = the CLIP it was trained on", False)  # drives the towers itself
    CORPORA = ("--corpus-pos/--corpus-neg", True)
    VOCABULARY = ("--vocabulary", False)
    PHRASES = ("--phrases", False)
    CAPTIONER = ("--captioner", False)
    REWRITER = ("--rewriter", False)
    CHECKPOINT = ("--checkpoint {name}=PATH", False)
    REFERENCE_IMAGES = ("", False)
    DATABASE_IMAGES = ("", False)

    def __init__(self, given_as: str, in_bundle: bool):
        self.given_as, self.in_bundle = given_as, in_bundle


@dataclass(frozen=True)
class Method(Entry):
    """`target` builds the method from its config (`target.config_cls`)."""

    kind: Kind
    inputs: frozenset[Input] = frozenset()  # needed beyond the three feature matrices
    optional: frozenset[Input] = frozenset()  # used when given (BASIC contextualises with the text encoder)
    linear: bool = False  # scores are dot products of composed query vectors (FAISS-servable)
    status: str = ""  # "module:function" -> (available, lines) for `reconscore models check NAME`
    usage: str = ""  # how its inputs are given, where `needs()` alone does not say

    def needs(self) -> str:
        """'--corpus-pos/--corpus-neg, ...': the options of `retrieve` that give its inputs, in `Input`'s order."""
        return ", ".join(i.given_as.format(name=self.name) for i in Input if i in self.inputs and i.given_as)

    @property
    def runs_on_bundle(self) -> bool:
        """Whether a features bundle alone (`reconscore retrieve-eval`) holds everything it needs."""
        return all(i.in_bundle for i in self.inputs)


def _m(name, target, kind, help, inputs=(), optional=(), **facts) -> Method:
    return Method(name, target, help, kind, frozenset(inputs), frozenset(optional), **facts)


I = Input  # noqa: E741  (the table below reads as a table)
METHODS: Registry[Method] = Registry(
    "retrieval method",
    (
        _m(
            "text",
            "retrieval.methods.baselines:TextOnly",
            Kind.BASELINE,
            "text-to-image, g(t)·f(x)",
            linear=True,
        ),
        _m(
            "image",
            "retrieval.methods.baselines:ImageOnly",
            Kind.BASELINE,
            "image-to-image, f(y)·f(x)",
            linear=True,
        ),
        _m("sum", "retrieval.methods.baselines:Sum", Kind.BASELINE, "text + image similarities", linear=True),
        _m("product", "retrieval.methods.baselines:Product", Kind.BASELINE, "text × image similarities"),
        _m(
            "weicom",
            "retrieval.methods.weicom:WeiCom",
            Kind.TRAINING_FREE,
            "Gaussian-CDF calibrated fusion, λ=0.5",
        ),
        _m(
            "basic",
            "retrieval.methods.basic:Basic",
            Kind.TRAINING_FREE,
            "centring, contrastive projection, query expansion, min-normalisation, Harris fusion",
            [I.CORPORA],
            optional=[I.TEXT_ENCODER],
        ),
        _m(
            "freedom",
            "retrieval.methods.freedom:Freedom",
            Kind.TRAINING_FREE,
            "vocabulary memory: k=20 proxies, n=7 words each, m=7 most frequent, '{word} {text}'",
            [I.TEXT_ENCODER, I.VOCABULARY],
            linear=True,
        ),
        _m(
            "cirevl",
            "retrieval.methods.cirevl:CIReVL",
            Kind.TRAINING_FREE,
            "caption, rewrite with an LLM, text-to-image search",
            [I.TEXT_ENCODER, I.CAPTIONER, I.REWRITER, I.REFERENCE_IMAGES],
            linear=True,
        ),
        _m(
            "pic2word",
            "retrieval.methods.learned:Pic2Word",
            Kind.LEARNED,
            "textual inversion: IM2TEXT token in '{text} *' (the RS-CIR benchmark paper)",
            [I.CHECKPOINT, I.ENCODER_TOWERS, I.REFERENCE_IMAGES],
            linear=True,
        ),
        _m(
            "searle",
            "retrieval.methods.learned:Searle",
            Kind.LEARNED,
            "textual inversion: Phi token in '{text} $' (the RS-CIR benchmark paper)",
            [I.CHECKPOINT, I.ENCODER_TOWERS, I.REFERENCE_IMAGES],
            linear=True,
        ),
        _m(
            "searle-oti",
            "retrieval.methods.oti:SearleOTI",
            Kind.LEARNED,
            "SEARLE as the RS-CIR benchmark paper evaluates it: optimisation-based inversion (200 steps), '{text} $'",
            [I.ENCODER_TOWERS, I.REFERENCE_IMAGES, I.VOCABULARY, I.PHRASES],
            linear=True,
            usage="--vocabulary, --phrases or --set searle-oti.lambda_gpt=0, --encoder = the CLIP to invert",
        ),
        _m(
            "compodiff",
            "retrieval.methods.compodiff:CompoDiffMethod",
            Kind.LEARNED,
            "diffusion prior in CLIP-L/14 image space: 10 steps, source weight 0.4",
            [I.CHECKPOINT, I.TEXT_ENCODER, I.REFERENCE_IMAGES],
            linear=True,
            status="retrieval.methods.compodiff:compodiff_status",
            usage="--checkpoint compodiff=DIR (the hub folder), --encoder = CLIP ViT-L/14, the ViT-bigG-14 text tower",
        ),
        _m(
            "magiclens",
            "retrieval.methods.magiclens:MagicLensMethod",
            Kind.LEARNED,
            "the released MagicLens: CLIP + fusion transformer on (image, text); database with the empty text",
            [I.CHECKPOINT, I.REFERENCE_IMAGES, I.DATABASE_IMAGES],
            linear=True,
            status="retrieval.methods.magiclens:magiclens_status",
            usage="--checkpoint magiclens=PATH: the released .pkl or its `models convert` safetensors; its own CLIP "
            "towers",
        ),
    ),
)
del I
TRAINING_FREE = tuple(n for n, m in METHODS.items() if m.kind != Kind.LEARNED)  # `--methods all`


def build_method(name: str, overrides: dict[str, Any] | None = None):
    """The method `name` with its seed-default config, fields replaced by `overrides` (strings are parsed)."""
    from retrieval.methods.base import parse_overrides

    factory = METHODS.load(name)
    config_cls = factory.config_cls
    try:
        values = parse_overrides(config_cls, dict(overrides or {}), method=name)
        config = dataclasses.replace(config_cls(), **values)
    except (TypeError, ValueError) as err:  # a value of the wrong type, or out of range
        raise InputError(f"invalid hyperparameters for {name!r}: {err}") from err
    return factory(config)
