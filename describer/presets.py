"""Named describer configurations (captioner + sampling + the ReconScore preset used for selection)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from describer.backends import BACKENDS
from describer.prompts import GUIDELINE_PROMPT, PROMPTS, load_prompt
from recon_score.presets import PRESETS, Override, PresetMixin
from recon_score.registry import Registry
from recon_score.runtime import DTYPES

EVAL_CANDIDATES = ("selected", "all")  # held-out render for the chosen caption only, or for every candidate

DESCRIBER_OVERRIDES = {
    "captioner": Override("VLM hub id or local folder (openai backend: the served model name)."),
    "captioner_revision": Override("Hub revision of the VLM."),
    "backend": Override("Captioner backend.", choices=tuple(BACKENDS)),
    "prompt": Override(
        f"A prompt name ({', '.join(PROMPTS)}; paper: the authors' guideline), a text file, or the prompt text.",
        parse=load_prompt,
    ),
    "n": Override("Candidates per image.", min=1),
    "temperature": Override("Sampling temperature.", min=0),
    "top_p": Override("Nucleus sampling.", min=0),
    "max_new_tokens": Override("New tokens per candidate at most.", min=1),
    "seed": Override("Sampling seed (per image: derived from it and the pixels)."),
    "dtype": Override("VLM dtype on GPU (CPU runs use float32).", choices=DTYPES),
    "recon_preset": Override("ReconScore preset of the selection renders.", choices=tuple(PRESETS)),
    "select_by": Override(
        "Selection metric, a `reconscore metrics list` name. Reference-based metrics use the `references` of a "
        ".jsonl list."
    ),
    "top_k": Override("Top-k filter, 0 = off.", min=0),
    "repetition_penalty": Override("1 = off.", min=0, min_open=True),
    "selection_seed": Override("T2I seed of the selection renders (must differ from --eval-seed)."),
    "selection_seeds": Override(
        "K: a candidate's selection score is its mean over K seeds (K x the renders).", min=1
    ),
    "eval_seed": Override("T2I seed of the held-out render that scores the chosen caption."),
    "eval_candidates": Override(
        "Held-out render for the chosen caption only, or for every candidate (`study n-sweep`).",
        choices=EVAL_CANDIDATES,
    ),
    "vlm_image_input": Override(
        "How images reach the VLM: through qwen-vl-utils' process_vision_info, as the authors do, or as read.",
        choices=("qwen-vl-utils", "direct"),  # describer.backends.vision.IMAGE_INPUTS (kept light for --help)
    ),
    "collapse_whitespace": Override(
        "Join whitespace runs in generated captions (a variant; the authors keep the text as generated)."
    ),
}


@dataclass(frozen=True)
class DescriberPreset(PresetMixin):
    name: str
    description: str
    captioner: str  # hub id, local folder or smoke:NAME
    captioner_revision: str | None
    backend: str  # transformers | vllm | openai
    prompt: str
    n: int
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int  # sampling seed; each image's seed is derived from it and the image's pixels
    dtype: str  # VLM dtype on GPU (CPU runs use float32)
    recon_preset: str  # ReconScore preset for selection by reconstruction
    select_by: str  # default selection metric
    top_k: int  # 0 = off; see describer.backends.sampling
    repetition_penalty: float  # 1.0 = off
    selection_seed: int  # T2I seed of the selection renders (must differ from eval_seed)
    selection_seeds: int  # K: a candidate's selection score is its mean over K seeds
    eval_seed: int  # T2I seed of the held-out render that scores the chosen caption (the authors': 42)
    eval_candidates: str  # EVAL_CANDIDATES
    vlm_image_input: str  # describer.backends.vision.IMAGE_INPUTS
    collapse_whitespace: bool  # join whitespace runs in generated captions (a variant; the authors keep them)
    meaningless: bool = False

    OVERRIDES: ClassVar[dict[str, Override]] = DESCRIBER_OVERRIDES


PAPER = DescriberPreset(
    name="paper",
    description="RemoteDescriber as in the ReconScore paper: Qwen3-VL-8B-Instruct, the authors' guideline prompt, "
    "N=10, temperature 0.8, top_p 0.9, top_k 20 (inherited from the checkpoint in the authors' code), "
    "up to 512 new tokens; images through qwen-vl-utils' process_vision_info and captions kept as "
    "generated, as in the authors' RemoteDescriber.py; best candidate by ReconScore (paper preset), "
    "every candidate of an image rendered with one selection seed (0); the chosen caption scored by "
    "an independent render with seed 42, as the authors' batch_generate.py/batch_evaluate.py do.",
    captioner="Qwen/Qwen3-VL-8B-Instruct",
    captioner_revision=None,
    backend="transformers",
    prompt=GUIDELINE_PROMPT,
    n=10,
    temperature=0.8,
    top_p=0.9,
    max_new_tokens=512,
    seed=0,
    dtype="bfloat16",
    recon_preset="paper",
    select_by="recon_score",
    # the authors called transformers' generate with temperature/top_p only, so Qwen3-VL-8B-Instruct's
    # generation_config.json supplied top_k 20; it sets no repetition penalty (transformers' default 1.0)
    top_k=20,
    repetition_penalty=1.0,
    selection_seed=0,
    selection_seeds=1,
    eval_seed=42,  # batch_generate.py --seed default, used by run_pipeline.sh for the reported scores
    eval_candidates="selected",
    # RemoteDescriber.py: process_vision_info(messages) before the processor; the decoded text used unchanged
    vlm_image_input="qwen-vl-utils",
    collapse_whitespace=False,
)

FAST = dataclasses.replace(
    PAPER,
    name="fast",
    description="As `paper`, but selection renders with the `fast` ReconScore preset (Z-Image-Turbo, 9 steps).",
    recon_preset="fast",
)

SMOKE = dataclasses.replace(
    PAPER,
    name="smoke",
    description="Tiny random Qwen3-VL + the smoke ReconScore preset, offline; N=3, 24 new tokens. Candidates are "
    "gibberish and numbers meaningless: it checks installs, pipelines and data layouts.",
    captioner="smoke:qwen3-vl",
    n=3,
    max_new_tokens=24,
    dtype="float32",
    recon_preset="smoke",
    meaningless=True,
)

DESCRIBER_PRESETS: Registry[DescriberPreset] = Registry(
    "describer preset", (PAPER, FAST, SMOKE), see="`reconscore presets list` describes them."
)
