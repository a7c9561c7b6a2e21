"""Multi-band, high-bit-depth and alpha rasters through the one reader, layout by layout.

Every file is generated here; the expected pixels are computed here from the generated arrays with
numpy.percentile (per band, 2nd..98th, over the valid pixels), never from the reader's own earlier output.
"""

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from recon_score.errors import ImageLoadError
from recon_score.images import load_image

tifffile = pytest.importorskip("tifffile")
REPO = Path(__file__).resolve().parents[2]
H, W = 48, 64


def _twelve_bit(n_bands: int, seed: int = 0) -> np.ndarray:
    """(H, W, n) uint16 holding 12-bit data, each band in its own range (so a joint stretch would be wrong)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(100 * b, 1200 + 700 * b, (H, W)) for b in range(n_bands)], axis=-1).astype(
        np.uint16
    )


def _expected(band: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """The documented quick-look, re-derived: percentiles of the valid pixels, linear, clipped; invalid -> 0."""
    band = band.astype(np.float64)
    valid = np.isfinite(band) if valid is None else valid & np.isfinite(band)
    lo, hi = np.percentile(band[valid], [2, 98])
    scaled = np.clip((np.where(valid, band, lo) - lo) / (hi - lo), 0, 1) * 255
    return np.where(valid, np.floor(scaled + 0.5), 0)


def _assert_band(out: np.ndarray, expected: np.ndarray) -> None:
    """Pixel statistics (mean, max) and every pixel within one grey level of the independent stretch."""
    out = out.astype(np.float64)
    assert abs(out.mean() - expected.mean()) < 0.05, (out.mean(), expected.mean())
    assert out.max() == expected.max()
    assert np.abs(out - expected).max() <= 1


def _write(path: Path, stack: np.ndarray, *, planar: str, **kw) -> Path:
    data = np.moveaxis(stack, -1, 0) if planar == "separate" else stack
    tifffile.imwrite(path, data, planarconfig=planar, metadata=None, **kw)
    return path


# (name, bands, dtype/fill, tifffile keywords): RGB+NIR written as GDAL does (RGB with an unspecified extra
# sample, or MinIsBlack with 4 samples), contiguous and planar
LAYOUTS = {
    "rgb-contig-uint16-12bit": (3, dict(photometric="rgb"), "contig"),
    "rgbnir-rgb-extra-contig-uint16": (4, dict(photometric="rgb", extrasamples=["unspecified"]), "contig"),
    "rgbnir-minisblack-contig-uint16": (4, dict(photometric="minisblack"), "contig"),
    "rgbnir-minisblack-planar-uint16": (4, dict(photometric="minisblack"), "separate"),
    "rgbnir-rgb-extra-planar-uint16": (4, dict(photometric="rgb", extrasamples=["unspecified"]), "separate"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_high_bit_depth_layouts_stretch_bands_1_to_3(tmp_path, layout):
    n, kw, planar = LAYOUTS[layout]
    stack = _twelve_bit(n)
    out = np.asarray(load_image(_write(tmp_path / "x.tif", stack, planar=planar, **kw)))
    assert out.shape == (H, W, 3)
    for b in range(3):
        _assert_band(out[..., b], _expected(stack[..., b]))


@pytest.mark.parametrize("planar", ["contig", "separate"])
@pytest.mark.parametrize("photometric", ["rgb", "minisblack"])
def test_rgbnir_uint8_keeps_rgb_exactly(tmp_path, planar, photometric):
    """8-bit data is shown as stored: no stretch, and NIR is not alpha (it used to darken the image)."""
    stack = np.random.default_rng(1).integers(0, 256, (H, W, 4)).astype(np.uint8)
    kw = {"extrasamples": ["unspecified"]} if photometric == "rgb" else {}
    path = _write(tmp_path / "x.tif", stack, planar=planar, photometric=photometric, **kw)
    out = np.asarray(load_image(path))
    assert np.array_equal(out, stack[..., :3])
    false_colour = np.asarray(load_image(path, bands=(4, 3, 2)))
    assert np.array_equal(false_colour, stack[..., [3, 2, 1]])


@pytest.mark.parametrize("planar", ["contig", "separate"])
def test_band_selection_picks_and_stretches_the_named_bands(tmp_path, planar):
    stack = _twelve_bit(4, seed=2)
    path = _write(tmp_path / "x.tif", stack, planar=planar, photometric="minisblack")
    out = np.asarray(load_image(path, bands=[4, 3, 2]))
    for channel, band in enumerate((3, 2, 1)):
        _assert_band(out[..., channel], _expected(stack[..., band]))
    gray = np.asarray(load_image(path, bands=[4]))
    assert np.array_equal(gray[..., 0], gray[..., 2])
    _assert_band(gray[..., 1], _expected(stack[..., 3]))


@pytest.mark.parametrize(
    "bands, message", [((5, 3, 2), "has 4 band"), ((0, 1, 2), "counted from 1"), ((1, 2), "1 or 3")]
)
def test_band_selection_errors_name_the_file(tmp_path, bands, message):
    path = _write(tmp_path / "four.tif", _twelve_bit(4), planar="contig", photometric="minisblack")
    with pytest.raises(ImageLoadError, match=message) as err:
        load_image(path, bands=bands)
    assert "four.tif" in str(err.value)


def test_band_selection_on_plain_rgb(tmp_path):
    rgb = np.random.default_rng(3).integers(0, 256, (H, W, 3)).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "x.png")
    assert np.array_equal(np.asarray(load_image(tmp_path / "x.png", bands=(3, 2, 1))), rgb[..., ::-1])
    with pytest.raises(ImageLoadError, match="has 3 band"):
        load_image(tmp_path / "x.png", bands=(4, 3, 2))


def test_float_with_nan_and_gdal_nodata(tmp_path):
    """NaN and the GDAL_NODATA value (tag 42113) are left out of the percentiles and shown as 0."""
    rng = np.random.default_rng(4)
    stack = (rng.random((H, W, 3)) * np.array([0.3, 0.6, 1.2])).astype(np.float32)
    stack[:10, :, 0] = np.nan
    stack[10:20, :, 1] = -9999.0
    stack[5, 5, 2] = np.inf
    path = tmp_path / "f.tif"
    tifffile.imwrite(
        path, stack, photometric="rgb", metadata=None, extratags=[(42113, "s", 0, "-9999", True)]
    )
    out = np.asarray(load_image(path))
    for b in range(3):
        valid = np.isfinite(stack[..., b]) & (stack[..., b] != -9999.0)
        _assert_band(out[..., b], _expected(stack[..., b], valid))
    assert (out[:10, :, 0] == 0).all() and (out[10:20, :, 1] == 0).all() and out[5, 5, 2] == 0


def test_single_band_uint16_with_nodata_is_gray(tmp_path):
    band = _twelve_bit(1, seed=5)[..., 0]
    band[:, :20] = 0  # a third of the scene outside the swath
    path = tmp_path / "g.tif"
    tifffile.imwrite(
        path, band, photometric="minisblack", metadata=None, extratags=[(42113, "s", 0, "0", True)]
    )
    out = np.asarray(load_image(path))
    for c in range(3):
        _assert_band(out[..., c], _expected(band, band != 0))


@pytest.mark.parametrize("kind", ["unassalpha", "assocalpha"])
def test_true_alpha_in_sixteen_bit_rgba_tiff(tmp_path, kind):
    """ExtraSamples = alpha stays alpha: transparent pixels are black and do not shape the stretch;
    unassociated alpha scales the colour, associated (premultiplied) colour is already on black."""
    rgb = _twelve_bit(3, seed=6)
    alpha = np.full((H, W), 65535, np.uint16)
    alpha[:, :16] = 0
    alpha[:, 16:24] = 32768
    stack = np.concatenate([rgb, alpha[..., None]], axis=-1)
    path = _write(tmp_path / "a.tif", stack, planar="contig", photometric="rgb", extrasamples=[kind])
    out = np.asarray(load_image(path))
    shown = alpha > 0
    for b in range(3):
        expected = _expected(rgb[..., b], shown)
        if kind == "unassalpha":
            expected = np.floor(expected * (alpha / 65535.0) + 0.5)
        _assert_band(out[..., b], expected)
    assert (out[:, :16] == 0).all()


def _png16(path: Path, arr: np.ndarray, trns: bytes | None = None) -> Path:
    """A 16-bit PNG written by hand (PIL cannot write 16-bit colour), rows cycling through all five filters
    so the decoder's bytes-per-pixel is exercised; `trns`: the body of a tRNS chunk (PNG spec 11.3.2.1)."""
    h, w, c = arr.shape
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    raw = np.ascontiguousarray(arr.astype(">u2")).view(np.uint8).reshape(h, w * c * 2).astype(np.int32)
    bpp = 2 * c
    rows = []
    for y in range(h):
        x = raw[y]
        up = raw[y - 1] if y else np.zeros_like(x)
        left = np.concatenate([np.zeros(bpp, np.int32), x[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int32), up[:-bpp]])
        kind = y % 5
        if kind == 0:
            pred = np.zeros_like(x)
        elif kind == 1:
            pred = left
        elif kind == 2:
            pred = up
        elif kind == 3:
            pred = (left + up) // 2
        else:
            p = left + up - upleft
            pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
        rows.append(bytes([kind]) + ((x - pred) % 256).astype(np.uint8).tobytes())

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0)
    data = zlib.compress(b"".join(rows))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + (chunk(b"tRNS", trns) if trns is not None else b"")
        + chunk(b"IDAT", data[:50])
        + chunk(b"IDAT", data[50:])
        + chunk(b"IEND", b"")
    )
    return path


