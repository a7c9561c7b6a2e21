"""One image reader, resolved from the preset (recon_score.presets.reader_for), whatever the command: the same
RGBA or EXIF-rotated file, caption and preset give the same ReconScore via `score`, `metrics add` (the engine
`evaluate` and `correlate` share: eval.metrics.compute_metrics) and the Python API. The smoke preset reads as
`paper` does (the authors' `Image.open(p).convert("RGB")`), which ignores EXIF rotation and drops alpha."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from recon_score.images import load_image
from recon_score.presets import get_preset, reader_for
from tests.smoke_cli import smoke

CAPTION = "a farm next to a river"


def _files(folder):
    rng = np.random.default_rng(5)
    rgba = rng.integers(0, 256, (48, 64, 4), dtype=np.uint8)
    rgba[..., 3] = np.where(np.arange(64) < 32, 0, 255)[None, :]  # the left half fully transparent
    Image.fromarray(rgba, "RGBA").save(folder / "rgba.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    rgb = rng.integers(0, 256, (40, 72, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(folder / "exif.jpg", exif=exif, quality=95)
    return ["rgba.png", "exif.jpg"]


def test_the_reader_is_resolved_from_the_preset_in_one_place():
    assert reader_for("smoke") == reader_for("paper") == get_preset("paper").image_reader == "pil"
    assert reader_for(get_preset("smoke").replace(image_reader="eo")) == "eo"
    assert reader_for(None) == "eo"


def test_same_file_same_score_in_score_metrics_add_and_the_python_api(tmp_path, smoke_scorer):
    from eval.metrics import CaptionBatch, compute_metrics, metric_options
    from eval.selection import MetricSelector

    names = _files(tmp_path)
    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(json.dumps({"image": n, "caption": CAPTION}) + "\n" for n in names))
    assert main(smoke("score", tmp_path / "run", "--no-cache", "--captions", str(caps))) == 0
    scored = [
        json.loads(x)["recon_score"] for x in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()
    ]

    api = [smoke_scorer.score(tmp_path / n, CAPTION).recon_score for n in names]

    options = metric_options(encoder="smoke:open-clip", long_text="truncate", preset="smoke", device="cpu")
    batch = CaptionBatch([CAPTION] * 2, None, [tmp_path / n for n in names])
    engine = compute_metrics(["recon_score"], batch, options=options)[0]["recon_score"].tolist()
    assert batch.image_reader == "pil"  # every image metric of the batch sees the preset's pixels

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "scores.jsonl").write_text(
        "".join(json.dumps({"id": n, "image": n, "caption": CAPTION}) + "\n" for n in names)
    )
    argv = ["metrics", "add", str(plain), "--metrics", "recon_score", "--images", str(tmp_path)]
    assert main([*argv, "--preset", "smoke", "--device", "cpu"]) == 0
    added = [json.loads(x)["recon_score"] for x in (plain / "scores.metrics.jsonl").read_text().splitlines()]

    for values in (api, engine, added):
        assert values == pytest.approx(scored, abs=1e-4)
    # the other reader gives other pixels and another score, so the equalities above can fail
    eo = [smoke_scorer.score(load_image(tmp_path / n, reader="eo"), CAPTION).recon_score for n in names]
    assert all(abs(a - b) > 1e-3 for a, b in zip(eo, scored))
    assert MetricSelector("recon_score", preset="smoke").image_reader == "pil"  # what describe reads with
