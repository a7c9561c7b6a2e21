"""Learned composition methods of seed 000 (Pic2Word, SEARLE, CompoDiff, MagicLens). They need their released
checkpoints and model-specific inference (Pic2Word and SEARLE inject a pseudo-token into the text tower,
CompoDiff runs a diffusion prior, MagicLens adds its own attention head), none of which reconscore implements
yet. They are listed so that `reconscore retrieve --methods` can name them, and always report themselves as
unavailable: with a checkpoint path they say it was found but not used. Nothing is faked.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.errors import MethodUnavailableError
from retrieval.methods.base import Method, MethodContext, Prepared, Resources

# name -> (paper, where the released weights are, what inference needs)
RELEASES = {
    "pic2word": (
        "Saito et al., CVPR 2023",
        "google-research/composed_image_retrieval (pic2word_model.pt)",
        "an image-to-token MLP whose output replaces a token embedding inside the CLIP text tower",
    ),
    "searle": (
        "Baldrati et al., ICCV 2023",
        "miccunifi/SEARLE (searle ViT-L/14 phi checkpoint)",
        "a textual-inversion network (or 200 test-time optimisation steps) feeding a pseudo-token to the text tower",
    ),
    "compodiff": (
        "Gu et al., TMLR 2024",
        "navervision/CompoDiff (compodiff ViT-L/14)",
        "a diffusion prior in CLIP space (10 steps, source weight 0.4 in seed 000)",
    ),
    "magiclens": (
        "Zhang et al., ICML 2024",
        "google-deepmind/magiclens (ViT-L/14 checkpoint)",
        "its multimodal attention head over CLIP features",
    ),
}


@dataclass(frozen=True)
class LearnedConfig:
    """Checkpoints are given per run (--checkpoint NAME=PATH), not as hyperparameters."""


class Learned(Method):
    config_cls = LearnedConfig

    def __init__(self, config: LearnedConfig | None = None, *, name: str = "pic2word"):
        super().__init__(config)
        self.name = name

    def missing(self, r: Resources) -> list[str]:
        paper, where, needs = RELEASES[self.name]
        path = r.checkpoints.get(self.name)
        if path is None:
            return [f"its released checkpoint ({where}; {paper}), given with --checkpoint {self.name}=PATH"]
        if not path.exists():
            return [f"its checkpoint, but {path} does not exist"]
        return [
            f"inference code reconscore does not implement yet ({needs}); the checkpoint at {path} is unused"
        ]

    def fix_hint(self) -> str:
        return "Learned methods are listed, not faked; run the training-free methods meanwhile."

    def prepare(self, ctx: MethodContext) -> Prepared:
        raise MethodUnavailableError(
            self.name, "it needs " + "; ".join(self.missing(ctx.resources)), self.fix_hint()
        )


def learned(name: str):
    """Factory for the registry: one Learned class per released method."""

    def build(config: LearnedConfig | None = None) -> Learned:
        return Learned(config, name=name)

    build.config_cls = LearnedConfig
    return build
