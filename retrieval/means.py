"""Centring means shipped with the package (BASIC's LAION-1M image mean), matched to the encoder that made them;
read with ``np.load(allow_pickle=False)``. assets/PROVENANCE.md says where each comes from."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch


@dataclass(frozen=True)
class BundledMean:
    file: str
    specs: tuple[str, ...]  # encoder specs of the model the mean was computed with
    dim: int
    source: str


LAION_1M_CLIP_L14 = BundledMean(
    file="laion_1m_mean_clip_vit_l14_openai.npy",
    specs=(
        "open_clip:ViT-L-14/openai",
        "open_clip:ViT-L-14-quickgelu/openai",
        "hf:openai/clip-vit-large-patch14",
    ),
    dim=768,
    source="LAION-1M image mean of OpenAI CLIP ViT-L/14, billpsomas/icir data/laion_mean (MIT), commit 463cc1d",
)
IMAGE_MEANS = (LAION_1M_CLIP_L14,)


def load_bundled(mean: BundledMean) -> torch.Tensor:
    with resources.as_file(resources.files("retrieval") / "assets" / mean.file) as path:
        arr = np.load(path, allow_pickle=False)
    if arr.shape != (mean.dim,) or arr.dtype != np.float32:
        raise ValueError(
            f"bundled mean {mean.file}: expected float32 ({mean.dim},), got {arr.dtype} {arr.shape}"
        )
    return torch.from_numpy(arr.copy())


def bundled_image_mean(spec: str, dim: int | None) -> tuple[torch.Tensor, str] | None:
    """The bundled image mean for encoder `spec` (and its embedding size), with its provenance; None if none
    matches (BASIC then falls back to the database mean and says so in run.json)."""
    for mean in IMAGE_MEANS:
        if spec in mean.specs and dim in (None, mean.dim):
            return load_bundled(mean), mean.source
    return None
