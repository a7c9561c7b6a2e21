"""Offline model fixtures, built once per cache and reused: the `smoke:` model names.

`ensure_fixture("z-image")` returns a folder loadable by the same code as the real checkpoint. Builds go to a
temporary sibling folder that is renamed into place, so concurrent processes (accelerate workers, parallel
tests) never see a half-written fixture.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from recon_score.hub import cache_root

# Bump when a builder changes: cached fixtures of another version are ignored.
FIXTURE_VERSION = 1


def _builders() -> dict[str, tuple[Callable[[Path], Path], str]]:
    from recon_score.testing import tiny

    return {
        "z-image": (tiny.build_z_image, "ZImagePipeline: Qwen3 text encoder (hidden 32), DiT dim 64, 8x VAE"),
        "stable-diffusion": (
            tiny.build_stable_diffusion,
            "StableDiffusionPipeline with the real CLIP tokenizer (77 tokens)",
        ),
        "open-clip": (tiny.build_open_clip, "open_clip ViT (width 32) in local-dir layout, real CLIP BPE"),
        "dreamsim": (tiny.build_dreamsim, "DreamSim-shaped ensemble of three tiny ViTs"),
        "hf-clip": (tiny.build_hf_clip, "transformers CLIPModel + CLIPProcessor, real CLIP tokenizer"),
        "hf-dinov2": (tiny.build_hf_dinov2, "transformers Dinov2Model (vision only)"),
        "qwen3-vl": (tiny.build_qwen3_vl, "Qwen3-VL with a byte-level BPE tokenizer trained at build time"),
        "qwen3-text": (
            tiny.build_qwen3_text,
            "Qwen3 causal LM (text only) for the robustness-set generators",
        ),
    }


FIXTURE_NAMES = (
    "z-image",
    "stable-diffusion",
    "open-clip",
    "dreamsim",
    "hf-clip",
    "hf-dinov2",
    "qwen3-vl",
    "qwen3-text",
)


def describe_fixtures() -> dict[str, str]:
    return {name: desc for name, (_, desc) in _builders().items()}


def fixture_path(name: str) -> Path:
    return cache_root() / "fixtures" / f"v{FIXTURE_VERSION}" / name


def ensure_fixture(name: str) -> Path:
    """Folder of fixture `name`, building it on first use."""
    if name not in FIXTURE_NAMES:
        raise KeyError(
            f"unknown fixture {name!r}; known: {', '.join(FIXTURE_NAMES)} (use them as 'smoke:NAME')"
        )
    final = fixture_path(name)
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    builder, _ = _builders()[name]
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    try:
        builder(tmp / "model")
        (tmp / "model" / ".complete").write_text("ok\n")
        try:
            os.rename(tmp / "model", final)
        except OSError:
            if not (final / ".complete").exists():  # someone else's partial folder: replace it
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp / "model", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
