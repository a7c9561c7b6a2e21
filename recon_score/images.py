"""The project's one image reader: any raster a remote-sensing user hands us becomes 8-bit RGB.

One reader so that ReconScore, the describer, retrieval and the caption datasets see the same pixels for the same
file. The rules per file layout and the two readers ("eo", "pil") are in docs/images.md.
"""

from __future__ import annotations

import hashlib
import os
import stat
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from recon_score.errors import ImageLoadError, InputError, ReconScoreWarning
from recon_score.textfiles import path_problem, special_kind

IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp", ".webp")  # what a folder of images holds
# One ceiling on every path: PIL's own decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS = 178,956,970
# pixels), which PIL applies to every file it opens; tifffile and the 16-bit PNG reader use the same number, so a
# file's fate does not depend on which reader its layout goes to. A mistaken 50k x 50k mosaic fails with a
# message instead of an out-of-memory kill.
MAX_PIXELS = 2 * 89_478_485
MAX_DECODED_BYTES = 4 * 2**30  # samples x bytes per sample, checked before decoding
MAX_FILE_BYTES = 2 * MAX_DECODED_BYTES  # on disk: nothing readable needs more (checked before it is hashed)
READERS = ("eo", "pil")  # how 8-bit files become RGB: see docs/images.md, "Two readers"
DEFAULT_READER = "eo"  # what a command without a ReconScore preset reads with
# the 8-bit modes PIL's convert("RGB") gets right: the "pil" reader's domain
_PIL_8BIT = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr")


