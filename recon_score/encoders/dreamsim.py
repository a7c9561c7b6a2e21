"""DreamSim encoders (the ReconScore default, the ReconScore paper Sec. 3.3).

DreamSim's own preprocessing is kept (bicubic squash to 224x224, per-backbone normalisation inside the model,
embeddings centred and L2-normalised), so cos(a, b) = 1 - DreamSim distance. Its weights folder (also the
torch.hub dir): docs/protocol.md, "DreamSim offline layout"; checked by recon_score.encoders.dreamsim_files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from recon_score.encoders.base import FULL_BOX, Encoder, EncoderInfo, PatchGrid, SquashingEncoder, token_grid
from recon_score.encoders.dreamsim_files import dreamsim_dir, missing_files
from recon_score.errors import ModelNotAvailableError
from recon_score.hub import ResolvedModel, is_offline


class DreamSimEncoder(SquashingEncoder):
    def __init__(self, model: torch.nn.Module, info: EncoderInfo, device: str, img_size: int = 224):
        super().__init__(model, info, device, size=img_size, batch_size=32)

    def _embed_images(self, images):
        x = self._pixels(images)
        emb = self.model.embed(x)
        return emb.reshape(len(images), -1)

    @property
    def has_patch_tokens(self) -> bool:
        if hasattr(self.model, "embed_and_patch_tokens"):  # the tiny smoke ensemble
            return True
        try:
            return all(len(e.model.blocks) > 11 for e in perceptual_model(self.model).extractor_list)
        except (TypeError, AttributeError):
            return False

    def _embed_with_patches(self, images):
        """The embedding and each tower's block-11 patch tokens (where DreamSim's features come from, as its
        `extract_descriptors(x, 11)`) from the one `embed` call, kept by forward hooks. The input is squashed, so
        every grid covers the whole image."""
        x, boxes = self._pixels(images), [FULL_BOX] * len(images)
        if hasattr(self.model, "embed_and_patch_tokens"):
            emb, towers = self.model.embed_and_patch_tokens(x)
            return emb.reshape(len(images), -1), [
                PatchGrid(token_grid(t, r, c), boxes) for t, (r, c) in towers
            ]
        inner = perceptual_model(self.model)
        kept: list[list[torch.Tensor]] = [[] for _ in inner.extractor_list]
        hooks = [
            e.model.blocks[11].register_forward_hook(lambda _m, _i, out, n=n: kept[n].append(out))
            for n, e in enumerate(inner.extractor_list)
        ]
        try:
            emb = self.model.embed(x).reshape(len(images), -1)
        finally:
            for h in hooks:
                h.remove()
        grids = []
        for out, extractor in zip(kept, inner.extractor_list):
            if len(out) != 1:
                raise RuntimeError(f"expected one block-11 output per tower and call, got {len(out)}")
            rows, cols = _grid_shape(extractor, x.shape[-2], x.shape[-1])
            tokens = out[0].reshape(len(images), out[0].shape[-2], -1)
            grids.append(PatchGrid(token_grid(tokens, rows, cols), boxes))
        return emb, grids


def _grid_shape(extractor, height: int, width: int) -> tuple[int, int]:
    """The patch grid of a dreamsim ViTExtractor on an H x W input: the `num_patches` its `_extract_features`
    computes (which a plain forward does not set)."""
    return 1 + (height - extractor.p) // extractor.stride[0], 1 + (width - extractor.p) // extractor.stride[1]


def perceptual_model(model: torch.nn.Module) -> torch.nn.Module:
    """dreamsim's PerceptualModel inside what `dreamsim()` returns (the ensemble comes wrapped in a peft
    PeftModel -> LoraModel -> PerceptualModel)."""
    for cand in (model, getattr(getattr(model, "base_model", None), "model", None)):
        if cand is not None and hasattr(cand, "extractor_list"):
            return cand
    raise TypeError(f"{type(model).__name__} holds no DreamSim towers")


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    """`name` is one of REQUIRED: encoders.parse_spec checks the family's closed list before any build."""
    cache_dir = dreamsim_dir(weights_dir)
    missing = missing_files(name, cache_dir)
    fix = (
        f"Put DreamSim's unzipped release files for {name!r} there (from "
        "https://github.com/ssundaram21/dreamsim/releases, plus the torch-hub repo folders), "
        "set RECONSCORE_WEIGHTS=DIR (files in DIR/dreamsim), or pass --weights-dir DIR. "
        "`reconscore models check dreamsim:NAME` lists every file."
    )

    def unavailable(reason: str) -> ModelNotAvailableError:
        return ModelNotAvailableError(f"dreamsim:{name}", searched=[str(cache_dir)], fix=fix, reason=reason)

    if missing and is_offline():
        raise unavailable(f"missing {', '.join(missing)}; HF_HUB_OFFLINE=1 is set, so nothing was downloaded")
    try:
        from dreamsim import dreamsim as load_dreamsim

        cache_dir.mkdir(parents=True, exist_ok=True)
        model, _ = load_dreamsim(
            pretrained=True,
            device=device,
            cache_dir=str(cache_dir),
            normalize_embeds=True,
            dreamsim_type=name,
        )
    except Exception as err:  # network errors, torch.hub errors, partial zips
        raise unavailable(f"{type(err).__name__}: {err}"[:400]) from err
    dims = {
        "ensemble": 1792,
        "dino_vitb16": 768,
        "dinov2_vitb14": 768,
        "open_clip_vitb32": 512,
        "clip_vitb32": 512,
    }
    info = EncoderInfo(
        spec=f"dreamsim:{name}",
        kind="embedding",
        modalities=("image",),
        source=str(cache_dir),
        dim=dims[name],
    )
    return DreamSimEncoder(model, info, device)


def load(model: ResolvedModel, *, device: str) -> Encoder:
    """A synthetic encoder as recon_score.hub resolved it (`smoke:dreamsim`: the tiny DreamSim-shaped ensemble;
    `shapes:dreamsim[@SCALE]`: dreamsim's own ensemble model with random weights), built on the device."""
    net = model.build(device=device)
    dim = getattr(net, "embed_dim", None)  # the tiny ensemble says; dreamsim's PerceptualModel does not
    info = EncoderInfo(spec=model.name, kind="embedding", modalities=("image",), source=model.source, dim=dim)
    return DreamSimEncoder(net, info, device)
