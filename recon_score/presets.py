"""Named ReconScore configurations. A preset states every value; what `reconscore presets show` prints is exactly
what runs and what every results file records.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from recon_score.prompts import PERSPECTIVE_TEMPLATE, TEMPLATES, load_template
from recon_score.registry import Registry
from recon_score.runtime import DTYPES
from recon_score.sizing import SIZE_ROUNDINGS


@dataclass(frozen=True)
class Override:
    """What the command-line flag that overrides one preset field says and accepts. The CLI derives one flag per
    preset field from the dataclass and these (`--steps` for `steps`), so the two cannot drift apart."""

    help: str
    min: float | None = None  # smallest accepted value (numbers)
    min_open: bool = False  # ... excluded
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # flag text -> field value (a template name -> the template)


class PresetMixin:
    """What every preset dataclass (ReconScore, describer) can do: print itself, be overridden by CLI flags."""

    # every field but FIXED, with its flag's help and accepted values
    OVERRIDES: ClassVar[dict[str, Override]]
    FIXED: ClassVar[tuple[str, ...]] = (
        "name",
        "description",
        "meaningless",
        "sources",
    )  # no flag changes these

    def to_dict(self) -> dict:
        """Every setting; a field whose metadata says `setting: False` (a preset's sources) is none: no run
        records it and no rerun compares it."""
        out = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if not f.metadata.get("setting", True):
                del out[f.name]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def replace(self, **changes):
        """A copy with some values overridden (None = keep the preset's); unknown keys raise."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown preset field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def override(self, **flags):
        """`replace` with command-line values: each given value is parsed by its field's `Override.parse`."""
        parse = {k: self.OVERRIDES[k].parse for k in flags if k in self.OVERRIDES}
        return self.replace(
            **{k: parse[k](v) if v is not None and parse.get(k) else v for k, v in flags.items()}
        )


RECON_OVERRIDES = {
    "t2i_model": Override("T2I model: hub id or local folder."),
    "t2i_revision": Override("Hub revision (branch, tag or commit) of the T2I model."),
    "steps": Override("Denoising steps.", min=1),
    "guidance_scale": Override("Guidance scale."),
    "max_sequence_length": Override("Text-encoder tokens, for pipelines that take it.", min=1),
    "seed": Override("T2I seed of every image (shared by its captions)."),
    "max_side": Override("Long-side cap (px); images are scaled down, never up.", min=16),
    "size_multiple": Override("Each side is snapped to a multiple of this.", min=1),
    "size_rounding": Override(
        "Snap each side to the nearest multiple (the authors' code) or round it down.", choices=SIZE_ROUNDINGS
    ),
    "encoder": Override("Similarity encoder spec (`reconscore models list`)."),
    "dtype": Override("T2I weights dtype on GPU (CPU runs use float32).", choices=DTYPES),
    "vae_tiling": Override("Decode the VAE in tiles."),
    "prompt_template": Override(
        f"A template name ({', '.join(TEMPLATES)}), a text file, or a template containing {{caption}}.",
        parse=load_template,
    ),
    "collapse_whitespace": Override("Join whitespace runs in captions before prompting (a variant)."),
    "image_reader": Override(
        "How 8-bit files become RGB: pil = Image.open(p).convert('RGB') as the authors' code; eo = EXIF rotation "
        "applied, transparency composited onto black (docs/images.md).",
        choices=("eo", "pil"),  # recon_score.images.READERS (not imported here: --help stays light)
    ),
    "custom_pipeline": Override(
        "A pipeline class from a Python file of the model folder (diffusers' custom_pipeline; remote code: needs "
        "--trust-remote-code)."
    ),
    "scheduler": Override("A diffusers scheduler class, loaded from the model folder's scheduler/."),
    "render_round_trip": Override(
        "Score the reconstruction after saving it in the original's file format with PIL's defaults and reading "
        "it back (the authors' code: a .jpg original's render is scored as a quality-75 JPEG)."
    ),
}


@dataclass(frozen=True)
class ReconPreset(PresetMixin):
    name: str
    description: str
    t2i_model: str  # hub id, local folder, or smoke:NAME
    t2i_revision: str | None  # hub revision (branch, tag or commit); None = default branch
    steps: int
    guidance_scale: float  # 0.0 in the authors' code; exposed, never hard-coded
    # passed to pipelines that accept it (Z-Image, FLUX); None = model default
    max_sequence_length: int | None
    seed: int  # one seed per image, shared by all of its candidate captions
    max_side: int  # scale the long side down to this, never up ...
    size_multiple: int  # ... then snap each side to a multiple of this ...
    size_rounding: str  # ... by this rule: "nearest" (the authors' code) or "floor" (recon_score.sizing)
    encoder: str  # an encoder spec, e.g. "dreamsim:ensemble"
    dtype: str  # T2I weights dtype on GPU; CPU runs use float32 unless `cpu_dtype` says otherwise
    vae_tiling: bool
    prompt_template: str  # contains "{caption}" once
    collapse_whitespace: bool  # join whitespace runs in captions first (a variant; the authors pass them raw)
    image_reader: str  # "pil": 8-bit files as the authors read them; "eo": EXIF rotation, alpha onto black
    # the render saved in the original's file format (PIL's defaults) and read back before it is compared, as
    # the authors' batch_generate.py / batch_evaluate.py do (recon_score.images.round_trip)
    render_round_trip: bool = False
    meaningless: bool = False  # smoke: every output says its numbers mean nothing
    # a pipeline class from a Python file of the model folder (diffusers' `custom_pipeline=`): remote code, run
    # only with trust_remote_code (recon_score.render.load_pipeline); None = the class model_index.json names
    custom_pipeline: str | None = None
    # a diffusers scheduler class loaded from the folder's scheduler/; None = as saved
    scheduler: str | None = None
    # field -> where its value comes from (`presets show`); a derived preset inherits those it does not change
    sources: Mapping[str, str] = field(
        default_factory=dict, compare=False, repr=False, metadata={"setting": False}
    )

    OVERRIDES: ClassVar[dict[str, Override]] = RECON_OVERRIDES

    def __post_init__(self) -> None:
        readers = RECON_OVERRIDES["image_reader"].choices
        if self.image_reader not in readers:
            raise ValueError(f"image_reader must be one of {', '.join(readers)}, got {self.image_reader!r}")


# Where each value comes from. "authors' code" is github.com/hhu-czy/ReconScore
# (scripts/image_generator.py, batch_generate.py, batch_evaluate.py).
_SEC52 = "the ReconScore paper Sec. 5.2: 'denoising steps to 28 for all T2I models'"
_TOKENS = "the ReconScore paper Sec. 5.2 and Table 9 (M. T. = 512 tokens)"
_GEN = "authors' code scripts/image_generator.py"
_SILENT = "not stated in the ReconScore paper"
PAPER_SOURCES: dict[str, str] = {
    "t2i_model": "the ReconScore paper Sec. 3.2 and Table 9 (Z-Image); authors' README (huggingface.co/Tongyi-MAI/Z-Image)",
    "t2i_revision": f"{_SILENT}; the hub's default branch",
    "steps": f"{_SEC52}; authors' code batch_generate.py --steps 28",
    "guidance_scale": f"{_GEN} generate_image(guidance_scale=0.0); {_SILENT}",
    "max_sequence_length": f"{_TOKENS}; ZImagePipeline's default (the authors' code does not pass it)",
    "seed": "the ReconScore paper Sec. 5.2 ('fixed random seeds'); authors' code batch_generate.py --seed 42",
    "max_side": f"the ReconScore paper Sec. 5.2 (maximum dimension capped at 1024); {_GEN} max_side=1024",
    "size_multiple": f"{_GEN} get_closest_multiple_of_16",
    "size_rounding": f"{_GEN}: int(round(side / 16) * 16), Python's round",
    "encoder": "the ReconScore paper Sec. 3.3 (DreamSim); authors' code batch_evaluate.py dreamsim(pretrained=True) = ensemble",
    "dtype": "authors' code batch_generate.py (bfloat16 on CUDA, float32 on CPU)",
    "vae_tiling": "authors' code batch_generate.py pipe.vae.enable_tiling()",
    "prompt_template": f"{_GEN} generate_image (verbatim); the ReconScore paper Table 1(a)",
    "collapse_whitespace": f"{_GEN} concatenates the caption as given",
    "image_reader": "authors' code scripts/similarity_evaluator.py Image.open(path).convert('RGB') (8-bit files; "
    "no EXIF rotation, alpha dropped); other layouts by recon_score.images' rules (docs/images.md)",
    "render_round_trip": "authors' code batch_generate.py saves the render as {stem}_n.{original extension} "
    "(PIL's defaults: JPEG quality 75) and batch_evaluate.py reads that file back",
    "custom_pipeline": "authors' code batch_generate.py ZImagePipeline.from_pretrained (diffusers' own class)",
    "scheduler": "authors' code batch_generate.py (the scheduler saved with the model)",
}

PAPER = ReconPreset(
    name="paper",
    description="The ReconScore paper protocol as the authors' code runs it: Z-Image, 28 steps, guidance 0.0, 512 tokens, "
    "seed 42, long side <= 1024, nearest multiple of 16, DreamSim ensemble, bf16, VAE tiling, perspective prompt, "
    "raw captions.",
    t2i_model="Tongyi-MAI/Z-Image",
    t2i_revision=None,
    steps=28,
    guidance_scale=0.0,
    max_sequence_length=512,
    seed=42,
    max_side=1024,
    size_multiple=16,
    size_rounding="nearest",
    encoder="dreamsim:ensemble",
    dtype="bfloat16",
    vae_tiling=True,
    prompt_template=PERSPECTIVE_TEMPLATE,
    collapse_whitespace=False,
    image_reader="pil",
    render_round_trip=True,
    sources=PAPER_SOURCES,
)
_T9 = "the ReconScore paper Table 9"


def _derive(base: ReconPreset, sources: dict[str, str], **values) -> ReconPreset:
    """`base` with some values changed, and the sources of those that are said anew."""
    return dataclasses.replace(base, sources={**base.sources, **sources}, **values)


FAST = _derive(
    PAPER,
    {
        "t2i_model": "not in the ReconScore paper: the distilled Z-Image-Turbo (huggingface.co/Tongyi-MAI/Z-Image-Turbo)",
        "steps": "Z-Image-Turbo model card (9 steps = 8 DiT evaluations)",
    },
    name="fast",
    description="Z-Image-Turbo (distilled), 9 steps (8 DiT evaluations), guidance 0.0 as its model card "
    "recommends; everything else as `paper`. Not a setting of the ReconScore paper: scores are not comparable with `paper`.",
    t2i_model="Tongyi-MAI/Z-Image-Turbo",
    steps=9,
)


# The ReconScore paper Table 9: the T2I ablation (Sec. 5.2 fixes 28 steps and 512 tokens for every T2I model).
def _table9_flux(name: str, label: str, t2i_model: str, guidance: float, pipeline: str) -> ReconPreset:
    """A FLUX model of Table 9 at the paper's 28 steps and 512 tokens, guidance as its diffusers pipeline's
    default (the paper gives none)."""
    return _derive(
        PAPER,
        {
            "t2i_model": f"{_T9} {label} (huggingface.co/{t2i_model})",
            "guidance_scale": f"{_SILENT}; {pipeline}'s default ({guidance:.1f})",
        },
        name=name,
        description=f"{label} ({_T9}): 28 steps, 512 tokens, guidance {guidance:.1f} ({pipeline}'s default).",
        t2i_model=t2i_model,
        guidance_scale=guidance,
    )


FLUX1_DEV = _table9_flux("flux1-dev", "FLUX.1 [dev]", "black-forest-labs/FLUX.1-dev", 3.5, "FluxPipeline")
FLUX2_DEV = _table9_flux("flux2-dev", "FLUX.2 [dev]", "black-forest-labs/FLUX.2-dev", 4.0, "Flux2Pipeline")

FLUX2_KLEIN = _derive(
    PAPER,
    {
        "t2i_model": f"{_T9} FLUX.2 [klein] 4B (huggingface.co/black-forest-labs/FLUX.2-klein-4B)",
        "guidance_scale": f"{_SILENT}; the distilled model card's 1.0 (no classifier-free guidance)",
    },
    name="flux2-klein",
    description="FLUX.2 [klein] 4B (the ReconScore paper Table 9): 28 steps, 512 tokens, guidance 1.0 (the distilled "
    "model's setting; Flux2KleinPipeline ignores guidance for distilled checkpoints).",
    t2i_model="black-forest-labs/FLUX.2-klein-4B",
    guidance_scale=1.0,
)

FLUX2_KLEIN_FAST = _derive(
    FLUX2_KLEIN,
    {
        "steps": "FLUX.2 [klein] model card (4-step distilled); not the ReconScore paper, which runs 28",
        "guidance_scale": "FLUX.2 [klein] model card (1.0)",
    },
    name="flux2-klein-fast",
    description="FLUX.2 [klein] 4B with its distilled 4-step setting (model card), guidance 1.0. Not the ReconScore paper's "
    "setting: scores are not comparable with `flux2-klein`.",
    steps=4,
)

TEXT2EARTH = _derive(
    PAPER,
    {
        "t2i_model": f"{_T9} Text2Earth; released as huggingface.co/lcybuaa/Text2Earth (its GitHub README)",
        "max_sequence_length": f"{_T9} (M. T. = 77): the CLIP tokenizer's own limit, the pipeline takes no "
        "max_sequence_length",
        "guidance_scale": f"{_SILENT}; Text2Earth README example (4.0)",
        "dtype": "Text2Earth README (torch_dtype=torch.float16)",
        "vae_tiling": "Text2Earth README (no enable_tiling)",
        "custom_pipeline": "Text2Earth README (custom_pipeline='pipeline_text2earth_diffusion', safety_checker=None)",
        "scheduler": "Text2Earth README (EulerDiscreteScheduler.from_pretrained(model_id, subfolder='scheduler'))",
    },
    name="text2earth",
    description="Text2Earth (the ReconScore paper, Table 9; Liu et al. 2025): a Stable-Diffusion-format "
    "remote-sensing model, CLIP text encoder with a 77-token limit (longer prompts are truncated and "
    "flagged), 28 steps, guidance 4.0 (its README). Its README loads it with "
    "custom_pipeline='pipeline_text2earth_diffusion' and an EulerDiscreteScheduler in float16, and so "
    "does this preset: the pipeline file is remote code, run only with --trust-remote-code.",
    t2i_model="lcybuaa/Text2Earth",
    max_sequence_length=None,
    guidance_scale=4.0,
    dtype="float16",
    vae_tiling=False,
    custom_pipeline="pipeline_text2earth_diffusion",
    scheduler="EulerDiscreteScheduler",
)

SMOKE = _derive(
    PAPER,
    {
        "t2i_model": "offline fixture (tiny random ZImagePipeline)",
        "steps": "smoke: fewer steps, same code path",
        "max_side": "smoke: small renders, same code path",
        "encoder": "offline fixture (DreamSim-shaped tiny ensemble)",
        "dtype": "smoke: float32 on every device",
    },
    name="smoke",
    description="Tiny random offline models through the same code path as `paper` (ZImagePipeline + a "
    "DreamSim-shaped encoder); 4 steps, float32, long side <= 256. Numbers are meaningless; use it to check an "
    "install, a pipeline or a data layout.",
    t2i_model="smoke:z-image",
    steps=4,
    max_side=256,
    encoder="smoke:dreamsim",
    dtype="float32",
    meaningless=True,
)

PRESETS: Registry[ReconPreset] = Registry(
    "preset",
    (PAPER, FAST, FLUX1_DEV, FLUX2_DEV, FLUX2_KLEIN, FLUX2_KLEIN_FAST, TEXT2EARTH, SMOKE),
    see="`reconscore presets list` describes them.",
)


def format_preset(preset: ReconPreset) -> str:
    """`key: value  # source` lines (YAML with comments): every value exactly as it runs, and where it is from."""
    sources = preset.sources
    lines = []
    for key, value in sorted(preset.to_dict().items()):
        text = value if isinstance(value, str) and value.replace("-", "").replace("_", "").isalnum() else None
        text = text if text is not None else json.dumps(value)
        lines.append(f"{key}: {text}" + (f"  # {sources[key]}" if key in sources else ""))
    return "\n".join(lines)


SMOKE_NOTE = "smoke preset: tiny random models, these numbers are meaningless"


def get_preset(name: str) -> ReconPreset:
    return PRESETS[name]


def reader_for(preset=None) -> str:
    """The one place a command's image reader is resolved: its ReconScore preset's (a `ReconPreset` or a name)
    `image_reader`, or DEFAULT_READER where there is none, so one image, caption and preset give one score
    whatever the command."""
    if preset is None:
        from recon_score.images import DEFAULT_READER

        return DEFAULT_READER
    if isinstance(preset, str):
        preset = get_preset(preset)
    return preset.image_reader
