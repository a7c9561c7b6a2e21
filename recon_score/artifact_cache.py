"""Content-addressed cache of reconstructions (recon/ab/KEY.png + .json) and embeddings
(emb/ENCODER/ab/DIGEST.npy) under RECONSCORE_CACHE; the latest entries also stay in memory for one run.

Keys and why they include the batch composition: docs/scoring.md, "Caches and environment", and docs/runs.md.
Every file is written to a temporary name and os.replace'd: a killed run leaves no half-written entry.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
from PIL import Image

from recon_score.atomic_io import atomic_write_bytes, atomic_write_text, png_bytes, sha256_json
from recon_score.paths import cache_root


def batch_cache_key(item_key: str, batch: list[str]) -> str:
    """Cache key of one item computed in a batch of these item keys (in order; the item is one of them)."""
    return sha256_json({"kind": "batched", "item": item_key, "batch": batch})


RECENT_RECONSTRUCTIONS = 64  # renders kept in memory (about 3 MB each at 1024 x 1024)
RECENT_EMBEDDINGS = 16_384  # embeddings kept in memory (a few kB each)


def _recall(store: OrderedDict, key):
    value = store.get(key)
    if value is not None:
        store.move_to_end(key)
    return value


def _remember(store: OrderedDict, key, value, limit: int) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > limit:
        store.popitem(last=False)


class ArtifactCache:
    def __init__(self, root: Path | None = None, *, enabled: bool = True):
        self.root = Path(root) if root else cache_root()
        self.enabled = enabled
        self._recons: OrderedDict[str, tuple[Image.Image, dict]] = OrderedDict()
        self._embeddings: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def forget(self) -> None:
        """Drop the in-memory entries (the disk cache stays): a benchmark's next round renders and embeds again."""
        self._recons.clear()
        self._embeddings.clear()

    # -- reconstructions --------------------------------------------------------------------------------------
    def _recon_path(self, key: str) -> Path:
        return self.root / "recon" / key[:2] / f"{key}.png"

    def get_reconstruction(self, key: str) -> tuple[Image.Image, dict] | None:
        recent = _recall(self._recons, key)
        if recent is not None or not self.enabled:
            return recent
        png = self._recon_path(key)
        meta_path = png.with_suffix(".json")
        if not (png.exists() and meta_path.exists()):
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            with Image.open(png) as im:
                img = im.convert("RGB")
                img.load()
        except (OSError, ValueError):
            return None  # a corrupt entry is a miss; it will be overwritten
        _remember(self._recons, key, (img, meta), RECENT_RECONSTRUCTIONS)
        return img, meta

    def put_reconstruction(self, key: str, img: Image.Image, meta: dict) -> Path:
        png = self._recon_path(key)
        _remember(self._recons, key, (img, meta), RECENT_RECONSTRUCTIONS)
        if not self.enabled:
            return png
        atomic_write_bytes(png, png_bytes(img))
        # after the PNG
        atomic_write_text(png.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True))
        return png

    # -- embeddings -------------------------------------------------------------------------------------------
    def _emb_path(self, encoder_key: str, digest: str) -> Path:
        return self.root / "emb" / encoder_key[:16] / digest[:2] / f"{digest}.npy"

    def get_embedding(self, encoder_key: str, digest: str) -> np.ndarray | None:
        recent = _recall(self._embeddings, (encoder_key, digest))
        if recent is not None or not self.enabled:
            return recent
        p = self._emb_path(encoder_key, digest)
        if not p.exists():
            return None
        try:
            vec = np.load(p, allow_pickle=False)
        except (OSError, ValueError):
            return None
        _remember(self._embeddings, (encoder_key, digest), vec, RECENT_EMBEDDINGS)
        return vec

    def put_embedding(self, encoder_key: str, digest: str, vec: np.ndarray) -> None:
        vec = np.asarray(vec, dtype=np.float32)  # what a disk hit gives back
        _remember(self._embeddings, (encoder_key, digest), vec, RECENT_EMBEDDINGS)
        if not self.enabled:
            return
        import io

        buf = io.BytesIO()
        np.save(buf, vec, allow_pickle=False)
        atomic_write_bytes(self._emb_path(encoder_key, digest), buf.getvalue())
