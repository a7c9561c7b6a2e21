"""ReconScore: caption -> perspective prompt -> T2I reconstruction at the original aspect ratio -> similarity.

    d = 1 - cos(E(original), E(reconstruction))        (DreamSim's distance when E is DreamSim)
    ReconScore = 100 * (1 - d / 2) = 100 * (1 + cos) / 2 (seed 004, Eq. for ReconScore)

For a distance-only encoder (LPIPS) there is no cosine; ReconScore = 100 * (1 - min(d, 1)).

Every caption of an image is rendered with the same seed (the preset's), so candidates of one image differ only
by their text. The authors' describer seeded candidate k with 42 + k, mixing seed noise into the comparison.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from recon_score.artifact_cache import ArtifactCache, batch_cache_key
from recon_score.atomic_io import sha256_json
from recon_score.encoders import Encoder, build_encoder
from recon_score.errors import InputError, ReconScoreWarning
from recon_score.images import image_digest, is_array_image, load_image, to_pil_image
from recon_score.presets import SMOKE_NOTE, ReconPreset, get_preset
from recon_score.prompts import clean_caption, format_prompt
from recon_score.render import Renderer, RenderRequest
from recon_score.runtime import resolve_device
from recon_score.sizing import reconstruction_size

log = logging.getLogger(__name__)

# what `score` takes as one image: a file, a PIL image, or a torch tensor / numpy array (see images.to_pil_image)
ImageInput = Image.Image | str | Path | np.ndarray | torch.Tensor


def recon_score_from_cosine(cos: float | np.ndarray | torch.Tensor):
    """100 * (1 + cos) / 2, i.e. 100 * (1 - d/2) with d = 1 - cos. Range [0, 100]."""
    return 100.0 * (1.0 + cos) / 2.0


def recon_score_from_distance(d: float) -> float:
    """For distance encoders (LPIPS, typically in [0, 1]): 100 * (1 - min(d, 1)). Range [0, 100]."""
    return 100.0 * (1.0 - min(max(float(d), 0.0), 1.0))


@dataclass
class ReconResult:
    caption: str | None
    recon_score: float | None = None
    cosine: float | None = None
    distance: float | None = None
    width: int | None = None
    height: int | None = None
    prompt: str | None = None
    seed: int | None = None
    truncated: bool = False
    cached: bool = False
    error: str | None = None
    cache_key: str | None = None
    reconstruction: Image.Image | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Item:
    index: int
    image: Image.Image | None
    caption: str | None
    seed: int
    error: str | None = None
    digest: str | None = None
    request: RenderRequest | None = None
    key: str | None = None


class ReconScorer:
    """Scores captions against images by reconstruction.

    Example:
        >>> scorer = ReconScorer.from_preset("smoke")                      # doctest: +SKIP
        >>> [r.recon_score for r in scorer.score("tile.png", ["a runway", "a farm"])]  # doctest: +SKIP
    """

    def __init__(
        self,
        preset: ReconPreset,
        *,
        device: str | None = None,
        batch_size: int = 1,
        cache: ArtifactCache | None = None,
        weights_dir: str | Path | None = None,
        offload: str = "none",
        show_progress: bool = False,
        attention_backend: str | None = None,
        compile_dit: bool = False,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.preset = preset
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.cache = cache if cache is not None else ArtifactCache()
        self.weights_dir = weights_dir
        self.renderer = Renderer(
            preset,
            device=self.device,
            offload=offload,
            show_progress=show_progress,
            attention_backend=attention_backend,
            compile_dit=compile_dit,
        )
        self._encoder: Encoder | None = None
        self._warned_truncation = False
        self.stats = {"rendered": 0, "reconstruction_cache_hits": 0, "embedded": 0, "embedding_cache_hits": 0}

    @classmethod
    def from_preset(
        cls, preset: str | ReconPreset = "paper", *, overrides: dict | None = None, **kwargs
    ) -> ReconScorer:
        """`overrides` replaces preset fields (t2i_model, steps, encoder, ...); kwargs go to __init__."""
        p = get_preset(preset) if isinstance(preset, str) else preset
        if overrides:
            p = p.replace(**overrides)
        return cls(p, **kwargs)

    # -- models -----------------------------------------------------------------------------------------------
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = build_encoder(
                self.preset.encoder, device=self.device, weights_dir=self.weights_dir
            )
        return self._encoder

    def preflight(self) -> None:
        """Resolve the T2I model and the encoder now, so a missing model fails before any work."""
        _ = self.renderer.resolved
        _ = self.encoder

    def config(self) -> dict:
        """What this scorer runs, for results files: preset values, resolved models, encoder source."""
        enc = self.encoder.info
        out = {
            "preset": self.preset.to_dict(),
            "t2i": {**self.renderer.resolved.as_dict(), **self.renderer.identity()},
            "encoder": enc.identity(),
            "device": self.device,
            "batch_size": self.batch_size,
            "score_formula": "100*(1+cos)/2" if enc.kind == "embedding" else "100*(1-min(d,1))",
        }
        if self.preset.meaningless:
            out["note"] = SMOKE_NOTE
        return out

    # -- public API -------------------------------------------------------------------------------------------
    def score(
        self,
        images: ImageInput | Sequence[ImageInput],
        captions: str | Sequence[str],
        *,
        seeds: int | Sequence[int] | None = None,
    ) -> list[ReconResult]:
        """One result per (image, caption) pair.

        `images` and `captions` are single items or equal-length lists; one image with several captions scores
        every caption against that image (the describer's case: each rendered with the same seed). An image is
        a path, a PIL image, or a torch tensor / numpy array (uint8 0..255 or float 0..1, CHW or HWC; a 4-D
        tensor or array is a batch): see `recon_score.images.to_pil_image`. Bad items get `error` set instead
        of raising, so one corrupt file never loses the batch.
        """
        if isinstance(images, (str, Path, Image.Image)) or (is_array_image(images) and images.ndim < 4):
            img_list = [images]
        else:
            img_list = list(images)
        cap_list = [captions] if isinstance(captions, str) else list(captions)
        if len(img_list) == 1 and len(cap_list) > 1:
            img_list = img_list * len(cap_list)
        if len(cap_list) == 1 and len(img_list) > 1:
            cap_list = cap_list * len(img_list)
        if len(img_list) != len(cap_list):
            raise ValueError(
                f"expected as many images as captions (or one of either), got {len(img_list)} "
                f"images and {len(cap_list)} captions"
            )
        seed_list = self._seeds(seeds, len(cap_list))
        loaded: dict[int, Image.Image | InputError] = {}
        pairs = []
        for i, (img, cap) in enumerate(zip(img_list, cap_list)):
            k = id(img)
            if k not in loaded:
                try:
                    if is_array_image(img):
                        loaded[k] = to_pil_image(img, name=f"image {i}")
                    else:
                        loaded[k] = load_image(img)
                except InputError as err:
                    loaded[k] = err
            pairs.append((loaded[k], cap))
        return self.score_pairs(pairs, seeds=seed_list)

    def _seeds(self, seeds, n: int) -> list[int]:
        if seeds is None:
            return [self.preset.seed] * n
        if isinstance(seeds, int):
            return [seeds] * n
        seeds = list(seeds)
        if len(seeds) != n:
            raise ValueError(f"expected {n} seeds, got {len(seeds)}")
        return seeds

    def score_pairs(
        self,
        pairs: Sequence[tuple[Image.Image | Exception, object]],
        *,
        seeds: Sequence[int] | None = None,
        force_render: bool = False,
    ) -> list[ReconResult]:
        """Score already-loaded (image or load error, caption) pairs.

        force_render: render every valid item even if cached, in this exact batch composition (used when a run
        resumes a half-finished batch, so its pixels match an uninterrupted run bit for bit).
        """
        seeds = self._seeds(seeds, len(pairs))
        items = [self._prepare(i, img, cap, seeds[i]) for i, (img, cap) in enumerate(pairs)]
        results = [ReconResult(caption=it.caption, seed=it.seed, error=it.error) for it in items]
        valid = [it for it in items if it.error is None]
        if not valid:
            return results
        recons = self._reconstruct(valid, force_render=force_render)
        for it in valid:
            res = results[it.index]
            img, meta, cached = recons[it.key]
            res.reconstruction, res.cached, res.cache_key = img, cached, it.key
            res.prompt, res.width, res.height = it.request.prompt, it.request.width, it.request.height
            res.truncated = bool(meta.get("truncated", False))
        self._similarity(valid, results, force=force_render)
        return results

    # -- steps ------------------------------------------------------------------------------------------------
    def _prepare(self, index: int, img, caption, seed: int) -> _Item:
        item = _Item(index=index, image=None, caption=None, seed=int(seed))
        try:
            if isinstance(img, Exception):
                raise img
            text = clean_caption(caption, collapse_whitespace=self.preset.collapse_whitespace)
            item.caption = text
            w, h = reconstruction_size(
                img.width,
                img.height,
                max_side=self.preset.max_side,
                multiple=self.preset.size_multiple,
                rounding=self.preset.size_rounding,
            )
            item.image = img
            item.digest = image_digest(img)
            item.request = RenderRequest(format_prompt(self.preset.prompt_template, text), w, h, item.seed)
            item.key = sha256_json(
                {
                    "kind": "reconstruction",
                    **self.renderer.identity(),
                    "prompt": item.request.prompt,
                    "width": w,
                    "height": h,
                    "seed": item.seed,
                }
            )
        except InputError as err:
            item.error = str(err)
            if item.caption is None and isinstance(caption, str):
                item.caption = caption
        return item

    def _reconstruct(
        self, items: list[_Item], *, force_render: bool
    ) -> dict[str, tuple[Image.Image, dict, bool]]:
        """Reconstructions by item key. Batches are formed before the cache is looked at (unique requests, grouped
        by size in input order, then `batch_size` at a time), and each image is cached under its key *and* its
        batch's composition: batched kernels are not bit-identical across batch shapes, so a batch-4 entry
        must never answer a batch-1 request (the same command gives the same bytes whatever the cache held)."""
        out: dict[str, tuple[Image.Image, dict, bool]] = {}
        unique: dict[str, _Item] = {}
        for it in items:
            unique.setdefault(it.key, it)
        by_size: dict[tuple[int, int], list[_Item]] = {}
        for it in unique.values():
            by_size.setdefault((it.request.width, it.request.height), []).append(it)
        for group in by_size.values():
            for start in range(0, len(group), self.batch_size):
                batch = group[start : start + self.batch_size]
                members = [it.key for it in batch]
                keys = [batch_cache_key(k, members) for k in members]
                hits = [] if force_render else [self.cache.get_reconstruction(k) for k in keys]
                if hits and all(h is not None for h in hits):
                    for it, hit in zip(batch, hits):
                        out[it.key] = (hit[0], hit[1], True)
                    self.stats["reconstruction_cache_hits"] += len(batch)
                    continue
                images = self.renderer.render([it.request for it in batch])
                self.stats["rendered"] += len(batch)
                for it, ck, img in zip(batch, keys, images):
                    meta = {**self._render_meta(it), "batch": members}
                    self.cache.put_reconstruction(ck, img, meta)
                    out[it.key] = (img, meta, False)
        return out

    def _render_meta(self, it: _Item) -> dict:
        tokens = limit = None
        try:
            tokens, limit = self.renderer.count_tokens(it.request.prompt), self.renderer.token_limit
        except Exception as err:  # a tokenizer quirk must not lose a rendered image
            log.debug("token count failed: %s", err)
        truncated = bool(tokens and limit and tokens > limit)
        if truncated and not self._warned_truncation:
            self._warned_truncation = True
            warnings.warn(
                f"prompt of {tokens} tokens exceeds the T2I text encoder's limit of {limit}; the end of the caption "
                f"is not seen by {self.preset.t2i_model} (rows with `truncated: true` in the results). "
                "Warned once per run.",
                ReconScoreWarning,
                stacklevel=4,
            )
        return {
            "prompt": it.request.prompt,
            "width": it.request.width,
            "height": it.request.height,
            "seed": it.seed,
            "tokens": tokens,
            "token_limit": limit,
            "truncated": truncated,
            "identity": self.renderer.identity(),
        }

    def _encoder_key(self) -> str:
        info = self.encoder.info
        return sha256_json(
            {
                "kind": "encoder",
                "spec": info.spec,
                "source": info.source,
                **info.extra,  # e.g. the activation open_clip built (GELU vs QuickGELU embeddings differ)
                "device_type": torch.device(self.device).type,
            }
        )

    def _embed(self, images: list[Image.Image], digests: list[str], *, force: bool = False) -> np.ndarray:
        """Embeddings of the unique images of one call, encoded as one batch; cached under the pixel digest and
        the batch's composition, for the same reason as reconstructions (see `_reconstruct`)."""
        ekey = self._encoder_key()
        unique: dict[str, Image.Image] = {}
        for img, dg in zip(images, digests):
            unique.setdefault(dg, img)
        members = list(unique)
        keys = [batch_cache_key(dg, members) for dg in members]
        hits = [] if force else [self.cache.get_embedding(ekey, k) for k in keys]
        if hits and all(h is not None for h in hits):
            vecs = dict(zip(members, hits))
            self.stats["embedding_cache_hits"] += len(members)
        else:
            emb = self.encoder.encode_images(list(unique.values())).numpy()
            self.stats["embedded"] += len(members)
            vecs = dict(zip(members, emb))
            for k, vec in zip(keys, emb):
                self.cache.put_embedding(ekey, k, vec)
        return np.stack([vecs[dg] for dg in digests])

    def _similarity(self, items: list[_Item], results: list[ReconResult], *, force: bool = False) -> None:
        originals = [it.image for it in items]
        recons = [results[it.index].reconstruction for it in items]
        if self.encoder.kind == "distance":
            dists = self.encoder.pair_distance(originals, recons).tolist()
            for it, d in zip(items, dists):
                results[it.index].distance = float(d)
                results[it.index].recon_score = recon_score_from_distance(d)
            return
        # force: recompute in this exact batch composition (see score_pairs); batched GEMMs are not always
        # bit-identical across batch sizes
        a = self._embed(originals, [it.digest for it in items], force=force)
        b = self._embed(recons, [image_digest(r) for r in recons], force=force)
        cos = np.clip((a.astype(np.float64) * b.astype(np.float64)).sum(-1), -1.0, 1.0)
        for it, c in zip(items, cos.tolist()):
            results[it.index].cosine = float(c)
            results[it.index].distance = float(1.0 - c)
            results[it.index].recon_score = float(recon_score_from_cosine(c))
