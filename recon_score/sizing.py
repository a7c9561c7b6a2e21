"""The one size rule for reconstructions (the ReconScore paper, Sec. 5.1: aspect ratio kept, long side capped at
1024, never scaled up), each side snapped to the T2I latent grid: `nearest` as the authors'
``scripts/image_generator.py`` (Python's ``round``), or the `floor` variant. See docs/protocol.md.
"""

from __future__ import annotations

import math

from recon_score.errors import InputError

SIZE_ROUNDINGS = ("nearest", "floor")


def reconstruction_size(
    width: int, height: int, *, max_side: int = 1024, multiple: int = 16, rounding: str = "nearest"
) -> tuple[int, int]:
    """(width, height) of the reconstruction for an original of `width` x `height` pixels: 600x400 -> 608x400
    (`floor`: 592x400), 2048x1365 -> 1024x688. InputError when a side would become smaller than `multiple`."""
    if rounding not in SIZE_ROUNDINGS:
        raise ValueError(f"size rounding must be one of {', '.join(SIZE_ROUNDINGS)}, got {rounding!r}")
    if width <= 0 or height <= 0:
        raise InputError(f"image has no pixels ({width}x{height})")
    if max_side < multiple or multiple <= 0:
        raise ValueError(f"max_side ({max_side}) must be >= multiple ({multiple}) > 0")
    long_side = max(width, height)
    scale = max_side / long_side if long_side > max_side else 1.0
    if rounding == "nearest":
        w, h = (int(round(side * scale / multiple) * multiple) for side in (width, height))
    else:
        # round(., 6) first so 1024.0000001 from float error does not lose a whole grid step
        w, h = (math.floor(round(side * scale, 6) / multiple) * multiple for side in (width, height))
    if w < multiple or h < multiple:
        raise InputError(
            f"image of {width}x{height} px is too small to reconstruct: each side must be at least {multiple} px "
            f"after scaling the long side to <= {max_side} and rounding ({rounding}) (got {w}x{h})"
        )
    return w, h
