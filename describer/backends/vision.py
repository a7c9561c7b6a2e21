"""How an image becomes the pixels a VLM sees: `qwen-vl-utils` (the authors' `process_vision_info` on the image
file's path, as `RemoteDescriber.py` does) or `direct`. See docs/describer.md, "What the VLM sees and what it
writes"."""

from __future__ import annotations

import logging
from pathlib import Path

from PIL import Image

from recon_score.errors import ReconScoreError

log = logging.getLogger(__name__)

IMAGE_INPUTS = ("qwen-vl-utils", "direct")
# process_vision_info's default, which RemoteDescriber.py keeps
AUTHORS_IMAGE_PATCH_SIZE = 14


def check_image_input(mode: str) -> None:
    """Fail now, before any model loads, when `mode` is unknown or its package is missing."""
    if mode not in IMAGE_INPUTS:
        raise ReconScoreError(f"unknown VLM image input {mode!r}; choose one of {', '.join(IMAGE_INPUTS)}")
    if mode == "qwen-vl-utils":
        _qwen_vl_utils()


def _qwen_vl_utils():
    try:
        import qwen_vl_utils
    except ImportError as err:
        raise ReconScoreError(
            "the VLM image input 'qwen-vl-utils' (the paper preset's: the authors' preprocessing) needs the "
            "qwen-vl-utils package: pip install 'reconscore[qwen]' (or pip install qwen-vl-utils); "
            "--vlm-image-input direct hands images to the processor as read instead"
        ) from err
    return qwen_vl_utils


def image_input_identity(mode: str) -> dict:
    """What run.json records about the image input (the package's version for qwen-vl-utils)."""
    if mode != "qwen-vl-utils":
        return {"mode": mode}
    from importlib.metadata import version

    _qwen_vl_utils()
    return {
        "mode": mode,
        "qwen_vl_utils": version("qwen-vl-utils"),
        "image_patch_size": AUTHORS_IMAGE_PATCH_SIZE,
    }


def vlm_images(requests: list, mode: str, prompt: str) -> list[Image.Image]:
    """The images the VLM's processor receives, one per request (describer.backends.base.CaptionRequest)."""
    if mode == "direct":
        return [r.image for r in requests]
    check_image_input(mode)
    out = []
    for r in requests:  # the authors' message, one image per conversation
        image = None
        if r.path is not None:
            try:  # an absolute path: never read as a URL or a data URL by fetch_image
                image = _process_vision_info(str(Path(r.path).absolute()), prompt)
            except OSError as err:  # PIL cannot open the file: the project's read instead
                log.warning("%s: PIL cannot open it (%s); the VLM gets the project's read", r.path, err)
        out.append(image if image is not None else _process_vision_info(r.image, prompt))
    return out


def _process_vision_info(image, prompt: str) -> Image.Image:
    messages = [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}
    ]
    image_inputs, _ = _qwen_vl_utils().process_vision_info(
        messages, image_patch_size=AUTHORS_IMAGE_PATCH_SIZE
    )
    return image_inputs[0]
