"""The two readers of 8-bit files (recon_score.images.READERS): "pil" is the ReconScore authors' reading,
`Image.open(p).convert("RGB")` (their scripts/similarity_evaluator.py), checked here against PIL itself; "eo"
applies EXIF rotation and composites transparency onto black. Both read what PIL cannot convert right (16-bit,
more than 4 bands) by the same rules."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from PIL import Image

from recon_score.images import load_image
from recon_score.presets import PRESETS, get_preset


def _pixels(mode: str, size=(20, 14)) -> Image.Image:
    rng = np.random.default_rng(3)
    w, h = size
    if mode == "P":
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
        return img.quantize(16)
    bands = len(mode)
    arr = rng.integers(0, 256, (h, w, bands), dtype=np.uint8)
    if mode in ("RGBA", "LA"):
        arr[..., -1] = rng.choice([0, 128, 255], (h, w))  # transparent, half and opaque pixels
    return Image.fromarray(arr[..., 0] if bands == 1 else arr, mode)


def _authors(path) -> np.ndarray:
    """The authors' reading, by PIL itself."""
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "P", "L", "LA"])
@pytest.mark.parametrize("suffix", [".png", ".tif", ".bmp"])
def test_pil_reader_is_the_authors_reading(tmp_path, mode, suffix):
    if suffix == ".bmp" and mode in ("LA",):
        pytest.skip("BMP has no gray+alpha")
    path = tmp_path / f"x{suffix}"
    img = _pixels(mode)
    if mode == "P" and suffix == ".png":
        img.info["transparency"] = 0  # a transparent palette entry: the authors' convert ignores it
    img.save(path)
    got = np.asarray(load_image(path, reader="pil"))
    assert np.array_equal(got, _authors(path))


def test_pil_reader_ignores_exif_rotation_and_alpha_eo_applies_them(tmp_path):
    arr = np.zeros((10, 30, 4), dtype=np.uint8)
    arr[..., 0], arr[..., 3] = 200, 0  # red, fully transparent
    arr[:, :15, 3] = 255
    img = Image.fromarray(arr, "RGBA")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    path = tmp_path / "rot.png"
    img.save(path, exif=exif)
    pil, eo = load_image(path, reader="pil"), load_image(path, reader="eo")
    assert np.array_equal(np.asarray(pil), _authors(path)) and pil.size == (30, 10)
    assert eo.size == (10, 30)  # EXIF rotation applied
    assert (
        np.asarray(eo)[..., 0].min() == 0 and np.asarray(pil)[..., 0].min() == 200
    )  # alpha: black vs dropped


def test_pil_reader_in_memory_images():
    img = _pixels("RGBA")
    assert np.array_equal(np.asarray(load_image(img, reader="pil")), np.asarray(img.convert("RGB")))


def test_both_readers_stretch_what_pil_cannot_convert(tmp_path):
    """16-bit and many-band rasters have no authors' reading that means anything (PIL clips 16-bit to 255):
    both readers stretch them the same way."""
    arr = np.random.default_rng(0).integers(0, 4096, (16, 16, 5)).astype(np.uint16)
    path = tmp_path / "ms.tif"
    tifffile.imwrite(path, arr, photometric="minisblack", planarconfig="contig")
    assert np.array_equal(
        np.asarray(load_image(path, reader="pil")), np.asarray(load_image(path, reader="eo"))
    )
    assert np.asarray(load_image(path, reader="pil")).max() == 255


def test_every_preset_states_its_reader_and_paper_reads_as_the_authors():
    assert get_preset("paper").image_reader == "pil"
    assert all(p.image_reader in ("pil", "eo") for p in PRESETS.values())
    with pytest.raises(ValueError, match="image_reader must be one of"):
        get_preset("paper").replace(image_reader="cv2")
    with pytest.raises(ValueError, match="reader must be one of"):
        load_image(_pixels("RGB"), reader="cv2")


def test_run_json_records_the_reader(smoke_scorer):
    assert smoke_scorer.config()["preset"]["image_reader"] == "pil"


def test_preset_flag_offers_exactly_the_readers():
    """The --image-reader choices (kept in recon_score.presets so --help loads no imaging code) are the readers."""
    from recon_score.images import READERS
    from recon_score.presets import RECON_OVERRIDES

    assert set(RECON_OVERRIDES["image_reader"].choices) == set(READERS)
