"""The Python API as a notebook user meets it: short reprs, missing weights named when the scorer is built (with
the Python argument, not a CLI flag), and one explicit broadcast rule."""

import pytest
from PIL import Image

from recon_score.errors import ModelNotAvailableError
from recon_score.scorer import ReconResult, ReconScorer


def test_reprs_are_short_and_say_what_matters(smoke_scorer):
    text = repr(smoke_scorer)
    assert (
        text.startswith("ReconScorer(preset='smoke', t2i_model=") and "encoder=" in text and len(text) < 200
    )
    res = ReconResult(
        "a long caption " * 20, recon_score=71.234, seed=42, width=256, height=256, prompt="p" * 500
    )
    res.cache_key = "k" * 64
    shown = repr(res)
    assert shown.startswith("ReconResult(recon_score=71.23, caption='a long caption") and "seed=42" in shown
    assert "p" * 20 not in shown and "k" * 20 not in shown and len(shown) < 160


def test_from_preset_checks_the_weights_with_python_hints(tmp_path):
    with pytest.raises(ModelNotAvailableError) as err:
        ReconScorer.from_preset("paper", device="cpu", weights_dir=tmp_path)
    msg = str(err.value)
    assert "Tongyi-MAI/Z-Image" in msg and "dreamsim:ensemble" in msg
    assert "overrides={'t2i_model': ...}" in msg and "weights_dir=DIR" in msg
    assert "--t2i-model" not in msg and "--weights-dir" not in msg
    built = ReconScorer.from_preset("paper", device="cpu", weights_dir=tmp_path, check_models=False)
    assert built.preset.name == "paper"  # checked later, at first use, when asked


def test_one_image_in_a_list_is_not_broadcast(smoke_scorer):
    img = Image.new("RGB", (64, 64), "green")
    with pytest.raises(ValueError, match=r"a list of 1 image.*pass the image\s+itself"):
        smoke_scorer.score([img], ["a field", "a road"])
    with pytest.raises(ValueError, match="a list of 2 image"):
        smoke_scorer.score([img, img], ["a field"])
