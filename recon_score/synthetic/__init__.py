"""Synthetic models: random weights in the real on-disk formats, built offline, under two name prefixes.

    smoke:FAMILY            tiny models built on first use into RECONSCORE_CACHE (seconds on a CPU); the `smoke`
                            presets and the tests run the real loading code on them
    shapes:FAMILY[@SCALE]   the published sizes, built on the target device with no download; speed is real
    shapes:open-clip/ARCH   any open_clip architecture at its published size

One spelling per model family wherever a model name is taken (--t2i-model, --captioner, --model, --encoder):
`smoke:z-image`, `smoke:dreamsim`, `shapes:dreamsim@0.02`, ... Encoder families (`encoder` in the table) are
also encoder specs; the encoder registry (recon_score.encoders) hands them to that family's loader. The numbers
these models produce are meaningless.

The table holds import paths, so parsing names and listing import no torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Family:
    description: str
    encoder: str | None = None  # the encoder family that loads it; None: a pipeline or language model
    argument: str = ""  # what may follow the family name: "" | "@SCALE" | "/ARCH" (required)


@dataclass(frozen=True)
class Prefix:
    module: str  # implements resolve(SyntheticName) -> (folder, revision) and check(SyntheticName) -> dict
    description: str
    families: dict[str, Family]


@dataclass(frozen=True)
class SyntheticName:
    prefix: str  # "smoke" | "shapes"
    family: str  # "z-image", "dreamsim", ...
    scale: float = 1.0  # shapes: every width times SCALE
    arch: str = ""  # shapes:open-clip/ARCH

    @property
    def name(self) -> str:
        tail = f"@{self.scale:g}" if self.scale != 1.0 else ""
        return f"{self.prefix}:{self.family}{tail}" + (f"/{self.arch}" if self.arch else "")


# The one prefix table.
PREFIXES: dict[str, Prefix] = {
    "smoke": Prefix(
        "recon_score.synthetic.smoke",
        "tiny random models, built offline on first use and cached",
        {
            "z-image": Family("ZImagePipeline: Qwen3 text encoder (hidden 32), DiT dim 64, 8x VAE"),
            "stable-diffusion": Family("StableDiffusionPipeline with the real CLIP tokenizer (77 tokens)"),
            "qwen3-vl": Family("Qwen3-VL with a byte-level BPE tokenizer trained at build time"),
            "qwen3-text": Family("Qwen3 causal LM (text only) for the robustness-set generators"),
            "dreamsim": Family("DreamSim-shaped ensemble of three tiny ViTs", encoder="dreamsim"),
            "open-clip": Family(
                "open_clip ViT (width 32) in local-dir layout, real CLIP BPE", encoder="open_clip"
            ),
            "hf-clip": Family("transformers CLIPModel + CLIPProcessor, real CLIP tokenizer", encoder="hf"),
            "hf-dinov2": Family("transformers Dinov2Model (vision only)", encoder="hf"),
        },
    ),
    "shapes": Prefix(
        "recon_score.synthetic.shapes",
        "published sizes, random weights, built on the target device (no download): speed is real",
        {
            "z-image": Family("Z-Image: 6.15B DiT, Qwen3-4B text encoder, FLUX.1 VAE", argument="@SCALE"),
            "qwen3-vl": Family("Qwen3-VL-8B-Instruct", argument="@SCALE"),
            "dreamsim": Family(
                "dreamsim 0.2.1's ensemble: DINO, CLIP, OpenCLIP ViT-B/16 + LoRA",
                encoder="dreamsim",
                argument="@SCALE",
            ),
            "open-clip": Family(
                "an open_clip architecture, e.g. ViT-L-14-quickgelu", encoder="open_clip", argument="/ARCH"
            ),
        },
    ),
}


def is_synthetic(name: str) -> bool:
    """Whether `name` carries a synthetic prefix (it may still be malformed: `parse` says)."""
    prefix, sep, _ = name.partition(":")
    return bool(sep) and prefix in PREFIXES


def parse(name: str) -> SyntheticName:
    """'shapes:z-image@0.02' -> SyntheticName('shapes', 'z-image', 0.02).

    Raises:
        ValueError: unknown prefix or family, or an argument the family does not take (the message lists the
            known names).
    """
    prefix, _, rest = name.partition(":")
    if prefix not in PREFIXES:
        raise ValueError(
            f"{name!r} is not a synthetic model name (prefixes: {', '.join(p + ':' for p in PREFIXES)})"
        )
    families = PREFIXES[prefix].families
    head, _, arch = rest.partition("/")
    family, at, scale_text = head.partition("@")
    if family not in families:
        raise ValueError(f"unknown synthetic model {name!r}; known: {', '.join(known_names(prefix))}")
    argument = families[family].argument
    if (argument == "/ARCH") != bool(arch) or (at and argument != "@SCALE"):
        raise ValueError(f"synthetic model {name!r}: spell it {spelling(prefix, family)}")
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


def spelling(prefix: str, family: str) -> str:
    """How a family is written: 'smoke:z-image', 'shapes:z-image[@SCALE]', 'shapes:open-clip/ARCH'."""
    arg = PREFIXES[prefix].families[family].argument
    return f"{prefix}:{family}" + (f"[{arg}]" if arg == "@SCALE" else arg)


def known_names(prefix: str | None = None, *, encoders_only: bool = False) -> list[str]:
    return [
        spelling(p, fam)
        for p, entry in PREFIXES.items()
        if prefix in (None, p)
        for fam, f in entry.families.items()
        if f.encoder or not encoders_only
    ]


def encoder_family(name: str) -> str | None:
    """The encoder family that loads `name` (e.g. 'smoke:dreamsim' -> 'dreamsim'); None for pipelines and
    language models. Raises ValueError for a malformed name."""
    n = parse(name)
    return PREFIXES[n.prefix].families[n.family].encoder


def resolve(name: str) -> tuple[Path, str]:
    """The folder the real loader reads for `name`, and its revision ("fixture:v1", "shapes:v1").

    Raises ValueError for a malformed name or an encoder that has no folder (shapes:dreamsim, shapes:open-clip).
    """
    n = parse(name)
    return importlib.import_module(PREFIXES[n.prefix].module).resolve(n)


def check(name: str) -> dict:
    """{available, location, source, detail} for `reconscore models check`; builds nothing."""
    try:
        n = parse(name)
    except ValueError as err:
        return {"available": False, "location": "", "source": "synthetic model", "detail": str(err)}
    return importlib.import_module(PREFIXES[n.prefix].module).check(n)


def list_models() -> list[dict]:
    """One row per synthetic model family: its spelling, what it is, and the encoder family that loads it."""
    return [
        {"name": spelling(p, fam), "prefix": p, "description": f.description, "encoder": f.encoder}
        for p, entry in PREFIXES.items()
        for fam, f in entry.families.items()
    ]