def regular_file_problem(path: str | Path) -> str | None:
    """Why `path` (links followed) is not an image file that can be opened, or None (a regular file of at most
    MAX_FILE_BYTES, or nothing: the loader says so). Checked before anything opens it: a FIFO never ends."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RuntimeError) as err:
        return path_problem(err)
    if not stat.S_ISREG(st.st_mode):
        kind = special_kind(st.st_mode) or "not a regular file"
        return f"is {kind}, not a regular file"
    if st.st_size > MAX_FILE_BYTES:
        return (
            f"is {st.st_size / 2**30:.1f} GiB on disk, more than {MAX_FILE_BYTES / 2**30:.0f} GiB "
            "(no image this reader accepts needs that much); tile it first"
        )
    return None


def _stretch_to_uint8(band: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """One band -> uint8: linear from its 2nd to its 98th percentile over the valid pixels (finite and, when
    `valid` is given, marked True there); invalid pixels become 0."""
    band = band.astype(np.float64)
    valid = np.isfinite(band) if valid is None else valid & np.isfinite(band)
    values = band[valid]
    if values.size == 0:
        return np.zeros(band.shape, dtype=np.uint8)
    lo, hi = np.percentile(values, [2.0, 98.0])
    if hi <= lo:  # constant band
        hi = lo + 1.0
    out = (np.where(valid, band, lo) - lo) / (hi - lo)
    out = (np.clip(out, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    out[~valid] = 0
    return out


def _array_to_rgb(arr: np.ndarray) -> Image.Image:
    """The pixels of a PIL mode `to_rgb` does not convert (one band of I, F, I;16*; or RGBX) -> 8-bit RGB,
    each band of more than 8 bits stretched."""
    bands = [arr] if arr.ndim == 2 else [arr[..., i] for i in range(3)]
    out = [band if band.dtype == np.uint8 else _stretch_to_uint8(band) for band in bands]
    rgb = np.stack(out * 3 if len(out) == 1 else out, axis=-1)
    return Image.fromarray(np.ascontiguousarray(rgb), mode="RGB")


def to_rgb(img: Image.Image) -> Image.Image:
    """Any PIL image -> 8-bit RGB with the rules of docs/images.md."""
    img = ImageOps.exif_transpose(img) if hasattr(img, "getexif") else img
    mode = img.mode
    if mode == "RGB" and "transparency" not in img.info:
        return img
    if mode == "P" or (mode in ("L", "RGB") and "transparency" in img.info):  # a palette or a tRNS colour key
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


_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic and BigTIFF, both byte orders
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_GDAL_NODATA = 42113  # GDAL's ASCII nodata tag
# 16-bit PNG colour type -> (PIL mode, rawmodes giving the high and the low byte of each big-endian sample):
# PIL decodes (unfilters) the stream but keeps only the high byte of 16-bit colour, so decode twice
_PNG16 = {
    0: ("I;16", ("I;16B",)),  # gray: PIL keeps all 16 bits
    2: ("RGB", ("RGB;16B", "RGB;16L")),
    4: ("RGBA", ("RGBA",)),  # gray+alpha: 4 bytes a pixel, read as 4 plain bytes
    6: ("RGBA", ("RGBA;16B", "RGBA;16L")),
}


def _check_size(width: int, height: int, label: str, *, nbytes: int = 0) -> None:
    """Refuse from the declared header size (and decoded byte count), before anything is decoded."""
    if width * height > MAX_PIXELS:
        raise ImageLoadError(
            f"image {label!r} has {width}x{height} pixels, more than {MAX_PIXELS:,}; tile or downsample it first"
        )
    if nbytes > MAX_DECODED_BYTES:
        raise ImageLoadError(
            f"image {label!r} would decode to {nbytes / 2**30:.1f} GiB, more than "
            f"{MAX_DECODED_BYTES / 2**30:.0f} GiB; tile it or keep fewer bands"
        )


def _check_bands(bands, label: str) -> tuple[int, ...] | None:
    if bands is None:
        return None
    bands = tuple(bands)
    if len(bands) not in (1, 3) or not all(isinstance(b, (int, np.integer)) and b >= 1 for b in bands):
        raise ImageLoadError(
            f"image {label!r}: bands must be 1 or 3 band numbers counted from 1 (e.g. 4,3,2), got {bands}"
        )
    return tuple(int(b) for b in bands)


def _compose(
    stack: np.ndarray,
    label: str,
    *,
    bands: tuple[int, ...] | None,
    alpha: int | None = None,
    premultiplied: bool = False,
    nodata: float | None = None,
    invert: bool = False,
) -> Image.Image:
    """(H, W, S) samples of one file -> 8-bit RGB: `bands` (1-based; default 1-3, or 1 as gray) stretched over
    their valid pixels, a true `alpha` sample composited onto black unless it is shown, nodata/NaN/inf as 0."""
    n = stack.shape[-1]
    data = [i for i in range(n) if i != alpha]
    if bands is None:
        chosen = data[:3] if len(data) >= 3 else data[:1]
    else:
        too_big = [b for b in bands if b > n]
        if too_big:
            raise ImageLoadError(f"image {label!r} has {n} band(s); band {too_big[0]} was asked for")
        chosen = [b - 1 for b in bands]
    use_alpha = alpha is not None and alpha not in chosen
    shown = np.ones(stack.shape[:2], dtype=bool)
    if use_alpha:
        frac = _opacity(stack[..., alpha])
        shown = frac > 0  # fully transparent pixels do not shape the stretch
    out, has_data = [], False
    for i in chosen:
        band = stack[..., i]
        data = _holds_value(band, nodata)
        valid = shown & data
        has_data = has_data or bool(data.any())
        if band.dtype == np.uint8:
            b = np.where(valid, band, 0).astype(np.uint8)
        elif band.dtype == np.bool_:
            b = np.where(valid & band, 255, 0).astype(np.uint8)
        else:
            b = _stretch_to_uint8(band, valid)
        if invert:  # MinIsWhite
            b = np.where(valid, 255 - b, 0).astype(np.uint8)
        if use_alpha and not premultiplied:
            b = (b * frac + 0.5).astype(np.uint8)
        out.append(b)
    if not has_data:  # scoring a black image would give a number that means nothing
        what = (
            "NaN or infinite"
            if nodata is None or np.isnan(nodata)
            else f"NaN, infinite or {nodata:g} (nodata)"
        )
        raise ImageLoadError(
            f"image {label!r} holds no data: every pixel of band(s) {', '.join(str(i + 1) for i in chosen)} "
            f"is {what}"
        )
    rgb = np.stack(out * 3 if len(out) == 1 else out, axis=-1)
    return Image.fromarray(np.ascontiguousarray(rgb), mode="RGB")


def _holds_value(band: np.ndarray, nodata: float | None) -> np.ndarray:
    """The pixels of `band` that are a value (finite, not the nodata value); transparency aside."""
    data = np.isfinite(band) if band.dtype.kind == "f" else np.ones(band.shape, dtype=bool)
    if nodata is not None and not np.isnan(nodata):
        data &= band != nodata
    return data


def _read_tiff(f, label: str, bands: tuple[int, ...] | None, reader: str = "eo") -> Image.Image:
    """A TIFF, interpreted from its own tags (samples per pixel, planar config, bits, photometric, extra
    samples) rather than from the PIL mode they would be squeezed into."""
    import tifffile

    try:
        tif = tifffile.TiffFile(f)
    except Exception as err:  # not parseable as TIFF by tifffile; PIL may still know it
        f.seek(0)
        return _read_pil(f, label, bands, tiff_error=err, reader=reader)
    with tif:
        if not tif.pages:
            raise ImageLoadError(f"image {label!r} is not a readable TIFF: it holds no image")
        page = tif.pages[0]
        spp, extras = page.samplesperpixel, tuple(page.extrasamples or ())
        pages = [page]
        series = tif.series[0] if tif.series else None
        n_pages = len(series.pages) if series is not None else 1
        if spp == 1 and n_pages > 1 and tuple(series.shape) == (n_pages, *page.shape):
            pages = list(series.pages)  # one band per page (tifffile writes > 4 bands this way)
        nbytes = int(page.size) * page.dtype.itemsize * len(pages)
        _check_size(page.imagewidth, page.imagelength, label, nbytes=nbytes)
        photometric, bits = int(page.photometric), page.bitspersample
        PH = tifffile.PHOTOMETRIC
        alpha = None
        colour = spp - len(extras)
        if extras and extras[0] in (1, 2) and colour == (3 if photometric == PH.RGB else 1):
            alpha = colour  # a true alpha channel: ExtraSamples = associated (1) / unassociated (2) alpha
        pil_layout = bits == 8 and len(pages) == 1 and (spp in (1, 3) or alpha == spp - 1)
        if (
            photometric not in (PH.MINISBLACK, PH.MINISWHITE, PH.RGB)
            or bits < 8
            or (reader == "pil" and pil_layout and bands is None)
        ):
            f.seek(0)  # palette, YCbCr, CMYK, CIELAB, 1-4 bit: PIL converts right (and the authors' reading)
            return _read_pil(f, label, bands, reader=reader)
        try:
            planes = [_samples_last(p.asarray(), p.axes) for p in pages]
        except Exception as err:  # e.g. a compression tifffile cannot decode without imagecodecs
            if pil_layout:
                f.seek(0)
                return _read_pil(f, label, bands, tiff_error=err, reader=reader)  # PIL reads it the same way
            raise ImageLoadError(f"image {label!r} is not a readable TIFF: tifffile said {err}") from err
        nodata = None
        tag = page.tags.get(_GDAL_NODATA)
        if tag is not None:
            try:
                nodata = float(str(tag.value).strip().strip("\x00"))
            except ValueError:
                nodata = None
    stack = planes[0] if len(planes) == 1 else np.concatenate(planes, axis=-1)
    if alpha is not None and extras[0] == 2 and _alpha_is_data(stack[..., alpha]):
        warnings.warn(
            ReconScoreWarning(
                f"image {label!r}: band {alpha + 1} is tagged as unassociated alpha but is not a mask (most of "
                "its values lie between transparent and opaque, e.g. a near-infrared band); "
                f"read as a data band and not applied (--bands {alpha + 1} shows it)"
            ),
            stacklevel=2,
        )
        alpha = None
    return _compose(
        stack,
        label,
        bands=bands,
        alpha=alpha,
        premultiplied=alpha is not None and extras[0] == 1,
        nodata=nodata,
        invert=photometric == PH.MINISWHITE,
    )


def _alpha_is_data(a: np.ndarray) -> bool:
    """A band tagged as alpha that is really data (tifffile tags any 4th sample of an RGB image as unassociated
    alpha, so RGB+NIR products carry one): most of its values are neither fully transparent (0) nor fully opaque
    (the type's maximum). A real mask (0/max, soft only at its edges) keeps its meaning."""
    if a.dtype.kind not in "fui":
        return False
    frac = _opacity(a)
    return bool(np.mean((frac > 0) & (frac < 1)) > 0.5)


def _opacity(a: np.ndarray) -> np.ndarray:
    """An alpha band as 0..1 (float alpha clipped, NaN transparent; integer alpha over the type's maximum)."""
    if a.dtype.kind == "f":
        return np.clip(np.nan_to_num(a.astype(np.float64)), 0.0, 1.0)
    return a.astype(np.float64) / float(np.iinfo(a.dtype).max)


def _samples_last(arr: np.ndarray, axes: str) -> np.ndarray:
    """One TIFF page as (H, W, samples), whatever its planar configuration ('YXS' contig, 'SYX' separate)."""
    if "S" in axes:
        arr = np.moveaxis(arr, axes.index("S"), -1)
    else:
        arr = arr[..., None]
    while arr.ndim > 3:  # depth or other leading axes: the first plane
        arr = arr[0]
    return arr


def _read_png16(f, size: int, label: str, bands: tuple[int, ...] | None) -> Image.Image | None:
    """A 16-bit PNG with all 16 bits of every sample (PIL keeps only the high byte), or None for another PNG.
    Read chunk by chunk: a chunk that claims more bytes than the file has is refused before it is read."""
    import struct
    import zlib

    pos, idat, header, trns = 8, [], None, None
    f.seek(pos)
    while pos + 8 <= size:
        head = f.read(8)
        (length,), kind = struct.unpack(">I", head[:4]), head[4:8]
        if len(head) < 8 or pos + 12 + length > size:
            raise ImageLoadError(f"image {label!r} is corrupt or not an image: truncated PNG chunk {kind!r}")
        if header is None and kind != b"IHDR":
            raise ImageLoadError(f"image {label!r} is corrupt or not an image: PNG without IHDR first")
        body, crc = f.read(length), f.read(4)
        if zlib.crc32(kind + body) & 0xFFFFFFFF != struct.unpack(">I", crc)[0]:
            raise ImageLoadError(f"image {label!r} is corrupt or not an image: bad CRC in PNG chunk {kind!r}")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body[:13])
            if header[2] != 16 or header[3] not in _PNG16:
                return None
            _check_size(header[0], header[1], label, nbytes=header[0] * header[1] * 8)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"tRNS":
            trns = body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None or not idat:
        raise ImageLoadError(f"image {label!r} is corrupt or not an image: PNG without IHDR or IDAT")
    width, height, _, colour, _, _, interlace = header
    mode, rawmodes = _PNG16[colour]
    stream = b"".join(idat)
    try:
        parts = [
            np.asarray(Image.frombytes(mode, (width, height), stream, "zip", r, interlace)) for r in rawmodes
        ]
    except (ValueError, OSError) as err:
        raise ImageLoadError(f"image {label!r} is corrupt or not an image: {err}") from err
    if colour == 0:
        stack = parts[0].astype(np.uint16)[..., None]
    elif colour == 4:
        b = parts[0].astype(np.uint16)
        stack = b[..., 0::2] * 256 + b[..., 1::2]
    else:
        stack = parts[0].astype(np.uint16) * 256 + parts[1]
    alpha = {4: 1, 6: 3}.get(colour)
    if trns is not None and colour in (0, 2) and len(trns) >= 2 * stack.shape[-1]:
        # tRNS colour key (PNG spec 11.3.2.1): pixels of exactly this 16-bit gray / RGB value are transparent
        key = np.frombuffer(trns[: 2 * stack.shape[-1]], ">u2").astype(np.uint16)
        opaque = np.where((stack == key).all(axis=-1), 0, 65535).astype(np.uint16)
        stack, alpha = np.concatenate([stack, opaque[..., None]], axis=-1), stack.shape[-1]
    return _compose(stack, label, bands=bands, alpha=alpha)


