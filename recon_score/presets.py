"""Named ReconScore configurations. A preset states every value; what `reconscore presets show` prints is exactly
what runs and what every results file records.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from recon_score.errors import UnknownPresetError
from recon_score.prompts import PERSPECTIVE_TEMPLATE


class PresetMixin:
    """What every preset dataclass (ReconScore, describer) can do: print itself, be overridden by CLI flags."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def replace(self, **changes):
        """A copy with some values overridden (None = keep the preset's); unknown keys raise."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown preset field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class ReconPreset(PresetMixin):
    name: str
    description: str
    t2i_model: str  # hub id, local folder, or smoke:NAME
    t2i_revision: str | None  # hub revision (branch, tag or commit); None = default branch
    steps: int
    guidance_scale: float  # 0.0 in the authors' code; exposed, never hard-coded
    max_sequence_length: (
        int | None
    )  # passed to pipelines that accept it (Z-Image, FLUX); None = model default
    seed: int  # one seed per image, shared by all of its candidate captions
    max_side: int  # scale the long side down to this, never up ...
    size_multiple: int  # ... then round each side down to a multiple of this
    encoder: str  # an encoder spec, e.g. "dreamsim:ensemble"
    dtype: str  # T2I weights dtype on GPU; CPU runs use float32 unless `cpu_dtype` says otherwise
    vae_tiling: bool
    prompt_template: str  # contains "{caption}" once
    meaningless: bool = False  # smoke: every output says its numbers mean nothing

    def pixel_fields(self) -> dict:
        """The values that change reconstructed pixels (the reconstruction cache key uses these)."""
        return {
            k: getattr(self, k)
            for k in (
                "t2i_model",
                "t2i_revision",
                "steps",
                "guidance_scale",
                "max_sequence_length",
                "dtype",
                "vae_tiling",
            )
        }


PAPER = ReconPreset(
    name="paper",
    description="Seed 004 protocol: Z-Image, 28 steps, guidance 0.0, 512 tokens, seed 42, long side <= 1024, "
    "multiples of 16, DreamSim ensemble, bf16, VAE tiling, perspective prompt.",
    t2i_model="Tongyi-MAI/Z-Image",
    t2i_revision=None,
    steps=28,
    guidance_scale=0.0,
    max_sequence_length=512,
    seed=42,
    max_side=1024,
    size_multiple=16,
    encoder="dreamsim:ensemble",
    dtype="bfloat16",
    vae_tiling=True,
    prompt_template=PERSPECTIVE_TEMPLATE,
)

FAST = dataclasses.replace(
    PAPER,
    name="fast",
    description="Z-Image-Turbo (distilled), 9 steps (8 DiT evaluations), guidance 0.0 as its model card "
    "recommends; everything else as `paper`. Scores are not comparable with `paper` numbers.",
    t2i_model="Tongyi-MAI/Z-Image-Turbo",
    steps=9,
)

FLUX2_KLEIN = dataclasses.replace(
    PAPER,
    name="flux2-klein",
    description="FLUX.2 [klein] 4B (seed 004 Table 9): 4 steps, guidance 1.0 as distilled; else as `paper`.",
    t2i_model="black-forest-labs/FLUX.2-klein-4B",
    steps=4,
    guidance_scale=1.0,
)

FLUX1_DEV = dataclasses.replace(
    PAPER,
    name="flux1-dev",
    description="FLUX.1-dev (seed 004 Table 9): 28 steps, guidance 3.5 (its default), T5 512 tokens.",
    t2i_model="black-forest-labs/FLUX.1-dev",
    guidance_scale=3.5,
)

FLUX2_DEV = dataclasses.replace(
    PAPER,
    name="flux2-dev",
    description="FLUX.2-dev (seed 004 Table 9): 28 steps, guidance 4.0 (its default).",
    t2i_model="black-forest-labs/FLUX.2-dev",
    guidance_scale=4.0,
)

SMOKE = dataclasses.replace(
    PAPER,
    name="smoke",
    description="Tiny random offline models through the same code path as `paper` (ZImagePipeline + a "
    "DreamSim-shaped encoder); 4 steps, float32, long side <= 256. Numbers are meaningless; use it to check an "
    "install, a pipeline or a data layout.",
    t2i_model="smoke:z-image",
    steps=4,
    max_side=256,
    encoder="dreamsim:smoke",
    dtype="float32",
    meaningless=True,
)

PRESETS: dict[str, ReconPreset] = {p.name: p for p in (PAPER, FAST, FLUX1_DEV, FLUX2_DEV, FLUX2_KLEIN, SMOKE)}

SMOKE_NOTE = "smoke preset: tiny random models, these numbers are meaningless"


def get_preset(name: str) -> ReconPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(name, sorted(PRESETS)) from None
