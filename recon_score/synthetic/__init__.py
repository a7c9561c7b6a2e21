"""Synthetic models: random weights in the real on-disk formats, built offline, under two name prefixes
(`smoke:` tiny, `shapes:` published sizes); the names are listed in docs/models.md, "Synthetic models".

Loaders never see these names: recon_score.hub resolves them through `resolve` (a folder in the library's own
layout, or a builder). The entries (MODELS) hold import paths, so parsing names and listing import no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from recon_score.paths import WeightsLocation
from recon_score.registry import Entry, Registry

_SMOKE = "recon_score.synthetic.smoke"
_SHAPES = "recon_score.synthetic.shapes"
_ENCODERS = "recon_score.synthetic.encoders"


@dataclass(frozen=True)
class SyntheticModel(Entry):
    """`name` is PREFIX:FAMILY; `target` the module that implements resolve(SyntheticName) -> dict (the fields of
    recon_score.hub.ResolvedModel but the name) and check(SyntheticName) -> dict for it."""

    encoder: str | None = None  # the encoder family that loads it; None: a pipeline or language model
    argument: str = ""  # what may follow the family name: "" | "@SCALE" | "/ARCH" (required) | "[/RELEASE]"

    @property
    def prefix(self) -> str:
        return self.name.partition(":")[0]

    @property
    def family(self) -> str:
        return self.name.partition(":")[2]


@dataclass(frozen=True)
class SyntheticName:
    prefix: str  # "smoke" | "shapes"
    family: str  # "z-image", "dreamsim", ...
    scale: float = 1.0  # shapes: every width times SCALE
    arch: str = ""  # shapes:open-clip/ARCH; smoke:open-clip/RELEASE

    @property
    def name(self) -> str:
        tail = f"@{self.scale:g}" if self.scale != 1.0 else ""
        return f"{self.prefix}:{self.family}{tail}" + (f"/{self.arch}" if self.arch else "")


PREFIXES: Registry[Entry] = Registry(
    "synthetic prefix",
    (
        Entry("smoke", _SMOKE, "tiny random models, built offline on first use and cached"),
        Entry(
            "shapes",
            _SHAPES,
            "published sizes, random weights, built on the target device (no download): speed is real",
        ),
    ),
)
_RELEASE = "a released CLIP fine-tune of open_clip (e.g. smoke:open-clip/pacs-ViT-B-32)"
MODELS: Registry[SyntheticModel] = Registry(
    "synthetic model",
    (
        SyntheticModel(
            "smoke:z-image", _SMOKE, "ZImagePipeline: Qwen3 text encoder (hidden 32), DiT dim 64, 8x VAE"
        ),
        SyntheticModel(
            "smoke:stable-diffusion",
            _SMOKE,
            "StableDiffusionPipeline with the real CLIP tokenizer (77 tokens)",
        ),
        SyntheticModel(
            "smoke:qwen3-vl", _SMOKE, "Qwen3-VL with a byte-level BPE tokenizer trained at build time"
        ),
        SyntheticModel(
            "smoke:qwen3-text", _SMOKE, "Qwen3 causal LM (text only) for the robustness-set generators"
        ),
        SyntheticModel(
            "smoke:dreamsim", _ENCODERS, "DreamSim-shaped ensemble of three tiny ViTs", encoder="dreamsim"
        ),
        SyntheticModel(
            "smoke:open-clip",
            _ENCODERS,
            f"open_clip ViT (width 32) in local-dir layout, real CLIP BPE; /RELEASE: {_RELEASE}, tiny",
            encoder="open_clip",
            argument="[/RELEASE]",
        ),
        SyntheticModel(
            "smoke:hf-clip",
            _SMOKE,
            "transformers CLIPModel + CLIPProcessor, real CLIP tokenizer",
            encoder="hf",
        ),
        SyntheticModel("smoke:hf-dinov2", _SMOKE, "transformers Dinov2Model (vision only)", encoder="hf"),
        SyntheticModel(
            "shapes:z-image",
            _SHAPES,
            "Z-Image: 6.15B DiT, Qwen3-4B text encoder, FLUX.1 VAE",
            argument="@SCALE",
        ),
        SyntheticModel("shapes:qwen3-vl", _SHAPES, "Qwen3-VL-8B-Instruct", argument="@SCALE"),
        SyntheticModel(
            "shapes:dreamsim",
            _ENCODERS,
            "dreamsim 0.2.1's ensemble: DINO, CLIP, OpenCLIP ViT-B/16 + LoRA",
            encoder="dreamsim",
            argument="@SCALE",
        ),
        SyntheticModel(
            "shapes:open-clip",
            _ENCODERS,
            "an open_clip architecture, e.g. ViT-L-14-quickgelu, or a released CLIP fine-tune, e.g. longclip-B",
            encoder="open_clip",
            argument="/ARCH",
        ),
    ),
    see="`reconscore models list` lists them.",
)


def is_synthetic(name: str) -> bool:
    """Whether `name` carries a synthetic prefix (it may still be malformed: `parse` says)."""
    prefix, sep, _ = name.partition(":")
    return bool(sep) and prefix in PREFIXES


def uses_synthetic_models(settings: object) -> bool:
    """Whether settings name a synthetic model or a `meaningless` preset anywhere: run.json's `meaningless`."""
    if isinstance(settings, dict):
        return settings.get("meaningless") is True or any(uses_synthetic_models(v) for v in settings.values())
    if isinstance(settings, (list, tuple)):
        return any(uses_synthetic_models(v) for v in settings)
    return isinstance(settings, str) and is_synthetic(settings)