def test_sixteen_bit_rgb_png_keeps_all_bits(tmp_path):
    stack = _twelve_bit(3, seed=7)
    out = np.asarray(load_image(_png16(tmp_path / "x.png", stack)))
    for b in range(3):
        _assert_band(out[..., b], _expected(stack[..., b]))


@pytest.mark.parametrize("colour_bands", [1, 3])
def test_sixteen_bit_png_with_alpha(tmp_path, colour_bands):
    colour = _twelve_bit(colour_bands, seed=8)
    alpha = np.full((H, W, 1), 65535, np.uint16)
    alpha[:8] = 0
    out = np.asarray(load_image(_png16(tmp_path / "x.png", np.concatenate([colour, alpha], axis=-1))))
    shown = alpha[..., 0] > 0
    for c in range(3):
        _assert_band(out[..., c], _expected(colour[..., min(c, colour_bands - 1)], shown))
    assert (out[:8] == 0).all()


@pytest.mark.parametrize("colour_bands", [1, 3])
def test_sixteen_bit_png_colour_key_is_transparency(tmp_path, colour_bands):
    """tRNS in a gray / RGB 16-bit PNG (PNG spec 11.3.2.1): pixels of exactly that 16-bit value are
    transparent (shown as 0, left out of the stretch); a value differing only in the low byte is not."""
    stack = _twelve_bit(colour_bands, seed=9)
    key = np.arange(1000, 1000 + colour_bands, dtype=np.uint16)
    stack[:6] = key
    stack[6, :5] = key + 1  # same high byte, another value: opaque
    out = np.asarray(load_image(_png16(tmp_path / "x.png", stack, trns=key.astype(">u2").tobytes())))
    shown = ~(stack == key).all(axis=-1)
    assert shown[6, :5].all() and not shown[:6].any()
    for c in range(3):
        _assert_band(out[..., c], _expected(stack[..., min(c, colour_bands - 1)], shown))
    assert (out[:6] == 0).all()


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_eight_bit_png_colour_key_matches_pil(tmp_path, mode):
    """An 8-bit PNG with a tRNS colour key reads as PIL's own RGBA conversion composited onto black."""
    rng = np.random.default_rng(3)
    shape = (H, W, 3) if mode == "RGB" else (H, W)
    arr = rng.integers(0, 256, shape, dtype=np.uint8)
    key = (10, 20, 30) if mode == "RGB" else 10
    arr[:5] = key
    path = tmp_path / "k.png"
    Image.fromarray(arr, mode).save(path, transparency=key)
    rgba = np.asarray(Image.open(path).convert("RGBA")).astype(np.float64)
    want = np.floor(rgba[..., :3] * rgba[..., 3:] / 255.0 + 0.5)
    got = np.asarray(load_image(path)).astype(np.float64)
    assert (rgba[:5, ..., 3] == 0).all() and (rgba[5:, ..., 3] == 255).any()
    np.testing.assert_allclose(got, want, atol=1)
    assert (got[:5] == 0).all()


