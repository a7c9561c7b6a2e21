"""Where reconscore keeps its files: the cache and local weights folders, and the HF cache; and the one record of
where a model's weights are (`WeightsLocation`, found by recon_score.hub.locate and the encoder families' checks).

A leaf module (it imports nothing of the package), so every module that needs a folder can import it at the top.

Environment:
    RECONSCORE_CACHE    reconstructions, embeddings and built synthetic models (default ~/.cache/reconscore)
    RECONSCORE_WEIGHTS  local weights for families that do not use the HF cache, e.g. DreamSim's release files
                        in RECONSCORE_WEIGHTS/dreamsim (default RECONSCORE_CACHE/weights)
    HF_HOME / HF_HUB_CACHE  as in huggingface_hub
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("RECONSCORE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "reconscore"


def weights_root() -> Path:
    env = os.environ.get("RECONSCORE_WEIGHTS")
    return Path(env).expanduser() if env else cache_root() / "weights"


def hf_cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


@dataclass(frozen=True)
class WeightsLocation:
    """Where a model's weights are, found without downloading: what `reconscore models check`, the preflight and
    a method's release check report, whichever family's rules found it."""

    available: bool
    location: str = ""  # the folder or file, else the hub id or URL it would come from
    source: str = ""  # what provides it: a local folder, the HF cache, a release URL, a package
    detail: str = ""  # why it is not here, or what else is worth knowing
