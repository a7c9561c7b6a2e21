"""The VLM's pixels under the `qwen-vl-utils` image input equal what the authors' `RemoteDescriber.py` feeds it:
the file's path through the real `qwen_vl_utils.process_vision_info` (RGBA onto white, no EXIF rotation),
whatever the project's scoring read made of the file."""

import numpy as np
import pytest
from PIL import Image

from describer.backends import CaptionRequest, Sampling, build_captioner
from recon_score.images import load_image
from tests.describer.test_authors_io import ProcessorSpy

qwen_vl_utils = pytest.importorskip("qwen_vl_utils")


def _files(folder):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (60, 90), dtype=np.uint8)
    out = {}
    out["rgba"] = folder / "rgba.png"
    Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(out["rgba"])
    out["la"] = folder / "la.png"
    Image.fromarray(np.dstack([rgb[..., 0], alpha]), "LA").save(out["la"])
    out["p_transparency"] = folder / "palette.png"
    pal = Image.fromarray(rgb).quantize(16)
    pal.info["transparency"] = 3
    pal.save(out["p_transparency"], transparency=3)
    out["exif_rotated"] = folder / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    Image.fromarray(rgb).save(out["exif_rotated"], exif=exif, quality=95)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("vlm"))


@pytest.fixture(scope="module")
def captioner():
    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu", image_input="qwen-vl-utils")
    cap._load()
    return cap


def authors_pixels(path) -> np.ndarray:
    """RemoteDescriber.py's call: the path in the message, process_vision_info's defaults."""
    messages = [
        {"role": "user", "content": [{"type": "image", "image": str(path)}, {"type": "text", "text": "x"}]}
    ]
    images, _ = qwen_vl_utils.process_vision_info(messages)
    return np.asarray(images[0])


@pytest.mark.parametrize("kind", ["rgba", "la", "p_transparency", "exif_rotated"])
def test_the_vlm_gets_the_authors_pixels(files, captioner, monkeypatch, kind):
    path = files[kind]
    spy = ProcessorSpy(captioner._processor)
    monkeypatch.setattr(captioner, "_processor", spy)
    scoring_read = load_image(path)
    request = CaptionRequest(scoring_read, seed=1, path=str(path))
    captioner.generate([request], "Describe.", Sampling(n=1, max_new_tokens=2))
    (seen,) = spy.images[0]
    assert np.array_equal(np.asarray(seen), authors_pixels(path))


def test_an_image_pil_cannot_open_falls_back_to_the_projects_read(tmp_path, captioner, monkeypatch):
    path = tmp_path / "not-an-image.png"
    path.write_bytes(b"not a png")
    spy = ProcessorSpy(captioner._processor)
    monkeypatch.setattr(captioner, "_processor", spy)
    image = Image.new("RGB", (56, 56), (10, 20, 30))
    captioner.generate(
        [CaptionRequest(image, seed=1, path=str(path))], "Describe.", Sampling(n=1, max_new_tokens=2)
    )
    (seen,) = spy.images[0]
    assert np.asarray(seen)[0, 0].tolist() == [10, 20, 30]