def _bomb_tiff(path: Path, side: int, dtype, samples: int) -> Path:
    """A few-hundred-byte TIFF declaring side x side pixels: the header is all a reader may trust."""
    tifffile.imwrite(
        path,
        np.zeros((16, 16, samples), dtype),
        compression="zlib",
        rowsperstrip=16,
        metadata=None,
        photometric="rgb" if samples == 3 else "minisblack",
    )
    with tifffile.TiffFile(path, mode="r+b") as tif:
        for tag in ("ImageWidth", "ImageLength", "RowsPerStrip"):
            tif.pages[0].tags[tag].overwrite(side)
    return path


def test_declared_size_is_checked_before_decoding_under_a_memory_limit(tmp_path):
    """21000 x 21000 decodes to 1.2 GiB (uint8 RGB) or 1.6 GiB (float32): with 1 GiB of address space the
    child must still end with the size message for each file, not MemoryError or a kill."""
    files = [_bomb_tiff(tmp_path / "rgb8.tif", 21000, np.uint8, 3)]
    files.append(_bomb_tiff(tmp_path / "float.tif", 21000, np.float32, 1))
    png = tmp_path / "sixteen.png"
    ihdr = struct.pack(">IIBBBBB", 21000, 21000, 16, 2, 0, 0, 0)
    body = zlib.compress(b"\x00" * 100)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    png.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b""))
    files.append(png)
    child = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from recon_score.errors import ImageLoadError\n"
        "from recon_score.images import load_image\n"
        "for f in sys.argv[1:]:\n"
        "    try:\n"
        "        load_image(f)\n"
        "        print('LOADED', f)\n"
        "    except ImageLoadError as err:\n"
        "        print('ERROR', err)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", child, *map(str, files)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(files)
    for f, line in zip(files, lines):
        assert line.startswith("ERROR") and f.name in line and "21000x21000 pixels, more than" in line, line