def _read_pil(
    f,
    label: str,
    bands: tuple[int, ...] | None,
    *,
    tiff_error: Exception | None = None,
    reader: str = "eo",
) -> Image.Image:
    """Everything PIL interprets correctly: JPEG, 8-bit PNG, GIF, BMP, WebP, palette/YCbCr/CMYK TIFFs.
    PIL reads the header on open; the pixels are read only after the declared size is checked."""
    try:
        # PIL warns (rather than fails) on damaged metadata; decoding below decides whether the pixels are usable
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with Image.open(f) as img:
                _check_size(img.width, img.height, label)
                img.load()
                n = 3 if img.mode == "P" else len([b for b in img.getbands() if b not in ("A", "a")])
                rgb = _convert(img, reader, bands)
                if rgb is img:
                    rgb = img.copy()  # the file closes on leaving this block
    except ImageLoadError:
        raise
    except Image.DecompressionBombError as err:
        pixels = str(err).split(" pixels)")[0].rsplit("(", 1)[-1]  # PIL: "Image size (N pixels) exceeds ..."
        raise ImageLoadError(
            f"image {label!r} has {pixels} pixels, more than {MAX_PIXELS:,}; tile or downsample it first"
        ) from err
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        said = str(err).replace(f" {f!r}", "")  # PIL names the open file object; the label names the file
        if tiff_error is not None:
            raise ImageLoadError(
                f"image {label!r} is not a readable TIFF: tifffile said {tiff_error}; PIL said {said}"
            ) from err
        raise ImageLoadError(f"image {label!r} is corrupt or not an image: {said}") from err
    if bands is None:
        return rgb
    return _compose(np.asarray(rgb)[..., :n], label, bands=bands)


