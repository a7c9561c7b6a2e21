"""Where reconscore keeps its files (RECONSCORE_CACHE, RECONSCORE_WEIGHTS, the HF cache; docs/scoring.md, "Caches
and environment") and the one record of where a model's weights are (`WeightsLocation`). A leaf module (it imports
nothing of the package), so every module that needs a folder can import it at the top.
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
