"""transformers encoders, chosen by the checkpoint's config: dual towers (CLIP, SigLIP, ...) through
`get_image_features` / `get_text_features`; vision backbones (DINOv2, DINOv3, ...) by their pooled CLS, as the
DINO papers' global descriptors; text encoders by the attention-masked mean (sentence-transformers' pooling).
Remote code runs only with RECONSCORE_TRUST_REMOTE_CODE=1. See docs/models.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from recon_score.encoders.base import (
    Box,
    Encoder,
    EncoderInfo,
    PatchGrid,
    centre_crop_box,
    shorter_side,
    token_grid,
)
from recon_score.errors import ModelNotAvailableError
from recon_score.hub import ResolvedModel, locate
from recon_score.paths import WeightsLocation

# SigLIP-family text towers were trained on max_length-padded text; other towers use dynamic padding
_MAX_LENGTH_PADDING = ("siglip", "siglip2")


def _trust_remote_code() -> bool:
    return os.environ.get("RECONSCORE_TRUST_REMOTE_CODE", "").lower() in ("1", "true", "yes")


def _features(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if getattr(out, "pooler_output", None) is not None:
        return out.pooler_output
    raise TypeError(f"cannot find pooled features in {type(out).__name__}")


class HFEncoder(Encoder):
    def __init__(
        self, model, *, image_processor, tokenizer, mode: str, model_type: str, info: EncoderInfo, device
    ):
        self.model = model.to(device).eval().requires_grad_(False)
        self.image_processor, self.tokenizer = image_processor, tokenizer
        self.mode, self.model_type = mode, model_type
        self.info, self.device = info, torch.device(device)
        self.batch_size = 32

    def _pixels(self, images) -> dict:
        pixels = self.image_processor(images=[im.convert("RGB") for im in images], return_tensors="pt")
        return {k: v.to(self.device) for k, v in pixels.items()}

    def _embed_images(self, images):
        return self._embed_pixels(self._pixels(images))

    def _embed_pixels(self, pixels: dict):
        if self.mode == "dual":
            return _features(self.model.get_image_features(**pixels))
        out = self.model(**pixels)
        if getattr(out, "pooler_output", None) is not None:
            return out.pooler_output
        return out.last_hidden_state[:, 0]

    @property
    def has_patch_tokens(self) -> bool:
        if self.mode == "text":
            return False
        tower = getattr(self.model, "vision_model", None) if self.mode == "dual" else self.model
        config = getattr(self.model.config, "vision_config", self.model.config)
        return tower is not None and isinstance(getattr(config, "patch_size", None), int)

    def _embed_with_patches(self, images):
        """`_embed_images`' embedding and the vision tower's last-hidden-state patch tokens from one forward (a
        forward hook on the tower keeps its output while the embedding is computed as always)."""
        pixels = self._pixels(images)
        values = pixels["pixel_values"]
        if values.ndim != 4:
            raise TypeError(
                f"{self.info.spec}: pixel values of shape {tuple(values.shape)} make no patch grid"
            )
        tower = self.model.vision_model if self.mode == "dual" else self.model
        kept: list = []
        hook = tower.register_forward_hook(lambda _m, _i, out: kept.append(out.last_hidden_state))
        try:
            emb = self._embed_pixels(pixels)
        finally:
            hook.remove()
        if len(kept) != 1:
            raise RuntimeError(
                f"{self.info.spec}: expected one vision-tower output per call, got {len(kept)}"
            )
        patch = _patch_size(getattr(self.model.config, "vision_config", self.model.config))
        rows, cols = values.shape[-2] // patch, values.shape[-1] // patch
        boxes = [processor_box(self.image_processor, im.width, im.height) for im in images]
        return emb, [PatchGrid(token_grid(kept[0], rows, cols), boxes)]

    def _embed_texts(self, texts):
        padding = "max_length" if self.model_type in _MAX_LENGTH_PADDING else True
        max_length = getattr(self.tokenizer, "model_max_length", 512)
        max_length = max_length if max_length and max_length < 100_000 else 512
        enc = self.tokenizer(
            list(texts), padding=padding, truncation=True, max_length=max_length, return_tensors="pt"
        )
        enc = {k: v.to(self.device) for k, v in enc.items()}
        if self.mode == "dual":
            return _features(self.model.get_text_features(**enc))
        hidden = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def _patch_size(config) -> int:
    size = getattr(config, "patch_size", None)
    if not isinstance(size, int):
        raise TypeError(f"{type(config).__name__} has no integer patch_size: no patch grid to map")
    return size


def processor_box(processor, width: int, height: int) -> Box:
    """The part of a width x height image a transformers image processor keeps: a shortest-edge resize followed
    by a centre crop (CLIP) keeps a centred square, a fixed (height, width) resize (SigLIP) the whole image."""
    size = getattr(processor, "size", None) or {}
    if "shortest_edge" in size:
        resized = shorter_side(width, height, size["shortest_edge"])
    elif "height" in size and "width" in size:
        resized = (float(size["width"]), float(size["height"]))
    else:
        resized = (float(width), float(height))
    crop = getattr(processor, "crop_size", None) if getattr(processor, "do_center_crop", False) else None
    return centre_crop_box(resized, (crop["width"], crop["height"]) if crop else None)


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    from recon_score.hub import resolve_model

    resolved = resolve_model(name, kind="transformers model", option="the hf:PATH spec")
    source = f"{resolved.name}@{resolved.revision} ({resolved.path})"
    return _load(resolved.path, spec=f"hf:{name}", source=source, device=device)


def load(model: ResolvedModel, *, device: str) -> Encoder:
    """A synthetic encoder as recon_score.hub resolved it: a `save_pretrained` folder."""
    return _load(model.path, spec=model.name, source=model.source, device=device)


def _load(folder: Path, *, spec: str, source: str, device: str) -> Encoder:
    from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoProcessor, AutoTokenizer

    path, trust = str(folder), _trust_remote_code()
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        model = AutoModel.from_pretrained(path, trust_remote_code=trust, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ModelNotAvailableError(
            spec,
            searched=[path],
            fix="Check that the folder holds a transformers "
            "checkpoint (config.json + weights); set RECONSCORE_TRUST_REMOTE_CODE=1 only "
            "if it needs custom code you trust.",
            reason=str(err)[:300],
        ) from err
    dual = hasattr(model, "get_image_features") and hasattr(model, "get_text_features")
    has_vision = (
        dual or hasattr(config, "image_size") or getattr(config, "model_type", "").startswith(("dino", "vit"))
    )
    image_processor = tokenizer = None
    if dual:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust)
        image_processor, tokenizer = processor.image_processor, processor.tokenizer
        mode, modalities = "dual", ("image", "text")
    elif has_vision:
        image_processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=trust)
        mode, modalities = "vision", ("image",)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        mode, modalities = "text", ("text",)
    dim = getattr(config, "projection_dim", None) if dual else getattr(config, "hidden_size", None)
    info = EncoderInfo(
        spec=spec,
        kind="embedding",
        modalities=modalities,
        source=source,
        dim=dim,
        extra={"model_type": config.model_type, "mode": mode},
    )
    return HFEncoder(
        model,
        image_processor=image_processor,
        tokenizer=tokenizer,
        mode=mode,
        model_type=config.model_type,
        info=info,
        device=device,
    )


def check(name: str, *, weights_dir: Path | None) -> WeightsLocation:
    return locate(name)
