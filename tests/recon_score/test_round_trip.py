"""The authors' render round trip (`render_round_trip`, on in `paper`): their batch_generate.py saves the
reconstruction as `{stem}_n.{original extension}` with PIL's defaults and batch_evaluate.py scores
`Image.open(that file).convert("RGB")`. Checked against PIL's own save/open of a file on disk."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from recon_score.artifact_cache import ArtifactCache
from recon_score.presets import get_preset
from recon_score.scorer import ReconScorer

CAPTION = "a farm next to a river"


@pytest.fixture(scope="module")
def scorers():
    on = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    off = ReconScorer(dataclasses.replace(on.preset, render_round_trip=False), device="cpu", cache=on.cache)
    off._encoder = on.encoder  # one tiny encoder for both
    off.renderer = on.renderer
    return on, off


def _original(folder, suffix):
    arr = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    path = folder / f"tile{suffix}"
    Image.fromarray(arr).save(path)
    return path


def _authors(render: Image.Image, original, folder) -> Image.Image:
    """batch_generate.py + batch_evaluate.py with PIL itself: save by extension, open, convert."""
    stem, ext = original.name.split(".")
    path = folder / f"{stem}_n.{ext}"
    render.save(path)
    return Image.open(path).convert("RGB")


@pytest.mark.parametrize("suffix, lossy", [(".jpg", True), (".png", False), (".tif", False)])
def test_the_scored_render_is_pils_save_and_open_of_the_original_format(tmp_path, scorers, suffix, lossy):
    on, off = scorers
    assert get_preset("paper").render_round_trip and get_preset("smoke").render_round_trip
    original = _original(tmp_path, suffix)
    raw = off.score(original, CAPTION)
    tripped = on.score(original, CAPTION)
    reference = _authors(raw.reconstruction, original, tmp_path)
    assert np.array_equal(np.asarray(tripped.reconstruction), np.asarray(reference))
    assert np.array_equal(np.asarray(raw.reconstruction), np.asarray(reference)) is (not lossy)
    assert tripped.recon_score == pytest.approx(
        on.compare([Image.open(original).convert("RGB")], [reference])[0].recon_score, abs=1e-4
    )
    if lossy:
        assert tripped.recon_score != raw.recon_score


def test_run_json_records_the_saved_format_and_quality_pil_uses(scorers):
    """The recorded JPEG quality and subsampling are PIL's defaults: saving with them explicitly gives the
    same bytes as a save with no options."""
    on, off = scorers
    saves = on.config()["render_round_trip"]
    assert saves["JPEG"] == {"lossless": False, "quality": 75, "subsampling": "4:2:0"}
    assert saves["PNG"]["lossless"] and saves["TIFF"]["lossless"]
    assert "render_round_trip" not in off.config()
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))
    default, explicit = io.BytesIO(), io.BytesIO()
    img.save(default, format="JPEG")
    img.save(explicit, format="JPEG", quality=75, subsampling="4:2:0")
    assert default.getvalue() == explicit.getvalue()
    webp, webp80 = io.BytesIO(), io.BytesIO()
    img.save(webp, format="WEBP")
    img.save(webp80, format="WEBP", quality=80)
    assert webp.getvalue() == webp80.getvalue() and saves["WEBP"]["quality"] == 80
