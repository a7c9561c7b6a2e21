"""Feature extraction through the shared encoder registry (recon_score.encoders), cached on disk as safetensors
shards keyed by encoder, weights and items, with a memo of each encoder's identity. See docs/retrieval.md,
"Features"."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from recon_score.atomic_io import DISK_FULL, WriteError, atomic_write_bytes, sha256_json, write_error
from recon_score.errors import ImageLoadError
from recon_score.images import load_image, resolve_under
from recon_score.paths import cache_root

SHARD_SIZE = 2048
SCHEMA = 1
log = logging.getLogger(__name__)


def info_identity(info: dict) -> dict:
    """What determines an encoder's embeddings, from its EncoderInfo as a dict."""
    return {"spec": info["spec"], "source": info["source"], "dim": info["dim"], **info["extra"]}


def image_identities(root: Path, paths: Sequence[str]) -> list[list]:
    """[path, size, mtime_ns] of each image: what its features are keyed by (no file is opened)."""
    out = []
    for rel in paths:
        st = os.stat(resolve_under(Path(root), rel))
        out.append([rel, st.st_size, st.st_mtime_ns])
    return out


def encoder_info(spec: str, *, weights_dir: Path | None, memo: Path | None, build) -> dict:
    """The EncoderInfo (as a dict) of encoder `spec`, without building it when `memo` (a folder) kept the info of
    the same weights (location, and every file's size and modification time), so a finished run's rerun loads
    no model; otherwise `build()` and memo its info. The memo is a saving, not a result: a cache the disk
    refuses (read-only, forbidden, full) skips it, and the next run builds the encoder again."""
    stamp = _weights_stamp(spec, weights_dir) if memo is not None else None
    path = memo / f"encoder-{sha256_json(stamp)[:24]}.json" if stamp is not None else None
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a damaged memo is rebuilt, never trusted
            pass
    info = json.loads(json.dumps(dataclasses.asdict(build().info)))
    if path is not None:
        try:
            atomic_write_bytes(path, json.dumps(info, sort_keys=True).encode("utf-8"))
        except WriteError as err:  # only for WRITE_REFUSED: EROFS, EACCES, EPERM, ENOSPC, EFBIG, EDQUOT
            log.debug("encoder memo %s not written: %s", path.name, err)
    return info


def _weights_stamp(spec: str, weights_dir: Path | None) -> dict | None:
    """Where `spec`'s weights are and each file's size and mtime; None when they are not all local."""
    from recon_score import __version__
    from recon_score.encoders import check_encoder

    loc = check_encoder(spec, weights_dir=weights_dir)
    if not loc.available:
        return None
    where = Path(loc.location) if loc.location else None
    files: list[list] = []
    if where is not None and where.is_file():
        files = [["", where.stat().st_size, where.stat().st_mtime_ns]]
    elif where is not None and where.is_dir():
        for p in sorted(where.rglob("*")):
            if p.is_file():
                st = p.stat()
                files.append([str(p.relative_to(where)), st.st_size, st.st_mtime_ns])
    return {
        "schema": SCHEMA,
        "reconscore": __version__,
        "spec": spec,
        "weights_dir": str(weights_dir) if weights_dir else None,
        "location": dataclasses.asdict(loc),
        "files": files,
    }


