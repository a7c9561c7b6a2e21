"""Content-addressed cache of reconstructions and embeddings.

Key = sha256 of canonical JSON (sorted keys, fixed separators, a schema version) of exactly what changes the
output. For a reconstruction: T2I model id + resolved revision, pipeline class, diffusers version, steps,
guidance, max_sequence_length, dtype, VAE tiling, device type, the *full* prompt (template applied), width,
height and seed. For an embedding: encoder spec + weights identity + sha256 of the decoded pixels. Both are then
combined with the composition of the batch the artifact was computed in (`batch_cache_key`): batched kernels
are not bit-identical across batch shapes (pixels differ by up to 1 grey level between batch 1 and 4, see
docs/runs.md), so an entry is only reused by a computation that would have produced the same bytes.
Re-scoring captions already rendered in the same batches therefore costs no T2I call, across runs and commands.

Layout under RECONSCORE_CACHE (default ~/.cache/reconscore):
    recon/ab/<key>.png + <key>.json    reconstruction (lossless PNG) + its metadata (prompt, size, truncation)
    emb/<encoder-key>/ab/<digest>.npy  float32 embedding

Every file is written to a temporary name in the same folder, then os.replace'd: a killed run never leaves a
half-written entry, and concurrent processes writing the same key are harmless (same bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from recon_score.atomic_io import atomic_write_bytes, atomic_write_text, png_bytes, sha256_json
from recon_score.paths import cache_root


def batch_cache_key(item_key: str, batch: list[str]) -> str:
    """Cache key of one item computed in a batch of these item keys (in order; the item is one of them)."""
    return sha256_json({"kind": "batched", "item": item_key, "batch": batch})


class ArtifactCache:
    def __init__(self, root: Path | None = None, *, enabled: bool = True):
        self.root = Path(root) if root else cache_root()
        self.enabled = enabled

    # -- reconstructions --------------------------------------------------------------------------------------
    def _recon_path(self, key: str) -> Path:
        return self.root / "recon" / key[:2] / f"{key}.png"

    def get_reconstruction(self, key: str) -> tuple[Image.Image, dict] | None:
        if not self.enabled:
            return None
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
        return img, meta

    def put_reconstruction(self, key: str, img: Image.Image, meta: dict) -> Path:
        png = self._recon_path(key)
        if not self.enabled:
            return png
        atomic_write_bytes(png, png_bytes(img))
        atomic_write_text(
            png.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True)
        )  # after the PNG
        return png

    # -- embeddings -------------------------------------------------------------------------------------------
    def _emb_path(self, encoder_key: str, digest: str) -> Path:
        return self.root / "emb" / encoder_key[:16] / digest[:2] / f"{digest}.npy"

    def get_embedding(self, encoder_key: str, digest: str) -> np.ndarray | None:
        if not self.enabled:
            return None
        p = self._emb_path(encoder_key, digest)
        if not p.exists():
            return None
        try:
            return np.load(p, allow_pickle=False)
        except (OSError, ValueError):
            return None

    def put_embedding(self, encoder_key: str, digest: str, vec: np.ndarray) -> None:
        if not self.enabled:
            return
        import io

        buf = io.BytesIO()
        np.save(buf, np.asarray(vec, dtype=np.float32), allow_pickle=False)
        atomic_write_bytes(self._emb_path(encoder_key, digest), buf.getvalue())