def parse(name: str) -> SyntheticName:
    """'shapes:z-image@0.02' -> SyntheticName('shapes', 'z-image', 0.02); ValueError for an unknown prefix or
    family, or an argument the family does not take."""
    prefix, _, rest = name.partition(":")
    if prefix not in PREFIXES:
        raise ValueError(
            f"{name!r} is not a synthetic model name (prefixes: {', '.join(p + ':' for p in PREFIXES)})"
        )
    head, _, arch = rest.partition("/")
    family, at, scale_text = head.partition("@")
    entry = MODELS[f"{prefix}:{family}"]
    argument = entry.argument
    if (argument == "/ARCH" and not arch) or (arch and "/" not in argument) or (at and argument != "@SCALE"):
        raise ValueError(f"synthetic model {name!r}: spell it {spelling(entry)}")
    scale = 1.0
    if at:
        try:
            scale = float(scale_text)
        except ValueError:
            raise ValueError(
                f"{name!r}: the scale after '@' must be a number, e.g. {prefix}:{family}@0.05"
            ) from None
        if not 0 < scale <= 1:
            raise ValueError(f"{name!r}: the scale must be in (0, 1], got {scale:g}")
    return SyntheticName(prefix, family, scale, arch)


def spelling(entry: SyntheticModel) -> str:
    """How a model is written: 'smoke:z-image', 'shapes:z-image[@SCALE]', 'shapes:open-clip/ARCH'."""
    arg = entry.argument
    return entry.name + (f"[{arg}]" if arg == "@SCALE" else arg)


def encoder_family(name: str) -> str | None:
    """The encoder family that loads `name` (e.g. 'smoke:dreamsim' -> 'dreamsim'); None for pipelines and
    language models. Raises ValueError for a malformed name."""
    n = parse(name)
    return MODELS[f"{n.prefix}:{n.family}"].encoder


def resolve(name: str) -> dict:
    """The fields of recon_score.hub.ResolvedModel but the name, for `name`; ValueError for a malformed name or
    an open_clip release or architecture that does not exist."""
    n = parse(name)
    return MODELS.load(f"{n.prefix}:{n.family}").resolve(n)


def check(name: str) -> WeightsLocation:
    """Where a synthetic model would be built, for `reconscore models check`; builds nothing."""
    try:
        n = parse(name)
    except ValueError as err:
        return WeightsLocation(False, source="synthetic model", detail=str(err))
    return MODELS.load(f"{n.prefix}:{n.family}").check(n)


def list_models() -> list[dict]:
    """One row per synthetic model family: its spelling, what it is, and the encoder family that loads it."""
    return [
        {"name": spelling(m), "prefix": m.prefix, "description": m.help, "encoder": m.encoder}
        for m in MODELS.values()
    ]
