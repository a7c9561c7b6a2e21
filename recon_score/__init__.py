"""ReconScore: reference-free caption evaluation by text-to-image reconstruction, and the project's one home of
image/text encoders (recon_score.encoders).

Importing this package loads no torch; the public names below are imported on first access.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "ReconScorer": "recon_score.scorer",
    "ReconResult": "recon_score.scorer",
    "recon_score_from_cosine": "recon_score.scorer",
    "ReconPreset": "recon_score.presets",
    "PRESETS": "recon_score.presets",
    "get_preset": "recon_score.presets",
    "build_encoder": "recon_score.encoders",
    "list_encoders": "recon_score.encoders",
    "load_image": "recon_score.images",
    "reconstruction_size": "recon_score.sizing",
    "PERSPECTIVE_TEMPLATE": "recon_score.prompts",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recon_score' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