def _convert(img: Image.Image, reader: str, bands: tuple[int, ...] | None) -> Image.Image:
    """The authors' reading (`Image.open(p).convert("RGB")`, no EXIF rotation, alpha dropped) with the "pil"
    reader, no `bands` and an 8-bit mode it converts right; the "eo" rules (`to_rgb`) otherwise."""
    if reader == "pil" and bands is None and img.mode in _PIL_8BIT:
        return img if img.mode == "RGB" else img.convert("RGB")
    return to_rgb(img)


def load_image(
    source: Image.Image | str | Path,
    *,
    name: str | None = None,
    bands: Sequence[int] | None = None,
    reader: str = "eo",
) -> Image.Image:
    """Open `source` (a path or a PIL image) as 8-bit RGB by the rules of docs/images.md: `bands` (1-based, three
    for R, G, B or one for gray, e.g. (4, 3, 2)) and `reader` ("eo" or "pil", the ReconScore authors' reading).
    ImageLoadError, naming the file, for a file that cannot be read so or bands it does not have."""
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    label = name or (str(source) if not isinstance(source, Image.Image) else "<PIL image>")
    bands = _check_bands(bands, label)
    if isinstance(source, Image.Image):
        rgb = _convert(source, reader, bands)
        rgb = rgb if bands is None else _compose(np.asarray(rgb), label, bands=bands)
        return rgb if rgb is source else _with_format(rgb, source_format(source))
    problem = regular_file_problem(source)
    if problem is None and not os.path.lexists(source):
        problem = "not found"
    if problem == "not found" and label != label.strip():
        problem += " (the path as given starts or ends with white space)"
    if problem is not None:
        raise ImageLoadError(f"image {label!r} {problem}")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the check, opening it does not wait for a writer
        f = open(source, "rb", opener=lambda p, flags: os.open(p, flags | getattr(os, "O_NONBLOCK", 0)))  # noqa: SIM115
    except (OSError, ValueError, RuntimeError) as err:
        raise ImageLoadError(f"image {label!r} {path_problem(err)}") from err
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ImageLoadError(f"image {label!r} is not a regular file")
        if st.st_size == 0:
            raise ImageLoadError(f"image {label!r} is empty (0 bytes)")
        try:
            rgb = _read_file(f, st.st_size, label, bands, reader)
            return _with_format(rgb, Image.registered_extensions().get(Path(source).suffix.lower()))
        except MemoryError as err:
            raise ImageLoadError(f"image {label!r} does not fit in memory; tile or downsample it") from err
        except OSError as err:
            if isinstance(err, UnidentifiedImageError):
                raise
            raise ImageLoadError(f"image {label!r} could not be read: {err.strerror or err}") from err


