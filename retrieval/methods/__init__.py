"""The one registry of composed retrieval methods. The table holds import paths, so listing methods (and
`--help`) imports no torch; `build_method(name, overrides)` imports the module on first use.

Hyperparameters are frozen dataclasses whose defaults are the papers' settings (the RS-CIR benchmark paper A.4, i-CIR's preset,
FreeDom's run_retrieval); `overrides` (``--set METHOD.KEY=VALUE`` on the CLI) replace single fields.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from recon_score.errors import InputError, ReconScoreError, did_you_mean


@dataclass(frozen=True)
class MethodInfo:
    name: str
    target: str  # "module:attribute"; the attribute builds the method from a config
    kind: str  # baseline | training-free | learned
    summary: str
    needs: tuple[str, ...] = ()  # beyond the three feature matrices
    linear: bool = False  # scores are dot products of composed query vectors (FAISS-servable)


METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in (
        MethodInfo(
            "text",
            "retrieval.methods.baselines:TextOnly",
            "baseline",
            "text-to-image, g(t)·f(x)",
            linear=True,
        ),
        MethodInfo(
            "image",
            "retrieval.methods.baselines:ImageOnly",
            "baseline",
            "image-to-image, f(y)·f(x)",
            linear=True,
        ),
        MethodInfo(
            "sum", "retrieval.methods.baselines:Sum", "baseline", "text + image similarities", linear=True
        ),
        MethodInfo("product", "retrieval.methods.baselines:Product", "baseline", "text × image similarities"),
        MethodInfo(
            "weicom",
            "retrieval.methods.weicom:WeiCom",
            "training-free",
            "Gaussian-CDF calibrated fusion, λ=0.5",
        ),
        MethodInfo(
            "basic",
            "retrieval.methods.basic:Basic",
            "training-free",
            "centring, contrastive projection, query expansion, min-normalisation, Harris fusion",
            needs=("corpora", "text encoder (contextualisation)"),
        ),
        MethodInfo(
            "freedom",
            "retrieval.methods.freedom:Freedom",
            "training-free",
            "vocabulary memory: k=20 proxies, n=7 words each, m=7 most frequent, '{word} {text}'",
            needs=("text encoder", "vocabulary"),
            linear=True,
        ),
        MethodInfo(
            "cirevl",
            "retrieval.methods.cirevl:CIReVL",
            "training-free",
            "caption, rewrite with an LLM, text-to-image search",
            needs=("text encoder", "captioner", "rewriter"),
            linear=True,
        ),
        MethodInfo(
            "pic2word",
            "retrieval.methods.learned:Pic2Word",
            "learned",
            "textual inversion: IM2TEXT token in '{text} *' (the RS-CIR benchmark paper)",
            needs=("checkpoint", "image+text encoder", "reference images"),
            linear=True,
        ),
        MethodInfo(
            "searle",
            "retrieval.methods.learned:Searle",
            "learned",
            "textual inversion: Phi token in '{text} $' (the RS-CIR benchmark paper)",
            needs=("checkpoint", "image+text encoder", "reference images"),
            linear=True,
        ),
        MethodInfo(
            "searle-oti",
            "retrieval.methods.oti:SearleOTI",
            "learned",
            "SEARLE as the RS-CIR benchmark paper evaluates it: optimisation-based inversion (200 steps), '{text} $'",
            needs=("image+text encoder", "reference images", "vocabulary + phrases (GPT loss)"),
            linear=True,
        ),
        MethodInfo(
            "compodiff",
            "retrieval.methods.compodiff:CompoDiffMethod",
            "learned",
            "diffusion prior in CLIP-L/14 image space: 10 steps, source weight 0.4",
            needs=("checkpoint", "text encoder (CLIP ViT-bigG-14)", "reference images"),
            linear=True,
        ),
        MethodInfo(
            "magiclens",
            "retrieval.methods.magiclens:MagicLensMethod",
            "learned",
            "the released MagicLens: CLIP + fusion transformer on (image, text); database with the empty text",
            needs=("checkpoint", "query and database images"),
            linear=True,
        ),
    )
}
TRAINING_FREE = tuple(n for n, m in METHODS.items() if m.kind != "learned")
# what runs on a features bundle alone (`reconscore retrieve-eval`): no text encoder, captioner or checkpoint
BUNDLE_METHODS = tuple(n for n in TRAINING_FREE if "text encoder" not in METHODS[n].needs)


class UnknownMethodError(ReconScoreError, ValueError):
    def __init__(self, name: str):
        hint = did_you_mean(name, METHODS)
        super().__init__(f"unknown retrieval method {name!r}{hint}; known: {', '.join(METHODS)}")


def method_class(name: str):
    if name not in METHODS:
        raise UnknownMethodError(name)
    module, attr = METHODS[name].target.split(":")
    obj = getattr(importlib.import_module(module), attr)
    return obj


def build_method(name: str, overrides: dict[str, Any] | None = None):
    """The method `name` with its seed-default config, fields replaced by `overrides` (strings are parsed)."""
    from retrieval.methods.base import parse_overrides

    factory = method_class(name)
    config_cls = factory.config_cls
    try:
        values = parse_overrides(config_cls, dict(overrides or {}), method=name)
        config = dataclasses.replace(config_cls(), **values)
    except (TypeError, ValueError) as err:  # a value of the wrong type, or out of range
        raise InputError(f"invalid hyperparameters for {name!r}: {err}") from err
    return factory(config)
