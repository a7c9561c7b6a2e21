"""ReconScore: caption -> perspective prompt -> T2I reconstruction at the original aspect ratio -> similarity,
ReconScore = 100 * (1 + cos) / 2 (docs/protocol.md). Every caption of an image is rendered with the same seed, so
candidates of one image differ only by their text (the authors' describer seeded candidate k with 42 + k).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from recon_score.artifact_cache import ArtifactCache, batch_cache_key
from recon_score.atomic_io import sha256_json
from recon_score.encoders import Encoder, build_encoder
from recon_score.errors import InputError, ReconScoreWarning
from recon_score.images import (
    ROUND_TRIP_SAVES,
    image_digest,
    is_array_image,
    load_image,
    round_trip,
    source_format,
    to_pil_image,
)
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


NON_FINITE = "non-finite similarity (NaN/inf from the models)"
RECENT_DIGESTS = 32  # images (originals, renders) whose digest a scorer remembers (it holds them meanwhile)


def similarity_scores(
    a: np.ndarray | None = None, b: np.ndarray | None = None, *, distances: Sequence[float] | None = None
) -> list[tuple[float | None, float | None, float | None, str | None]]:
    """The one place unit-norm embeddings `a`, `b` (one row per pair) or a distance encoder's `distances` become
    ReconScores: per pair (recon_score, cosine, distance, error); a non-finite value is an error, not a score."""
    out = []
    if distances is not None:
        for d in distances:
            score = recon_score_from_distance(d) if math.isfinite(d) else math.nan
            out.append(
                (score, None, float(d), None) if math.isfinite(score) else (None, None, None, NON_FINITE)
            )
        return out
    cos = np.clip((np.asarray(a, np.float64) * np.asarray(b, np.float64)).sum(-1), -1.0, 1.0)
    for c in cos.tolist():
        ok = math.isfinite(c)
        out.append(
            (float(recon_score_from_cosine(c)), c, 1.0 - c, None) if ok else (None, None, None, NON_FINITE)
        )
    return out


@dataclass
class ReconResult:
    """One (image, caption) pair. With several seeds (`ReconScorer.score_seeds`): `recon_score`, `cosine` and
    `distance` are means over the seeds, `per_seed` the K scores and `std` their sample std; the
    reconstruction, prompt and size are the first seed's."""

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
    seeds: list[int] | None = None
    per_seed: list[float | None] | None = None
    std: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        """The score and what it belongs to; the prompt, cache key and image stay attributes (print them)."""
        cap = self.caption if self.caption is None or len(self.caption) <= 50 else self.caption[:47] + "..."
        score = "None" if self.recon_score is None else f"{self.recon_score:.2f}"
        parts = [f"recon_score={score}", f"caption={cap!r}"]
        if self.std is not None:
            parts.append(f"std={self.std:.2f} over {len(self.per_seed or [])} seeds")
        elif self.seed is not None:
            parts.append(f"seed={self.seed}")
        if self.width is not None:
            parts.append(f"size={self.width}x{self.height}")
        if self.error is not None:
            parts.append(f"error={self.error!r}")
        return f"ReconResult({', '.join(parts)})"


@dataclass
class PatchSink:
    """What `ReconScorer.patch_tokens()` collects: per pixel digest, each tower's (rows, cols, d) grid and the
    box it covers; per batch key, the embedding computed with it (a composition encoded once)."""

    grids: dict[str, tuple[list[np.ndarray], tuple]] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, digests: list[str], keys: list[str], emb: np.ndarray, towers: list) -> None:
        for j, (dg, key) in enumerate(zip(digests, keys)):
            self.vectors[key] = emb[j]
            self.grids.setdefault(dg, ([t.tokens[j].numpy() for t in towers], tuple(towers[0].boxes[j])))