def test_decoded_byte_ceiling(tmp_path, monkeypatch):
    """Under the pixel limit, over the byte limit (many float bands): refused from the header too."""
    import recon_score.images as images

    monkeypatch.setattr(images, "MAX_DECODED_BYTES", 16 * 16 * 8 * 4 - 1)
    path = tmp_path / "deep.tif"
    tifffile.imwrite(path, np.zeros((8, 16, 16), np.float32), photometric="minisblack", metadata=None)
    with pytest.raises(ImageLoadError, match="would decode to"):
        load_image(path)


def test_one_band_per_page(tmp_path):
    """tifffile writes a (bands, H, W) stack of more than 4 bands as one single-band page per band."""
    stack = _twelve_bit(8, seed=9)
    path = tmp_path / "pages.tif"
    tifffile.imwrite(path, np.moveaxis(stack, -1, 0), photometric="minisblack", metadata=None)
    with tifffile.TiffFile(path) as tif:
        assert len(tif.pages) == 8
    out = np.asarray(load_image(path))
    for b in range(3):
        _assert_band(out[..., b], _expected(stack[..., b]))
    picked = np.asarray(load_image(path, bands=(8, 4, 2)))
    for channel, band in enumerate((7, 3, 1)):
        _assert_band(picked[..., channel], _expected(stack[..., band]))


def test_score_bands_option_reaches_the_reader(tmp_path):
    """`score --bands 4,3,2` shows NIR as red: recorded in run.json, part of the run's fingerprint, and the
    similarity to the same reconstruction changes because the input pixels do."""
    from eval.cli import main

    stack = _twelve_bit(4, seed=10)
    stack[..., 3] = 4095 - stack[..., 0]  # NIR unlike red
    _write(tmp_path / "ms.tif", stack, planar="contig", photometric="minisblack")
    (tmp_path / "c.jsonl").write_text('{"id": "a", "image": "ms.tif", "caption": "fields and a road"}\n')
    runs = {}
    for label, extra in (("rgb", []), ("nir", ["--bands", "4,3,2"])):
        out = tmp_path / label
        argv = ["score", "--preset", "smoke", "--captions", str(tmp_path / "c.jsonl"), "--out", str(out),
                "--device", "cpu", "--no-cache", *extra]  # fmt: skip
        assert main(argv) == 0
        runs[label] = (
            json.loads((out / "run.json").read_text()),
            json.loads((out / "scores.jsonl").read_text().splitlines()[0]),
        )
    assert runs["rgb"][0]["bands"] is None and runs["nir"][0]["bands"] == [4, 3, 2]
    assert runs["rgb"][0]["fingerprint"] != runs["nir"][0]["fingerprint"]
    assert runs["rgb"][1]["error"] is None and runs["nir"][1]["error"] is None
    assert runs["rgb"][1]["cosine"] != runs["nir"][1]["cosine"]
    assert main(["score", "--preset", "smoke", "--out", str(tmp_path / "x"), "--bands", "1,2"]) == 2  # usage


def test_docs_examples_run(tmp_path, monkeypatch):
    """docs/images.md: the Python example runs as written; the shell command runs with --out in tmp_path."""
    import re
    import shlex

    from eval.cli import main

    doc = (REPO / "docs" / "images.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for code in re.findall(r"```python\n(.*?)```", doc, re.S):
        exec(compile(code, "docs/images.md", "exec"), {})
    (command,) = re.findall(r"```bash\n(.*?)```", doc, re.S)
    argv = shlex.split(command)
    assert argv[0] == "reconscore"
    argv = argv[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "run")
    assert main(argv) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["bands"] == [3, 2, 1]
