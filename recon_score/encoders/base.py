"""The contract every image/text encoder in reconscore fulfils.

Two kinds: embedding encoders (DreamSim, CLIP-likes, DINO) map items to L2-normalised vectors, so similarity is a
dot product and embeddings can be cached and indexed; distance encoders (LPIPS) only compare aligned pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from PIL import Image


@dataclass(frozen=True)
class EncoderInfo:
    spec: str
    kind: Literal["embedding", "distance"]
    modalities: tuple[str, ...]  # ("image",), ("image", "text") or ("text",)
    source: str  # where the weights came from: a path, a hub id@revision, or "fixture (random weights)"
    dim: int | None = None
    notes: str = ""
    # what else changes the embeddings, e.g. {"activation": "quick_gelu"}
    extra: dict = field(default_factory=dict)

    def identity(self) -> dict:
        """Everything that determines the embeddings: for run.json and embedding cache keys."""
        return {"spec": self.spec, "kind": self.kind, "source": self.source, "dim": self.dim, **self.extra}


Box = tuple[float, float, float, float]
FULL_BOX: Box = (0.0, 0.0, 1.0, 1.0)


@dataclass
class PatchGrid:
    """One vision tower's last-layer patch tokens, (n, rows, cols, d) float32 on CPU, and for each image the part
    of it the grid covers, as fractions (x0, y0, x1, y1): all of it for a squash, less for a centre crop."""

    tokens: torch.Tensor
    boxes: list[Box]


def centre_crop_box(resized: tuple[float, float], crop: tuple[int, int] | None) -> Box:
    """The fractions of an image, resized to `resized` (w, h), that a centre crop of `crop` (w, h) keeps (the
    CLIP-style preprocessing); no crop keeps everything."""
    if crop is None:
        return FULL_BOX
    sw, sh = resized
    cw, ch = min(crop[0], sw), min(crop[1], sh)
    x0, y0 = (sw - cw) / 2 / sw, (sh - ch) / 2 / sh
    return (x0, y0, x0 + cw / sw, y0 + ch / sh)


def shorter_side(width: int, height: int, side: int) -> tuple[float, float]:
    """(w, h) after resizing the shorter side to `side`, the aspect ratio kept."""
    scale = side / min(width, height)
    return width * scale, height * scale


def token_grid(tokens: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """(n, T, d) tokens whose last rows*cols are the patches in raster order (CLS and register tokens come first
    in every ViT here) -> (n, rows, cols, d) float32 on CPU."""
    patches = tokens[:, tokens.shape[1] - rows * cols :]
    return patches.reshape(tokens.shape[0], rows, cols, -1).float().cpu()


class Encoder:
    """Base class. Subclasses implement `_embed_images` / `_embed_texts`, or `_pair_distance` (distance kind)."""

    info: EncoderInfo
    device: torch.device
    batch_size: int = 32

    # -- embedding API ---------------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def has_images(self) -> bool:
        return "image" in self.info.modalities

    @property
    def has_texts(self) -> bool:
        return "text" in self.info.modalities

    @torch.inference_mode()
    def encode_images(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None, normalize: bool = True
    ) -> torch.Tensor:
        """(n, d) float32 on CPU, rows L2-normalised unless `normalize=False` (the raw tower output, which
        textual-inversion networks such as Pic2Word's and SEARLE's were trained on)."""
        if not self.has_images or self.kind != "embedding":
            raise TypeError(f"encoder {self.info.spec!r} does not embed images (kind={self.kind})")
        return self._batched(self._embed_images, list(images), batch_size, normalize=normalize)

    @torch.inference_mode()
    def encode_texts(self, texts: Sequence[str], *, batch_size: int | None = None) -> torch.Tensor:
        """(n, d) float32 on CPU, rows L2-normalised."""
        if not self.has_texts:
            raise TypeError(
                f"encoder {self.info.spec!r} does not embed text; image-only encoders cannot score text"
            )
        return self._batched(self._embed_texts, list(texts), batch_size)

    def _batched(self, fn, items: list, batch_size: int | None, *, normalize: bool = True) -> torch.Tensor:
        bs = batch_size or self.batch_size
        if not items:
            return torch.zeros(0, self.info.dim or 0)
        out = torch.cat([fn(items[i : i + bs]).float().cpu() for i in range(0, len(items), bs)])
        return F.normalize(out, dim=-1) if normalize else out

    # -- pairwise API (both kinds) ----------------------------------------------------------------------------
    @torch.inference_mode()
    def pair_distance(self, a: Sequence[Image.Image], b: Sequence[Image.Image]) -> torch.Tensor:
        """(n,) distance of aligned pairs: 1 - cos for embedding encoders (DreamSim's d), LPIPS for distances."""
        if len(a) != len(b):
            raise ValueError(f"expected as many images in a as in b, got {len(a)} and {len(b)}")
        if self.kind == "embedding":
            return 1.0 - (self.encode_images(a) * self.encode_images(b)).sum(-1)
        bs = self.batch_size
        out = [
            self._pair_distance(list(a[i : i + bs]), list(b[i : i + bs])).float().cpu()
            for i in range(0, len(a), bs)
        ]
        return torch.cat(out) if out else torch.zeros(0)

    # -- patch tokens (gap maps) ------------------------------------------------------------------------------
    @property
    def has_patch_tokens(self) -> bool:
        """Whether `encode_images_and_patches` works: the encoder declares it (a ViT tower whose last-layer
        patch tokens it can read), so callers ask instead of trying."""
        return False

    @property
    def no_patch_tokens_note(self) -> str:
        return (
            f"encoder {self.info.spec!r} has no patch tokens: gap maps need a ViT encoder (DreamSim, open_clip, "
            "HF CLIP/SigLIP/DINO); phrase attributions still work"
        )

    @torch.inference_mode()
    def encode_images_and_patches(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> tuple[torch.Tensor, list[PatchGrid]]:
        """The embeddings `encode_images` gives (the same batches, the same values) and one PatchGrid per vision
        tower (DreamSim's ensemble has three), both from one forward pass per batch."""
        if not self.has_patch_tokens:
            raise TypeError(self.no_patch_tokens_note)
        if not images:
            raise ValueError("no images to encode")
        items, bs = list(images), batch_size or self.batch_size
        embs, grids = [], []
        for i in range(0, len(items), bs):
            emb, towers = self._embed_with_patches(items[i : i + bs])
            embs.append(emb.float().cpu())
            grids.append(towers)
        merged = [
            PatchGrid(torch.cat([g[t].tokens for g in grids]), [b for g in grids for b in g[t].boxes])
            for t in range(len(grids[0]))
        ]
        return F.normalize(torch.cat(embs), dim=-1), merged

    # -- to implement -----------------------------------------------------------------------------------------
    def _embed_images(self, images: list[Image.Image]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement image embedding")

    def _embed_texts(self, texts: list[str]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement text embedding")

    def _pair_distance(self, a: list[Image.Image], b: list[Image.Image]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement pairwise distance")

    def _embed_with_patches(self, images: list[Image.Image]) -> tuple[torch.Tensor, list[PatchGrid]]:
        """(n, d) raw embeddings as `_embed_images` gives them and the towers' patch grids, one forward pass."""
        raise NotImplementedError(f"{type(self).__name__} does not implement patch tokens")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.spec!r}, device={self.device})"


class SquashingEncoder(Encoder):
    """A torch model fed every image squashed to `size` x `size` (bicubic, aspect ratio not kept) as a [0, 1]
    tensor: DreamSim's fixed-size input, which LPIPS mirrors."""

    def __init__(self, model: torch.nn.Module, info: EncoderInfo, device: str, *, size: int, batch_size: int):
        from torchvision import transforms

        self.model = model.to(device).eval().requires_grad_(False)
        self.info, self.device = info, torch.device(device)
        self.batch_size = batch_size
        self.transform = transforms.Compose(
            [
                transforms.Resize((size, size), interpolation=transforms.InterpolationMode.BICUBIC),
                transforms.ToTensor(),
            ]
        )

    def _pixels(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """(n, 3, size, size) in [0, 1] on the model's device."""
        return torch.stack([self.transform(im.convert("RGB")) for im in images]).to(self.device)
