"""The project's one image reader: any raster a remote-sensing user hands us becomes 8-bit RGB.

Why one reader: ReconScore, the describer, retrieval and the caption datasets must see the same pixels for the
same file, or scores computed by different commands stop being comparable.

Conversions (each is deterministic and documented in the README):
- RGB / RGBA / LA / P / L / 1 / CMYK / YCbCr: PIL's conversion; transparent pixels are composited onto black
  (transparency in EO quick-looks marks no-data, not white paper).
- 16-bit, 32-bit integer and float rasters: each band is linearly stretched from its 2nd to its 98th percentile
  to 0..255 (the usual EO quick-look), because their value range (11/12/14-bit sensors, reflectance) is not
  the storage range.
- Multi-band TIFFs PIL cannot open (4+ bands, e.g. RGB+NIR): read with tifffile; bands 1-3 are taken as RGB,
  a single band is replicated to gray.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from recon_score.errors import ImageLoadError, InputError

# PIL refuses >178 MP by default; large EO scenes are legitimate, decompression bombs are not our threat model
# for local files, but keep a ceiling so a mistaken 50k x 50k mosaic fails with a message instead of OOM.
MAX_PIXELS = 400_000_000


def _stretch_to_uint8(band: np.ndarray) -> np.ndarray:
    band = band.astype(np.float64)
    finite = band[np.isfinite(band)]
    if finite.size == 0:
        return np.zeros(band.shape, dtype=np.uint8)
    lo, hi = np.percentile(finite, [2.0, 98.0])
    if hi <= lo:  # constant band: keep its level if it is already a byte value, else mid-gray
        hi = lo + 1.0
    out = (np.nan_to_num(band, nan=lo) - lo) / (hi - lo)
    return (np.clip(out, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _array_to_rgb(arr: np.ndarray) -> Image.Image:
    """(H, W) or (H, W, C) array of any dtype -> 8-bit RGB."""
    if arr.ndim == 3 and arr.shape[0] in (1, 2, 3, 4) and arr.shape[-1] > 4:  # planar (C, H, W) TIFF
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3:
        raise ValueError(f"expected a 2-D raster or a (H, W, bands) stack, got shape {arr.shape}")
    bands = arr.shape[-1]
    arr = arr[..., :3] if bands >= 3 else arr[..., :1]
    if arr.dtype == np.uint8:
        out = arr
    elif arr.dtype == np.bool_:
        out = arr.astype(np.uint8) * 255
    else:
        out = np.stack([_stretch_to_uint8(arr[..., i]) for i in range(arr.shape[-1])], axis=-1)
    if out.shape[-1] == 1:
        out = np.repeat(out, 3, axis=-1)
    return Image.fromarray(np.ascontiguousarray(out), mode="RGB")


def to_rgb(img: Image.Image) -> Image.Image:
    """Any PIL image -> 8-bit RGB with the rules in the module docstring."""
    img = ImageOps.exif_transpose(img) if hasattr(img, "getexif") else img
    mode = img.mode
    if mode == "RGB":
        return img
    if mode == "P":
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode in ("L", "1", "CMYK", "YCbCr", "LAB", "HSV"):
        return img.convert("RGB")
    # I;16*, I, F: high dynamic range, stretch per band
    return _array_to_rgb(np.asarray(img))


def _read_with_tifffile(path: Path) -> Image.Image:
    import tifffile

    arr = tifffile.imread(path)
    if arr.ndim == 3 and arr.shape[0] < arr.shape[-1] and arr.shape[0] <= 16 and arr.shape[-1] > 16:
        arr = np.moveaxis(arr, 0, -1)  # (bands, H, W) -> (H, W, bands)
    return _array_to_rgb(arr)


def load_image(source: Image.Image | str | Path, *, name: str | None = None) -> Image.Image:
    """Open `source` (a path or a PIL image) as 8-bit RGB.

    Raises:
        ImageLoadError: missing, unreadable or corrupt file; the message names the file.
    """
    if isinstance(source, Image.Image):
        return to_rgb(source)
    path = Path(source)
    label = name or str(path)
    if not path.exists():
        raise ImageLoadError(f"image {label!r} not found")
    if not path.is_file():
        raise ImageLoadError(f"image {label!r} is not a file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ImageLoadError(f"image {label!r} could not be read: {err}") from err
    if not data:
        raise ImageLoadError(f"image {label!r} is empty (0 bytes)")
    pil_error: Exception | None = None
    try:
        # PIL warns (rather than fails) on damaged metadata; decoding below decides whether the pixels are usable
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with Image.open(io.BytesIO(data)) as img:
                if img.width * img.height > MAX_PIXELS:
                    raise ImageLoadError(
                        f"image {label!r} has {img.width}x{img.height} pixels, more than {MAX_PIXELS:,}; "
                        "tile or downsample it first"
                    )
                img.load()
                return to_rgb(img)
    except ImageLoadError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        pil_error = err
    if path.suffix.lower() in (".tif", ".tiff"):
        try:
            return _read_with_tifffile(path)
        except Exception as err:  # tifffile raises a zoo of types on corrupt files
            raise ImageLoadError(
                f"image {label!r} is not a readable TIFF: PIL said {pil_error}; tifffile said {err}"
            ) from err
    raise ImageLoadError(f"image {label!r} is corrupt or not an image: {pil_error}") from pil_error


def follow_symlinks() -> bool:
    """The symlink policy: follow links present on disk (default) unless RECONSCORE_FOLLOW_SYMLINKS=0
    (`reconscore --no-follow-symlinks ...` sets it for the run and its worker processes)."""
    return os.environ.get("RECONSCORE_FOLLOW_SYMLINKS", "1").strip().lower() not in ("0", "false", "no")


def resolve_under(root: Path, relative: str, *, what: str = "image", follow: bool | None = None) -> Path:
    """`root / relative` with its symlinks resolved, refusing paths that escape the data root.

    Two checks: the path *as written* (``..``, an absolute path) must stay inside `root` — always refused
    otherwise; and, when symlinks are not followed (`follow=False` or the policy), where it *resolves* must
    stay inside the resolved root too. A root that is itself a symlink is fine either way.

    Raises:
        InputError: the path escapes the data root.
    """
    if not relative or not str(relative).strip():
        raise InputError(f"empty {what} path")
    root_abs = Path(os.path.normpath(os.path.abspath(root)))
    root_resolved = root.resolve()
    written = Path(os.path.normpath(os.path.join(root_abs, relative)))
    if not (written.is_relative_to(root_abs) or written.is_relative_to(root_resolved)):
        raise InputError(
            f"{what} path {relative!r} is {written}, outside the data root {root_abs}; "
            "paths must stay inside --images ROOT (or the captions file's folder)"
        )
    candidate = written.resolve()
    if not (follow_symlinks() if follow is None else follow) and not candidate.is_relative_to(root_resolved):
        raise InputError(
            f"{what} path {relative!r} is a symlink to {candidate}, outside the data root {root_resolved} "
            "(refused: --no-follow-symlinks)"
        )
    return candidate


def image_digest(img: Image.Image) -> str:
    """sha256 of decoded pixels (+ size and mode): identical pixels -> identical cache keys, whatever the file."""
    h = hashlib.sha256()
    h.update(f"{img.mode}:{img.width}x{img.height}:".encode())
    h.update(img.tobytes())
    return h.hexdigest()


def is_array_image(x: object) -> bool:
    """A numpy array or a torch tensor (checked without importing torch)."""
    return isinstance(x, np.ndarray) or (type(x).__module__.startswith("torch") and hasattr(x, "detach"))


def to_pil_image(x, *, name: str = "image") -> Image.Image:
    """One in-memory image (torch tensor or numpy array) -> 8-bit RGB, with fixed value ranges.

    Unlike files (whose 16-bit or float bands are percentile-stretched, see the module docstring), arrays come
    from code that knows their range, so nothing is stretched:
    - uint8: 0..255 as is; bool: False/True -> 0/255;
    - float (16/32/64, bfloat16): 0..1, mapped to round(255 * x); values outside [0, 1] (beyond 1e-3) or NaN
      are refused, since they mean normalised (ImageNet mean/std) or 0..255 floats;
    - other integer dtypes are refused (cast 0..255 data to uint8; save 16-bit rasters as TIFF and pass the path).
    Layouts: (H, W), (C, H, W) or (H, W, C) with C = 1 (replicated to gray) or 3. When both ends could be
    channels (a 3x?x3 array) torch tensors are read as CHW and numpy arrays as HWC, as torchvision does.

    Raises:
        ImageLoadError: another dtype, shape, channel count or value range; the message says which.
    """
    is_tensor = not isinstance(x, np.ndarray)
    if is_tensor:
        t = x.detach().cpu()
        if t.is_floating_point():
            t = t.float()  # bfloat16 has no numpy dtype
        arr = t.numpy()
    else:
        arr = x
    kind = "tensor" if is_tensor else "array"
    if arr.ndim == 3:
        first, last = arr.shape[0] in (1, 3), arr.shape[-1] in (1, 3)
        if first and (not last or is_tensor):
            arr = np.moveaxis(arr, 0, -1)
        elif not last:
            raise ImageLoadError(
                f"{name}: {kind} of shape {tuple(arr.shape)} has no channel axis of size 1 or 3 "
                "(expected (H, W), (C, H, W) or (H, W, C) with C = 1 or 3; drop alpha or extra bands first)"
            )
    elif arr.ndim != 2:
        raise ImageLoadError(
            f"{name}: {kind} of shape {tuple(arr.shape)} is not one image "
            "(expected (H, W), (C, H, W) or (H, W, C); pass a batch as a list or a 4-D tensor to score())"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ImageLoadError(f"{name}: {kind} of shape {tuple(arr.shape)} is empty")
    if arr.dtype == np.bool_:
        arr = arr.astype(np.uint8) * 255
    elif np.issubdtype(arr.dtype, np.floating):
        lo, hi = float(np.min(arr)), float(np.max(arr))
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo < -1e-3 or hi > 1.0 + 1e-3:
            raise ImageLoadError(
                f"{name}: float {kind} values must lie in [0, 1], found {lo:.4g}..{hi:.4g} "
                "(divide 0..255 floats by 255; undo mean/std normalisation first)"
            )
        arr = np.rint(np.clip(arr.astype(np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)
    elif arr.dtype != np.uint8:
        raise ImageLoadError(
            f"{name}: {kind} dtype {arr.dtype} is not uint8 (0..255) or float (0..1); cast 0..255 data to "
            "uint8, or save a 16-bit raster as TIFF and pass its path (percentile-stretched)"
        )
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.shape[-1] == 1:
        arr = np.repeat(arr, 3, axis=-1)
    return Image.fromarray(np.ascontiguousarray(arr), mode="RGB")
