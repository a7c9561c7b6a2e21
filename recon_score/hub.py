"""Where models and caches live, and turning a model name (hub id, local path, `smoke:` fixture) into files.

Environment:
    RECONSCORE_CACHE    reconstructions, embeddings and built fixtures (default ~/.cache/reconscore)
    RECONSCORE_WEIGHTS  local weights for families that do not use the HF cache, e.g. DreamSim's release files
                        in RECONSCORE_WEIGHTS/dreamsim (default RECONSCORE_CACHE/weights)
    HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE  as in huggingface_hub
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from recon_score.errors import ModelNotAvailableError

SMOKE_PREFIX = "smoke:"
SHAPES_PREFIX = "shapes:"  # published model sizes, random weights (recon_score.testing.shapes)


def cache_root() -> Path:
    env = os.environ.get("RECONSCORE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "reconscore"


def weights_root() -> Path:
    env = os.environ.get("RECONSCORE_WEIGHTS")
    return Path(env).expanduser() if env else cache_root() / "weights"


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hf_cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # what the user asked for
    path: Path  # local folder holding the files
    revision: str  # hub commit hash, "local:<digest of configs>", or "fixture:v<N>"

    def as_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "revision": self.revision}


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
    """A local folder for `name`: a `smoke:` fixture, a `shapes:` folder, an existing directory, or a hub id
    (HF cache first).

    `downloader="diffusers"` uses DiffusionPipeline.download, which fetches only the files a pipeline needs.

    Raises:
        ModelNotAvailableError: nothing local and the hub is offline or unreachable.
    """
    if name.startswith(SMOKE_PREFIX):
        from recon_score.testing.fixtures import FIXTURE_VERSION, ensure_fixture

        return ResolvedModel(name, ensure_fixture(name[len(SMOKE_PREFIX) :]), f"fixture:v{FIXTURE_VERSION}")
    if name.startswith(SHAPES_PREFIX):
        from recon_score.testing.shapes import SHAPES_VERSION, ensure_shapes

        try:
            path = ensure_shapes(name[len(SHAPES_PREFIX) :])
        except (KeyError, ValueError) as err:
            raise ModelNotAvailableError(
                name, searched=[], fix="Use shapes:z-image or shapes:qwen3-vl-8b.", reason=str(err)
            ) from err
        return ResolvedModel(name, path, f"shapes:v{SHAPES_VERSION}")
    local = Path(name).expanduser()
    if local.is_dir():
        return ResolvedModel(name, local.resolve(), local_revision(local))
    fix = (
        f"Point {option} at a local folder with the {kind} (e.g. one made by `hf download {name} "
        f"--local-dir DIR` on a machine with network), or fill the HF cache (HF_HOME) with it."
    )
    if local.exists() or name.startswith(("/", "./", "../", "~")) or name.count("/") != 1:
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


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _download(name: str, revision: str | None, downloader: str, *, local_files_only: bool) -> str:
    if downloader == "diffusers":
        from diffusers import DiffusionPipeline

        return DiffusionPipeline.download(name, revision=revision, local_files_only=local_files_only)
    from huggingface_hub import snapshot_download

    return snapshot_download(name, revision=revision, local_files_only=local_files_only)


def check_model(name: str, *, revision: str | None = None) -> dict:
    """Where `name` would come from, without downloading: {available, location, source, detail}."""
    if name.startswith(SMOKE_PREFIX):
        from recon_score.testing.fixtures import fixture_path

        p = fixture_path(name[len(SMOKE_PREFIX) :])
        return {
            "available": True,
            "location": str(p),
            "source": "built offline on first use (random weights)",
            "detail": "built" if p.exists() else "not built yet",
        }
    if name.startswith(SHAPES_PREFIX):
        return {
            "available": True,
            "location": "",
            "source": "published sizes, random weights, built on the target device (no download)",
            "detail": "",
        }
    local = Path(name).expanduser()
    if local.is_dir():
        return {"available": True, "location": str(local.resolve()), "source": "local folder", "detail": ""}
    if local.exists() or name.startswith(("/", "./", "../", "~")) or name.count("/") != 1:
        return {
            "available": False,
            "location": str(local),
            "source": "local path",
            "detail": "does not exist",
        }
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(name, revision=revision, local_files_only=True)
        return {"available": True, "location": path, "source": f"HF cache ({hf_cache_dir()})", "detail": ""}
    except Exception:
        where = (
            "offline (HF_HUB_OFFLINE=1)" if is_offline() else f"would download https://huggingface.co/{name}"
        )
        return {"available": False, "location": hf_cache_dir(), "source": "Hugging Face Hub", "detail": where}
