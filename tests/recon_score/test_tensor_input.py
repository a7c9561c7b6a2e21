"""Tensors and numpy arrays in: one conversion (images.to_pil_image), fixed value ranges, clear errors."""

import numpy as np
import pytest
import torch
from PIL import Image

from recon_score.errors import ImageLoadError
from recon_score.images import load_image, to_pil_image

CAPTIONS = ["There is a piece of farmland .", "two planes are parked near the terminal"]


@pytest.fixture(scope="module")
def ucm(sample_dir):
    return load_image(sample_dir / "images" / "UCM_1.tif")


def test_uint8_chw_matches_torchvision(ucm):
    """torchvision's to_pil_image is the outside reference for uint8 CHW tensors and HWC arrays."""
    from torchvision.transforms.functional import to_pil_image as tv_to_pil

    hwc = np.array(ucm)
    chw = torch.from_numpy(hwc.copy()).permute(2, 0, 1)
    np.testing.assert_array_equal(np.asarray(to_pil_image(chw)), np.asarray(tv_to_pil(chw)))
    np.testing.assert_array_equal(np.asarray(to_pil_image(hwc)), np.asarray(tv_to_pil(hwc)))
    np.testing.assert_array_equal(np.asarray(to_pil_image(chw.permute(1, 2, 0))), hwc)  # HWC tensor


def test_float_zero_one_is_rounded_within_one_level_of_torchvision(ucm):
    from torchvision.transforms.functional import to_pil_image as tv_to_pil

    chw = torch.from_numpy(np.array(ucm)).permute(2, 0, 1).float() / 255.0
    ours = np.asarray(to_pil_image(chw), dtype=np.int16)
    theirs = np.asarray(tv_to_pil(chw), dtype=np.int16)  # torchvision truncates 255 * x, we round
    assert np.abs(ours - theirs).max() <= 1
    np.testing.assert_array_equal(ours, np.array(ucm))  # round(255 * k / 255) == k
    np.testing.assert_array_equal(np.asarray(to_pil_image(chw.double().numpy())), np.array(ucm))
    np.testing.assert_array_equal(np.asarray(to_pil_image(chw.to(torch.bfloat16))).shape, (256, 256, 3))


def test_gray_and_bool_become_rgb():
    gray = torch.arange(12, dtype=torch.uint8).reshape(1, 3, 4)
    out = np.asarray(to_pil_image(gray))
    assert out.shape == (3, 4, 3) and np.all(out[..., 0] == out[..., 2]) and out[2, 3, 1] == 11
    out = np.asarray(to_pil_image(np.eye(3, dtype=bool)))
    assert out[0, 0, 0] == 255 and out[0, 1, 0] == 0


@pytest.mark.parametrize(
    ("x", "needle"),
    [
        (torch.rand(3, 8, 8) * 255, "must lie in [0, 1], found"),
        (torch.randn(3, 8, 8), "must lie in [0, 1]"),
        (torch.full((3, 4, 4), float("nan")), "must lie in [0, 1]"),
        (np.zeros((8, 8, 3), np.uint16), "dtype uint16 is not uint8"),
        (torch.zeros(3, 8, 8, dtype=torch.int64), "dtype int64 is not uint8"),
        (torch.zeros(4, 8, 8, dtype=torch.uint8), "no channel axis of size 1 or 3"),
        (np.zeros((8, 8, 5), np.uint8), "no channel axis of size 1 or 3"),
        (torch.zeros(2, 3, 8, 8), "is not one image"),
        (np.zeros((0, 8), np.uint8), "is empty"),
    ],
)
def test_bad_arrays_name_the_problem(x, needle):
    with pytest.raises(ImageLoadError, match=r"^img: ") as err:
        to_pil_image(x, name="img")
    assert needle in str(err.value)


def test_score_accepts_tensors_arrays_and_batches(smoke_scorer, ucm):
    """Was a TypeError: score() only took paths and PIL images."""
    ref = [r.recon_score for r in smoke_scorer.score(ucm, CAPTIONS)]
    chw = torch.from_numpy(np.array(ucm)).permute(2, 0, 1)
    for image in (chw, chw.float() / 255.0, np.array(ucm)):
        got = smoke_scorer.score(image, CAPTIONS)
        assert [r.recon_score for r in got] == pytest.approx(ref, abs=1e-9)
    batch = smoke_scorer.score(torch.stack([chw, chw]), CAPTIONS)  # BCHW: one image per caption
    assert [r.recon_score for r in batch] == pytest.approx(ref, abs=1e-9)
    mixed = smoke_scorer.score([chw, Image.fromarray(np.array(ucm))], CAPTIONS)
    assert [r.recon_score for r in mixed] == pytest.approx(ref, abs=1e-9)


def test_bad_tensor_is_an_item_error_not_a_crash(smoke_scorer, ucm):
    chw = torch.from_numpy(np.array(ucm)).permute(2, 0, 1)
    res = smoke_scorer.score([chw, chw.float()], CAPTIONS)
    assert res[0].ok and not res[1].ok
    assert res[1].error.startswith("image 1: float tensor values must lie in [0, 1]")