class FeatureStore:
    """Embeddings of images and texts for one encoder, computed once and read back from disk afterwards."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        enabled: bool = True,
        shard_size: int = SHARD_SIZE,
        progress: bool = True,
    ):
        self.root = Path(root) if root is not None else cache_root() / "retrieval" / "features"
        self.enabled, self.shard_size, self.progress = enabled, shard_size, progress
        self.computed = 0  # items encoded by this store (not read from the cache)
        self.skipped: dict[str, str] = {}  # image path -> why it could not be loaded (its row is zeros)

    # -- public --------------------------------------------------------------------------------------------------
    def images(self, encoder, root: Path, paths: Sequence[str], *, batch_size: int | None = None) -> Tensor:
        """(len(paths), D) image embeddings, read through recon_score.images.load_image; rows of images that
        cannot be loaded are zeros and their paths are in `self.skipped`."""
        root = Path(root)
        items = image_identities(root, paths)

        def encode(batch: list) -> Tensor:
            images, ok = [], []
            for i, it in enumerate(batch):
                try:
                    images.append(load_image(resolve_under(root, it[0]), name=it[0]))
                    ok.append(i)
                except ImageLoadError as err:
                    self.skipped[it[0]] = str(err)
            feats = encoder.encode_images(images, batch_size=batch_size) if images else None
            dim = feats.shape[1] if feats is not None else (encoder.info.dim or 0)
            out = torch.zeros(len(batch), dim, dtype=feats.dtype if feats is not None else torch.float32)
            if feats is not None:
                out[ok] = feats.to(out.device)
            return out

        return self._features(encoder, "image", items, encode, unit="img")

    def texts(self, encoder, texts: Sequence[str], *, batch_size: int | None = None) -> Tensor:
        """(len(texts), D) text embeddings."""
        encode = partial(encoder.encode_texts, batch_size=batch_size)
        return self._features(encoder, "text", list(texts), encode, unit="text")

    def text_encoder(self, encoder, *, batch_size: int | None = None):
        """A texts -> embeddings callable for methods that encode at query time (FreeDom, CIReVL, BASIC's
        contextualisation), cached like everything else."""
        return partial(self.texts, encoder, batch_size=batch_size)

    # -- internals -----------------------------------------------------------------------------------------------
    def _features(self, encoder, kind: str, items: list, encode, *, unit: str) -> Tensor:
        dim = encoder.info.dim or 0
        if not items:
            return torch.zeros(0, dim)
        ident = info_identity(dataclasses.asdict(encoder.info))
        key = sha256_json({"schema": SCHEMA, "encoder": ident, "kind": kind, "items": items})
        folder = self.root / f"{kind}-{key[:24]}"
        shards = [items[i : i + self.shard_size] for i in range(0, len(items), self.shard_size)]
        from recon_score.progress import Progress

        show = self.progress and len(items) > 256
        bar = Progress(len(items), unit=unit, desc=f"{kind} features", disable=not show, leave=False)
        out = []
        for n, shard in enumerate(shards):
            fp = sha256_json({"schema": SCHEMA, "encoder": ident, "kind": kind, "items": shard})
            path = folder / f"shard-{n:05d}.safetensors"
            cached = self._read(path, fp, self.skipped) if self.enabled else None
            if cached is None:
                batch = max(1, getattr(encoder, "batch_size", 32))
                parts = []
                for i in range(0, len(shard), batch):
                    parts.append(encode(shard[i : i + batch]).float().cpu())
                    bar.update(len(parts[-1]))
                cached = torch.cat(parts)
                self.computed += len(shard)
                if self.enabled:
                    failed = {
                        it[0]: self.skipped[it[0]]
                        for it in shard
                        if kind == "image" and it[0] in self.skipped
                    }
                    self._write(path, cached, fp, failed)
            else:
                bar.update(len(shard))
            out.append(cached)
        bar.close()
        return torch.cat(out)

    @staticmethod
    def _read(path: Path, fingerprint: str, skipped: dict[str, str]) -> Tensor | None:
        if not path.is_file():
            return None
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                if meta.get("fingerprint") != fingerprint:
                    return None
                failed = json.loads(meta.get("skipped", "{}"))
                features = f.get_tensor("features")
        except Exception:  # a corrupt shard (disk full, foreign file) is recomputed, not trusted
            return None
        skipped.update(failed)
        return features

    @staticmethod
    def _write(path: Path, features: Tensor, fingerprint: str, skipped: dict[str, str] | None = None) -> None:
        from safetensors.torch import save

        meta = {"fingerprint": fingerprint}
        if skipped:
            meta["skipped"] = json.dumps(skipped, sort_keys=True)
        try:
            atomic_write_bytes(path, save({"features": features.contiguous()}, metadata=meta))
        except WriteError as err:  # a read-only or forbidden cache: say how to run without it
            if err.errno in DISK_FULL:
                raise
            raise write_error(err, hint="point --cache-dir at a writable folder, or pass --no-cache") from err
