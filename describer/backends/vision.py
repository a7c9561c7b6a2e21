"""How an image becomes the pixels a VLM sees.

`qwen-vl-utils` (the `paper` default): the authors' `RemoteDescriber.py` builds a chat message holding the image
and calls `qwen_vl_utils.process_vision_info(messages)`, whose `fetch_image` converts to RGB and resizes the image
to a multiple of the patch-merge size (`smart_resize`) before the processor sees it. They call it with its
default `image_patch_size=14` (Qwen2.5-VL's patch; Qwen3-VL's own is 16), so sides become multiples of 28; the
processor then applies its own resize. The real package does it here, so the pixels are the authors'.

`direct`: the image as read goes straight to the processor (or server), which applies only its own resize.
"""

from __future__ import annotations

from PIL import Image

from recon_score.errors import ReconScoreError

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


def vlm_images(images: list[Image.Image], mode: str, prompt: str) -> list[Image.Image]:
    """The images the VLM's processor receives, one per input image, by `mode` (see the module doc)."""
    if mode == "direct":
        return list(images)
    check_image_input(mode)
    qwen_vl_utils = _qwen_vl_utils()
    out = []
    for image in images:  # the authors' message, one image per conversation
        messages = [
            {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}
        ]
        image_inputs, _ = qwen_vl_utils.process_vision_info(
            messages, image_patch_size=AUTHORS_IMAGE_PATCH_SIZE
        )
        out.extend(image_inputs)
    return out