# The render round trip of the ReconScore authors' code (docs/protocol.md): a .jpg original's reconstruction is
# scored after a JPEG save. The format is PIL's for the original's file extension, recorded under FORMAT_KEY.
FORMAT_KEY = "reconscore.source_format"
ROUND_TRIP_SAVES = {  # what PIL's defaults do when a render is saved in each format (run.json records this)
    "JPEG": {"lossless": False, "quality": 75, "subsampling": "4:2:0"},
    "WEBP": {"lossless": False, "quality": 80},
    "GIF": {"lossless": False, "palette": "256 colours (PIL's quantisation)"},
    "PNG": {"lossless": True},
    "TIFF": {"lossless": True, "compression": None},
    "BMP": {"lossless": True},
}


def source_format(img: Image.Image) -> str | None:
    """The PIL format a loaded image's file extension names (FORMAT_KEY), else the format PIL opened it as."""
    return img.info.get(FORMAT_KEY) or img.format


def _with_format(img: Image.Image, fmt: str | None) -> Image.Image:
    if fmt:
        img.info[FORMAT_KEY] = fmt
    return img


def round_trip(img: Image.Image, fmt: str | None) -> Image.Image:
    """`img` saved in PIL format `fmt` with PIL's defaults and read back as `Image.open(p).convert("RGB")`, as
    the authors' scripts do with a render; unchanged for no format, one PIL cannot write, or a lossless one."""
    import io

    if ROUND_TRIP_SAVES.get(fmt or "", {}).get("lossless"):
        return img
    Image.init()  # every plugin registered, so Image.SAVE lists every format PIL writes
    if not fmt or fmt not in Image.SAVE:
        return img
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    buf.seek(0)
    with Image.open(buf) as saved:
        return saved.convert("RGB")


