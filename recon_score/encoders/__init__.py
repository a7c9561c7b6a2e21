"""The project's one encoder registry. ReconScore, the describer's selection, CLIPScore and every retrieval
method get their encoders from `build_encoder(spec)`; no other module imports open_clip, dreamsim or lpips.

Specs (``FAMILY:NAME`` or a synthetic name, which has that one spelling) are listed in docs/models.md. The table
holds import paths, so parsing specs, listing and `--help` import no backend.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recon_score import hub
from recon_score.errors import UnknownEncoderError, did_you_mean
from recon_score.paths import WeightsLocation
from recon_score.registry import Entry, Registry, load_target

if TYPE_CHECKING:
    from recon_score.encoders.base import Encoder, EncoderInfo


def __getattr__(name: str):
    """Encoder and EncoderInfo come from base, which imports torch: parsing a spec (a typo's answer) must not."""
    if name in ("Encoder", "EncoderInfo"):
        from recon_score.encoders import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "Encoder",
    "EncoderInfo",
    "build_encoder",
    "check_encoder",
    "list_encoders",
    "parse_spec",
]


@dataclass(frozen=True)
class EncoderFamily(Entry):
    """`target` is the family's module: build(name, device, weights_dir) -> Encoder, check(name, weights_dir), and
    for the families that load synthetic encoders load(ResolvedModel, device) -> Encoder."""

    examples: tuple[str, ...] = ()  # example specs (the synthetic ones the family loads are added by listing)
    # "module:check" when the family module imports torch: a weights check must not ("": target's)
    checker: str = ""
    names: str = ""  # "module:ATTR" of the family's closed list of names, checked when a spec is parsed


FAMILIES: Registry[EncoderFamily] = Registry(
    "encoder family",
    (
        EncoderFamily(
            "dreamsim",
            "recon_score.encoders.dreamsim",
            "DreamSim (Fu et al. 2023) perceptual embeddings; ensemble = DINO ViT-B/16 + CLIP ViT-B/16 + OpenCLIP "
            "ViT-B/16",
            (
                "dreamsim:ensemble",
                "dreamsim:dino_vitb16",
                "dreamsim:open_clip_vitb32",
                "dreamsim:clip_vitb32",
                "dreamsim:dinov2_vitb14",
            ),
            "recon_score.encoders.dreamsim_files:check",
            "recon_score.encoders.dreamsim_files:REQUIRED",
        ),
        EncoderFamily(
            "open_clip",
            "recon_score.encoders.open_clip",
            "open_clip image+text towers: OpenAI/LAION CLIP, RemoteCLIP, SkyCLIP, CLIP LAION-RS, SigLIP",
            (
                "open_clip:ViT-B-32/openai",
                "open_clip:ViT-L-14/openai",
                "open_clip:ViT-L-14/laion2b_s32b_b82k",
                "open_clip:ViT-L-14@/weights/RemoteCLIP-ViT-L-14.pt",
                "open_clip:hf-hub:timm/ViT-SO400M-14-SigLIP",
            ),
        ),
        EncoderFamily(
            "hf",
            "recon_score.encoders.hf",
            "transformers models: CLIP/SigLIP/SigLIP2/FG-CLIP2 (image+text), DINOv2/DINOv3 (image), BERT-like (text)",
            (
                "hf:google/siglip2-base-patch16-224",
                "hf:facebook/dinov2-base",
                "hf:facebook/dinov3-vitb16-pretrain-lvd1689m",
                "hf:openai/clip-vit-large-patch14",
                "hf:/path/to/local/model",
            ),
        ),
        EncoderFamily(
            "lpips",
            "recon_score.encoders.lpips",
            "LPIPS distance, shift-tolerant variant (Ghildyal & Liu 2022) with the weights stlpips-pytorch ships",
            ("lpips:alex", "lpips:vgg"),
        ),
    ),
    see="`reconscore models list` shows every spec.",
)

_CACHE: dict[tuple, Encoder] = {}
_LOCK = threading.Lock()


def parse_spec(spec: str) -> tuple[str, str]:
    """(family, name): 'open_clip:ViT-B-32/openai' -> ('open_clip', 'ViT-B-32/openai'); a synthetic encoder keeps
    its whole name: 'smoke:dreamsim' -> ('dreamsim', 'smoke:dreamsim')."""
    if hub.is_synthetic(spec):
        try:
            family = hub.encoder_family(spec)
        except ValueError as err:
            raise UnknownEncoderError(spec, known=sorted(FAMILIES), reason=str(err)) from None
        if family is None:
            names = ", ".join(n for n, _ in hub.synthetic_encoders())
            reason = f"{spec!r} is a pipeline or language model, not an encoder (synthetic encoders: {names})"
            raise UnknownEncoderError(spec, known=sorted(FAMILIES), reason=reason)
        return family, spec
    family, sep, name = spec.partition(":")
    if not sep or family not in FAMILIES or not name:
        raise UnknownEncoderError(spec, known=sorted(FAMILIES))
    if hub.is_synthetic(name):
        raise UnknownEncoderError(
            spec, known=sorted(FAMILIES), reason=f"spell it {name!r}, without {family + ':'!r}"
        )
    closed = FAMILIES[family].names
    if closed and name not in (known := list(load_target(closed))):
        # a typo, said as one before any weights check can call it a missing download
        reason = (
            f"unknown {family} model {name!r}; choose one of {', '.join(known)}{did_you_mean(name, known)}"
        )
        raise UnknownEncoderError(spec, known=sorted(FAMILIES), reason=reason)
    return family, name


def build_encoder(
    spec: str,
    *,
    device: str | None = None,
    weights_dir: str | Path | None = None,
    batch_size: int | None = None,
) -> Encoder:
    """The encoder named by `spec`, created on first use and shared within the process."""
    from recon_score.runtime import resolve_device

    family, name = parse_spec(spec)
    device = resolve_device(device)
    key = (spec, device, str(weights_dir) if weights_dir else None)
    with _LOCK:
        enc = _CACHE.get(key)
        if enc is None:
            loader = FAMILIES.load(family)
            if hub.is_synthetic(spec):
                enc = loader.load(hub.resolve_encoder(spec), device=device)
            else:
                enc = loader.build(
                    name, device=device, weights_dir=Path(weights_dir) if weights_dir else None
                )
            _CACHE[key] = enc
    if batch_size:
        enc.batch_size = batch_size
    return enc


def release_encoders() -> None:
    """Drop cached encoders (frees GPU memory between phases, e.g. VLM then T2I then encoder)."""
    with _LOCK:
        _CACHE.clear()


def list_encoders() -> list[dict]:
    """One row per family: its description and example specs, the synthetic encoders it loads included."""
    synthetic_by_family: dict[str, list[str]] = {}
    for name, family in hub.synthetic_encoders():
        synthetic_by_family.setdefault(family, []).append(name)
    return [
        {
            "family": f.name,
            "description": f.help,
            "examples": [*f.examples, *synthetic_by_family.get(f.name, [])],
            "module": f.target,
        }
        for f in FAMILIES.values()
    ]


def check_encoder(spec: str, *, weights_dir: str | Path | None = None) -> WeightsLocation:
    """Whether `spec`'s weights are here, and where they would come from (its family's rules); no download."""
    family, name = parse_spec(spec)
    if hub.is_synthetic(spec):
        return hub.locate(spec)
    entry = FAMILIES[family]
    check = load_target(entry.checker) if entry.checker else entry.load().check
    return check(name, weights_dir=Path(weights_dir) if weights_dir else None)
