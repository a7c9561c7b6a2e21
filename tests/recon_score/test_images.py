"""The one image reader: every odd raster becomes 8-bit RGB, bad files get errors naming them."""

import numpy as np
import pytest
from PIL import Image

from recon_score.errors import ImageLoadError, InputError
from recon_score.images import image_digest, load_image, resolve_under


def test_real_tiffs_load_as_rgb(rs_mini):
    for name in ("UCM_1.tif", "Sydney_1.tif", "RSICD_00001.jpg"):
        path = rs_mini / name
        if not path.exists():
            pytest.skip("shared rs_mini data not present")
        img = load_image(path)
        with Image.open(
            path
        ) as reference:  # 8-bit RGB files: PIL's own decoding, pixel for pixel, no stretch
            assert reference.mode == "RGB"
            assert img.mode == "RGB" and np.array_equal(np.asarray(img), np.asarray(reference.convert("RGB")))


@pytest.mark.parametrize("mode", ["L", "1", "P", "RGBA", "LA", "CMYK", "I;16", "I", "F"])
def test_modes_become_rgb(tmp_path, mode):
    rng = np.random.default_rng(0)
    if mode in ("I;16",):
        img = Image.fromarray(rng.integers(0, 4096, (20, 30), dtype=np.uint16))
    elif mode == "I":
        img = Image.fromarray(rng.integers(-5, 70000, (20, 30)).astype(np.int32))
    elif mode == "F":
        img = Image.fromarray(rng.random((20, 30)).astype(np.float32))
    else:
        img = Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).convert(mode)
    ext = ".tif" if mode in ("I;16", "I", "F", "CMYK") else ".png"
    path = tmp_path / f"x{ext}"
    img.save(path)
    out = load_image(path)
    assert out.mode == "RGB" and out.size == (30, 20)


def test_sixteen_bit_is_stretched_not_clipped(tmp_path):
    arr = (
        np.linspace(0, 2047, 64 * 64).reshape(64, 64).astype(np.uint16)
    )  # an 11-bit sensor in 16-bit storage
    Image.fromarray(arr).save(tmp_path / "a.tif")
    out = np.asarray(load_image(tmp_path / "a.tif"))
    assert out.min() == 0 and out.max() == 255  # 2nd..98th percentile mapped to the full byte range
    assert np.all(out[..., 0] == out[..., 1])  # gray replicated to RGB


def test_transparent_pixels_become_black(tmp_path):
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., :3] = 200
    rgba[0, 0, 3] = 255
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    out = np.asarray(load_image(tmp_path / "a.png"))
    assert tuple(out[0, 0]) == (200, 200, 200) and tuple(out[1, 1]) == (0, 0, 0)


def test_multiband_tiff_takes_first_three_bands(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    bands = np.stack([np.full((16, 16), v, np.uint8) for v in (10, 20, 30, 40, 50)], axis=-1)
    tifffile.imwrite(tmp_path / "ms.tif", bands, photometric="minisblack", planarconfig="contig")
    out = np.asarray(load_image(tmp_path / "ms.tif"))
    assert out.shape == (16, 16, 3) and tuple(out[0, 0]) == (10, 20, 30)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n garbage", "corrupt"),
        (b"II*\x00garbage", "TIFF"),
    ],
)
def test_bad_files_name_the_file(tmp_path, content, message):
    name = "bad.tif" if content and content.startswith(b"II") else "bad.png"
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageLoadError, match=message) as err:
        load_image(path)
    assert name in str(err.value)


def test_truncated_jpeg_is_an_error(tmp_path, rs_mini):
    src = rs_mini / "RSICD_00001.jpg"
    if not src.exists():
        pytest.skip("shared rs_mini data not present")
    (tmp_path / "cut.jpg").write_bytes(src.read_bytes()[:2000])
    with pytest.raises(ImageLoadError, match=r"cut\.jpg"):
        load_image(tmp_path / "cut.jpg")


def test_paths_may_not_escape_the_root(tmp_path):
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret.png").write_bytes(b"x")
    assert resolve_under(root, "sub/a.png") == (root / "sub" / "a.png").resolve()
    for bad in ("../secret.png", "sub/../../secret.png", str(tmp_path / "secret.png")):
        with pytest.raises(InputError, match="outside the data root"):
            resolve_under(root, bad)
    (root / "link.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(InputError, match=r"symlink to .*outside the data root"):
        resolve_under(root, "link.png", follow=False)


def test_symlink_policy(tmp_path, monkeypatch):
    """Links on disk are followed by default; `--no-follow-symlinks` refuses those pointing outside the root."""
    store = tmp_path / "store"
    (store / "scenes").mkdir(parents=True)
    (store / "scenes" / "a.png").write_bytes(b"x")
    (tmp_path / "outside.png").write_bytes(b"y")
    (tmp_path / "data").symlink_to(store)  # the dataset folder itself is a link
    root = tmp_path / "data"
    (store / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.png").write_bytes(b"z")
    (store / "file-link.png").symlink_to(tmp_path / "outside.png")
    monkeypatch.delenv("RECONSCORE_FOLLOW_SYMLINKS", raising=False)
    assert resolve_under(root, "scenes/a.png") == (store / "scenes" / "a.png").resolve()
    assert resolve_under(root, "linked/b.png") == (tmp_path / "elsewhere" / "b.png").resolve()
    assert resolve_under(root, "file-link.png") == (tmp_path / "outside.png").resolve()
    assert resolve_under(root, str(root / "scenes" / "a.png")) == (store / "scenes" / "a.png").resolve()
    with pytest.raises(
        InputError, match="outside the data root"
    ):  # textual escapes: refused whatever the policy
        resolve_under(root, "../outside.png")
    monkeypatch.setenv("RECONSCORE_FOLLOW_SYMLINKS", "0")
    assert (
        resolve_under(root, "scenes/a.png") == (store / "scenes" / "a.png").resolve()
    )  # a linked root is fine
    for linked in ("linked/b.png", "file-link.png"):
        with pytest.raises(InputError, match="no-follow-symlinks"):
            resolve_under(root, linked)


def test_digest_depends_on_pixels_only(tmp_path):
    img = Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3))
    img.save(tmp_path / "a.png")
    img.save(tmp_path / "a.tif")
    assert image_digest(load_image(tmp_path / "a.png")) == image_digest(load_image(tmp_path / "a.tif"))
    other = Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)[::-1].copy())
    assert image_digest(other) != image_digest(img)
