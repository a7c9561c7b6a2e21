"""The one size rule for reconstructions (seed 004, Sec. 5.1: "All synthetic images strictly preserved the aspect
ratio of the original image").

1. keep the aspect ratio; scale the long side down to at most `max_side` (never up: a 256 px UCM tile is
   reconstructed at 256 px, not blown up to 1024 px);
2. round each side *down* to a multiple of `multiple` (the T2I latent grid: VAE factor x patch size = 16 for
   Z-Image and FLUX). Rounding down keeps the "never up" promise; the aspect ratio moves by < multiple/side.
"""

from __future__ import annotations

from recon_score.errors import InputError


def reconstruction_size(
    width: int, height: int, *, max_side: int = 1024, multiple: int = 16
) -> tuple[int, int]:
    """(width, height) of the reconstruction for an original of `width` x `height` pixels.

    Raises:
        InputError: a side would become smaller than `multiple` (the image is too small or too elongated).

    Example:
        >>> reconstruction_size(600, 400)
        (592, 400)
        >>> reconstruction_size(4000, 3000)
        (1024, 768)
        >>> reconstruction_size(256, 256)
        (256, 256)
    """
    if width <= 0 or height <= 0:
        raise InputError(f"image has no pixels ({width}x{height})")
    if max_side < multiple or multiple <= 0:
        raise ValueError(f"max_side ({max_side}) must be >= multiple ({multiple}) > 0")
    scale = min(1.0, max_side / max(width, height))
    # round() before flooring so 1024.0000001 from float error does not lose a whole grid step
    w = int(round(width * scale, 6)) // multiple * multiple
    h = int(round(height * scale, 6)) // multiple * multiple
    if w < multiple or h < multiple:
        raise InputError(
            f"image of {width}x{height} px is too small to reconstruct: each side must be at least {multiple} px "
            f"after scaling the long side to <= {max_side} (got {w}x{h})"
        )
    return w, h