def _mean(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else statistics.fmean(values)


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
    """Scores captions against images by reconstruction (docs/python-api.md)."""

    def __init__(
        self,
        preset: ReconPreset,
        *,
        device: str | None = None,
        batch_size: int = 1,
        cache: ArtifactCache | None = None,
        weights_dir: str | Path | None = None,
        **render_options,
    ):
        """`render_options` go to the Renderer: offload, show_progress, attention_backend, compile_dit,
        trust_remote_code."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.preset = preset
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.cache = cache if cache is not None else ArtifactCache()
        self.weights_dir = weights_dir
        self.renderer = Renderer(preset, device=self.device, **render_options)
        self._encoder: Encoder | None = None
        self._warned_truncation = False
        # id(image) -> (image, pixel digest) of the latest images hashed: an image object given again (another
        # caption, another seed, the next chunk) is hashed once. The image is held, so its id is not reused;
        # images are not modified in place while a scorer uses them.
        self._digests: OrderedDict[int, tuple[Image.Image, str]] = OrderedDict()
        self._patches: PatchSink | None = None  # set by `patch_tokens()`: explanations' gap maps
        self.stats = {
            "rendered": 0,
            "render_seconds": 0.0,  # wall time inside the T2I pipeline only (the ReconScore paper's Tab. 9 I.T.)
            "reconstruction_cache_hits": 0,
            "embedded": 0,
            "embedding_cache_hits": 0,
        }

    def __repr__(self) -> str:
        p = self.preset
        return (
            f"ReconScorer(preset={p.name!r}, t2i_model={p.t2i_model!r}, encoder={p.encoder!r}, "
            f"steps={p.steps}, device={self.device!r}, batch_size={self.batch_size})"
        )

    @classmethod
    def from_preset(
        cls,
        preset: str | ReconPreset = "paper",
        *,
        overrides: dict | None = None,
        check_models: bool = True,
        **kwargs,
    ) -> ReconScorer:
        """`overrides` replaces preset fields (t2i_model, steps, encoder, ...); kwargs go to __init__. The models
        are looked up here (locally, no download), so a missing one fails now, unless `check_models=False`."""
        p = get_preset(preset) if isinstance(preset, str) else preset
        if overrides:
            p = p.replace(**overrides)
        scorer = cls(p, **kwargs)
        if check_models:
            from recon_score.preflight import python_needs, require_models

            require_models(python_needs(scorer.model_needs()))
        return scorer

    # -- models -----------------------------------------------------------------------------------------------
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = build_encoder(
                self.preset.encoder, device=self.device, weights_dir=self.weights_dir
            )
        return self._encoder

    def model_needs(self) -> list:
        """The T2I model and the encoder, for recon_score.preflight."""
        from recon_score.preflight import recon_needs

        return recon_needs(self.preset, self.weights_dir)

    def preflight(self, command: str | None = None) -> None:
        """Check every model at once (recon_score.preflight), then resolve the T2I model and build the encoder, so
        a missing model fails before any work."""
        from recon_score.preflight import require_models

        require_models(self.model_needs(), command=command)
        _ = self.renderer.resolved
        self.renderer.check_loadable()
        _ = self.encoder

    def unload(self) -> None:
        """Free the T2I pipeline and the encoder (GPU memory between phases); both load again on next use."""
        from recon_score.encoders import release_encoders

        self.renderer.unload()
        self._encoder = None
        release_encoders()

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
        if self.preset.render_round_trip:  # how each original format's render was saved before it was scored
            out["render_round_trip"] = {
                "saved_as": "the original's file format, PIL's defaults",
                **ROUND_TRIP_SAVES,
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
    ) -> ReconResult | list[ReconResult]:
        """One result per (image, caption) pair: a single image with a single caption gives one ReconResult,
        anything else a list. A single image (not in a list) is broadcast over a list of captions and a single
        caption over a list of images; lists of different lengths are a ValueError, never guessed (image types:
        docs/python-api.md). Bad items get `error` set instead of raising: one corrupt file never loses the batch.
        """
        one_image = isinstance(images, (str, Path, Image.Image)) or (
            is_array_image(images) and images.ndim < 4
        )
        img_list = [images] if one_image else list(images)
        cap_list = [captions] if isinstance(captions, str) else list(captions)
        if one_image and len(cap_list) > 1:
            img_list = img_list * len(cap_list)
        if isinstance(captions, str) and len(img_list) > 1:
            cap_list = cap_list * len(img_list)
        if len(img_list) != len(cap_list):
            raise ValueError(
                f"expected as many images as captions, got a list of {len(img_list)} image(s) and "
                f"{len(cap_list)} caption(s); to score several captions against one image pass the image "
                "itself, not in a list (and one caption against several images as a string)"
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
                        loaded[k] = load_image(img, reader=self.preset.image_reader)
                except InputError as err:
                    loaded[k] = err
            pairs.append((loaded[k], cap))
        results = self.score_pairs(pairs, seeds=seed_list)
        return results[0] if one_image and isinstance(captions, str) else results

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
        """Score already-loaded (image or load error, caption) pairs. `force_render` renders every valid item even
        if cached, in this batch composition: a resumed half-finished batch then matches an uninterrupted run."""
        seeds = self._seeds(seeds, len(pairs))
        items = [self._prepare(i, img, cap, seeds[i]) for i, (img, cap) in enumerate(pairs)]
        results = [ReconResult(caption=it.caption, seed=it.seed, error=it.error) for it in items]
        valid = [it for it in items if it.error is None]
        if not valid:
            return results
        recons = self._reconstruct(valid, force_render=force_render)
        trips: dict[tuple[str, str | None], Image.Image] = {}
        for it in valid:
            res = results[it.index]
            img, meta, cached = recons[it.key]
            if self.preset.render_round_trip:  # the render as the authors' scripts save and read it back
                fmt = source_format(it.image)
                if (it.key, fmt) not in trips:
                    trips[(it.key, fmt)] = round_trip(img, fmt)
                img = trips[(it.key, fmt)]
            res.reconstruction, res.cached, res.cache_key = img, cached, it.key
            res.prompt, res.width, res.height = it.request.prompt, it.request.width, it.request.height
            res.truncated = bool(meta.get("truncated", False))
        self._similarity(valid, results, force=force_render)
        return results

    def score_seeds(
        self,
        pairs: Sequence[tuple[Image.Image | Exception, object]],
        seeds: Sequence[int],
        *,
        force_render: bool = False,
    ) -> list[ReconResult]:
        """Every pair rendered under each of `seeds`, one result per pair with the per-seed values (see
        ReconResult). One seed: `score_pairs`' results unchanged. A pair fails if any of its renders fails: a
        mean over fewer seeds would not be comparable with the other rows."""
        seeds = [int(s) for s in seeds]
        if len(seeds) == 1:
            return self.score_pairs(pairs, seeds=seeds * len(pairs), force_render=force_render)
        n = len(pairs)
        flat = self.score_pairs(
            [p for _ in seeds for p in pairs],
            seeds=[s for s in seeds for _ in pairs],
            force_render=force_render,
        )
        out = []
        for i in range(n):
            mine = [flat[k * n + i] for k in range(len(seeds))]
            first = mine[0]
            res = ReconResult(caption=first.caption, seed=seeds[0], seeds=seeds, error=None)
            res.per_seed = [r.recon_score for r in mine]
            res.error = next((r.error for r in mine if r.error), None)
            if res.error is None:
                res.recon_score, res.std = statistics.fmean(res.per_seed), statistics.stdev(res.per_seed)
                res.cosine = _mean([r.cosine for r in mine])
                res.distance = _mean([r.distance for r in mine])
                res.width, res.height, res.prompt = first.width, first.height, first.prompt
                res.truncated, res.reconstruction = first.truncated, first.reconstruction
                res.cached = all(r.cached for r in mine)
            out.append(res)
        return out

    def compare(
        self, originals: Sequence[Image.Image], reconstructions: Sequence[Image.Image]
    ) -> list[ReconResult]:
        """ReconScore of existing (original, reconstruction) pairs under this scorer's encoder, none rendered."""
        if len(originals) != len(reconstructions):
            raise ValueError(f"{len(originals)} originals but {len(reconstructions)} reconstructions")
        if not originals:
            return []
        return [
            ReconResult(caption=None, recon_score=score, cosine=cos, distance=dist, error=err)
            for score, cos, dist, err in self._compare(list(originals), list(reconstructions))
        ]

    def explain(
        self,
        image: ImageInput,
        caption: str,
        *,
        seeds: Sequence[int] | None = None,
        max_phrases: int = 8,
        level: float = 0.05,
    ):
        """Where `caption` fails `image`: a `recon_score.explain.Explanation` over `seeds` (default: the preset's
        seed, then derived ones, as many as `--explain-seeds`' default), arguments checked as the CLI checks them.
        Costs (phrases + 1) x K renders; `max_phrases` bounds it. See docs/explain.md."""
        from recon_score.explain import check_arguments, explain_one
        from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS
        from recon_score.seeds import derive_seeds

        seed_list = check_arguments(seeds=seeds, max_phrases=max_phrases, level=level)
        if seed_list is None:
            seed_list = derive_seeds(self.preset.seed, DEFAULT_EXPLAIN_SEEDS)
        img = to_pil_image(image, name="image") if is_array_image(image) else image
        if not isinstance(img, Image.Image):
            img = load_image(img, reader=self.preset.image_reader)
        return explain_one(self, img, caption, seeds=seed_list, max_phrases=max_phrases, level=level)

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
            item.digest = self._digest(img)
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
        """Reconstructions by item key. Batches are formed before the cache is looked at, and each image is cached
        under its key *and* its batch's composition: batched kernels are not bit-identical across batch shapes, so
        the same command gives the same bytes whatever the cache held (docs/runs.md)."""
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
                start = time.perf_counter()
                images = self.renderer.render([it.request for it in batch])
                self.stats["render_seconds"] += time.perf_counter() - start  # PIL out: the GPU work is done
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

    def _digest(self, img: Image.Image) -> str:
        """image_digest, once per image object among the latest RECENT_DIGESTS."""
        known = self._digests.get(id(img))
        if known is not None and known[0] is img:
            self._digests.move_to_end(id(img))
            return known[1]
        digest = image_digest(img)
        self._digests[id(img)] = (img, digest)
        while len(self._digests) > RECENT_DIGESTS:
            self._digests.popitem(last=False)
        return digest

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

    @contextmanager
    def patch_tokens(self):
        """Within it, every image this scorer embeds also gives its patch grids, from the same forward pass
        (`Encoder.encode_images_and_patches`), kept in the yielded PatchSink by pixel digest; None when the
        encoder has no patch tokens (an explanation's maps then say why)."""
        if self._patches is not None:
            raise RuntimeError("patch_tokens() does not nest")
        self._patches = PatchSink() if self.encoder.has_patch_tokens else None
        try:
            yield self._patches
        finally:
            self._patches = None

    def _embed(self, images: list[Image.Image], digests: list[str], *, force: bool = False) -> np.ndarray:
        """Embeddings of the unique images of one call, encoded as one batch; cached under the pixel digest and
        the batch's composition, for the same reason as reconstructions (see `_reconstruct`). Inside
        `patch_tokens()` the cache does not answer (it holds no grids): one forward gives both."""
        ekey = self._encoder_key()
        unique: dict[str, Image.Image] = {}
        for img, dg in zip(images, digests):
            unique.setdefault(dg, img)
        members = list(unique)
        keys = [batch_cache_key(dg, members) for dg in members]
        sink = self._patches
        if sink is not None and all(k in sink.vectors for k in keys):  # this composition, already encoded
            return np.stack([sink.vectors[batch_cache_key(dg, members)] for dg in digests])
        hits = [] if force or sink is not None else [self.cache.get_embedding(ekey, k) for k in keys]
        if hits and all(h is not None for h in hits):
            vecs = dict(zip(members, hits))
            self.stats["embedding_cache_hits"] += len(members)
        else:
            if sink is not None:
                emb_t, towers = self.encoder.encode_images_and_patches(list(unique.values()))
                emb = emb_t.numpy()
                sink.add(members, keys, emb, towers)
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
        digests = [it.digest for it in items]
        for it, (score, cos, dist, err) in zip(items, self._compare(originals, recons, digests, force=force)):
            res = results[it.index]
            res.recon_score, res.cosine, res.distance, res.error = score, cos, dist, err

    def _compare(self, originals, recons, digests=None, *, force: bool = False) -> list[tuple]:
        if self.encoder.kind == "distance":
            return similarity_scores(distances=self.encoder.pair_distance(originals, recons).tolist())
        # force: recompute in this exact batch composition (see score_pairs); batched GEMMs are not always
        # bit-identical across batch sizes
        a = self._embed(originals, digests or [self._digest(o) for o in originals], force=force)
        b = self._embed(recons, [self._digest(r) for r in recons], force=force)
        return similarity_scores(a, b)