def _read_file(f, size: int, label: str, bands: tuple[int, ...] | None, reader: str) -> Image.Image:
    """Dispatch on the magic bytes; each reader checks the declared size before it reads the pixels."""
    head = f.read(8)
    f.seek(0)
    if head[:4] in _TIFF_MAGIC:
        return _read_tiff(f, label, bands, reader)
    if head.startswith(_PNG_MAGIC):
        img = _read_png16(f, size, label, bands)
        if img is not None:
            return img
        f.seek(0)
    return _read_pil(f, label, bands, reader=reader)


def follow_symlinks() -> bool:
    """The symlink policy: follow links present on disk (default) unless RECONSCORE_FOLLOW_SYMLINKS=0
    (`reconscore --no-follow-symlinks ...` sets it for the run and its worker processes)."""
    return os.environ.get("RECONSCORE_FOLLOW_SYMLINKS", "1").strip().lower() not in ("0", "false", "no")


def written_under(root: Path, relative: str, *, what: str = "image") -> Path:
    """`root / relative` as written (normalised, links not followed), else InputError when it leaves `root`
    (``..``, an absolute path)."""
    root_abs = Path(os.path.normpath(os.path.abspath(root)))
    written = Path(os.path.normpath(os.path.join(root_abs, relative)))
    if not (written.is_relative_to(root_abs) or written.is_relative_to(root.resolve())):
        raise InputError(
            f"{what} path {relative!r} is {written}, outside the data root {root_abs}; "
            "paths must stay inside --images ROOT (or the captions file's folder)"
        )
    return written


def resolve_under(root: Path, relative: str, *, what: str = "image", follow: bool | None = None) -> Path:
    """`root / relative` with its symlinks resolved, else InputError: the path as written (``..``, an absolute
    path) must stay inside `root`, and, when symlinks are not followed (`follow=False` or the policy), so must
    where it resolves; it must resolve, and to a regular file that is not too big."""
    if not relative or not str(relative).strip():
        raise InputError(f"empty {what} path")
    written, root_resolved = written_under(root, relative, what=what), root.resolve()
    try:
        candidate = written.resolve()
    except (OSError, ValueError, RuntimeError) as err:  # a symlink loop, a NUL byte, a name over 255 bytes
        raise InputError(f"{what} path {relative!r} {path_problem(err)}") from None
    if not (follow_symlinks() if follow is None else follow) and not candidate.is_relative_to(root_resolved):
        raise InputError(
            f"{what} path {relative!r} is a symlink to {candidate}, outside the data root {root_resolved} "
            "(refused: --no-follow-symlinks)"
        )
    problem = regular_file_problem(candidate)
    if problem is not None:  # a FIFO or a device is refused here, before anything opens or hashes it
        raise InputError(f"{what} path {relative!r} {problem}")
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
    """One in-memory image (torch tensor or numpy array) -> 8-bit RGB, with fixed value ranges (uint8 0..255,
    float 0..1; the table is in docs/python-api.md). Unlike files, arrays come from code that knows their range,
    so nothing is stretched. ImageLoadError for another dtype, shape, channel count or value range."""
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
