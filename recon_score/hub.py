"""Turning a model name (hub id, local path, synthetic `smoke:`/`shapes:` name) into what a loader loads.

The one place synthetic names are resolved (a folder in the library's own layout, or a `build` for the target
device; recon_score.synthetic decides which), so loaders load what they are given and never look at the name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recon_score import synthetic
from recon_score.errors import ModelNotAvailableError, UnknownEncoderError
from recon_score.paths import WeightsLocation, hf_cache_dir


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # what the user asked for
    path: Path | None  # local folder holding the files; None: only `build` makes it
    revision: str  # hub commit hash, "local:<digest of configs>", "fixture:v<N>" or "shapes:v<N>"
    # synthetic models the library cannot load from a folder (random weights made straight on the device, or a
    # format of our own): build(device=..., [dtype=...]) -> the model the loader would have read
    build: Callable[..., Any] | None = field(default=None, compare=False)
    # a synthetic model: what it is, for the encoder's record ("... numbers are meaningless")
    source: str = ""
    stands_for: str = ""  # a synthetic open_clip model: the release or architecture whose shape it has

    def as_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "revision": self.revision}


def is_synthetic(name: str) -> bool:
    """Whether `name` is a synthetic model's (`smoke:...`, `shapes:...`; it may still be malformed)."""
    return synthetic.is_synthetic(name)


def encoder_family(name: str) -> str | None:
    """The encoder family that loads synthetic `name` (`smoke:dreamsim` -> dreamsim), None for a pipeline."""
    return synthetic.encoder_family(name)


def synthetic_encoders() -> list[tuple[str, str]]:
    """(spelling, encoder family) of every synthetic encoder, as `models list` shows them."""
    return [(row["name"], row["encoder"]) for row in synthetic.list_models() if row["encoder"]]


def resolve_encoder(spec: str) -> ResolvedModel:
    """What the encoder family's loader loads for the synthetic encoder `spec` (a folder, or `build`);
    UnknownEncoderError for an open_clip release or architecture that does not exist."""
    try:
        return ResolvedModel(spec, **synthetic.resolve(spec))
    except ValueError as err:
        raise UnknownEncoderError(spec, known=[], reason=str(err)) from None


def local_revision(path: Path) -> str:
    """A stable identity for a local model folder: digest of its (small) config files, not of the weights."""
    h = hashlib.sha256()
    for cfg in sorted(path.rglob("*.json")):
        if cfg.stat().st_size < 2_000_000:
            h.update(str(cfg.relative_to(path)).encode())
            h.update(cfg.read_bytes())
    return "local:" + h.hexdigest()[:16]


def resolve_model(
    name: str,
    *,
    revision: str | None = None,
    kind: str = "model",
    option: str = "--t2i-model",
    downloader: str = "snapshot",
) -> ResolvedModel:
    """A local folder for `name`: a synthetic model's (with `build` for `shapes:`), an existing directory, or a
    hub id (HF cache first; `downloader="diffusers"` fetches only the files a pipeline needs).
    ModelNotAvailableError when nothing is local and the hub is offline or unreachable."""
    if synthetic.is_synthetic(name):
        fix = "`reconscore models list` lists the synthetic models."
        try:
            found = synthetic.resolve(name)
        except ValueError as err:
            raise ModelNotAvailableError(name, searched=[], fix=fix, reason=str(err)) from err
        if found["path"] is None:
            reason = f"{name} is an encoder with no folder: use it as an encoder spec (--encoder)"
            raise ModelNotAvailableError(name, searched=[], fix=fix, reason=reason)
        return ResolvedModel(name, **found)
    local = Path(name).expanduser()
    if local.is_dir():
        return ResolvedModel(name, local.resolve(), local_revision(local))
    fix = (
        f"Point {option} at a local folder with the {kind} (e.g. one made by `hf download {name} "
        f"--local-dir DIR` on a machine with network), or fill the HF cache (HF_HOME) with it."
    )
    if not _is_hub_id(name, local):
        raise ModelNotAvailableError(
            name,
            searched=[str(local.resolve())],
            fix=fix,
            reason="not a folder and not a hub id (owner/name)",
        )
    searched = [f"HF cache {hf_cache_dir()}"]
    try:
        path = _download(name, revision, downloader, local_files_only=True)
    except Exception as cached_err:
        if is_offline():
            raise ModelNotAvailableError(
                name, searched=searched, fix=fix, reason="HF_HUB_OFFLINE=1 is set, so nothing was downloaded"
            ) from cached_err
        searched.append(f"https://huggingface.co/{name}")
        try:
            path = _download(name, revision, downloader, local_files_only=False)
        except Exception as err:
            raise ModelNotAvailableError(name, searched=searched, fix=fix, reason=_short(err)) from err
    path = Path(path)
    rev = path.name if path.parent.name == "snapshots" else local_revision(path)
    return ResolvedModel(name, path, rev)


def _is_hub_id(name: str, local: Path) -> bool:
    """`owner/name` that is no existing path and is not written as one (no leading /, ./, ../ or ~)."""
    return not (local.exists() or name.startswith(("/", "./", "../", "~")) or name.count("/") != 1)


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _download(name: str, revision: str | None, downloader: str, *, local_files_only: bool) -> str:
    if downloader == "diffusers":
        from diffusers import DiffusionPipeline

        return DiffusionPipeline.download(name, revision=revision, local_files_only=local_files_only)
    from huggingface_hub import snapshot_download

    return snapshot_download(name, revision=revision, local_files_only=local_files_only)


HUB = "Hugging Face Hub"  # the source of a model that is neither local nor in the cache


def locate(name: str, *, revision: str | None = None) -> WeightsLocation:
    """Where model `name` (a hub id, a local folder, a synthetic name) would come from, without downloading."""
    if synthetic.is_synthetic(name):
        return synthetic.check(name)
    local = Path(name).expanduser()
    if local.is_dir():
        return WeightsLocation(True, str(local.resolve()), "local folder")
    if not _is_hub_id(name, local):
        return WeightsLocation(False, str(local), "local path", "does not exist")
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(name, revision=revision, local_files_only=True)
        return WeightsLocation(True, path, f"HF cache ({hf_cache_dir()})")
    except Exception:
        where = (
            "offline (HF_HUB_OFFLINE=1)" if is_offline() else f"would download https://huggingface.co/{name}"
        )
        return WeightsLocation(False, hf_cache_dir(), HUB, where)
