"""Work proportional to unique work, whatever the cache setting: within a run an image file is decoded and hashed
once, each (caption, seed, size) rendered once and each distinct image embedded once. Counted in calls."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from recon_score import run as run_module
from recon_score import scorer as scorer_module
from recon_score.artifact_cache import ArtifactCache
from recon_score.images import FORMAT_KEY
from tests.smoke_cli import smoke


def _inputs(folder):
    """2 images of different sizes (so no render is shared between them) x 4 captions, 6 unique pairs, the
    images interleaved so a file's rows are not adjacent."""
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(folder / "a.png")
    Image.fromarray(rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)).save(folder / "b.png")
    rows = [("a.png", "a farm"), ("b.png", "a farm"), ("a.png", "a road"), ("b.png", "a lake"),
            ("a.png", "a farm"), ("b.png", "a lake"), ("a.png", "a river"), ("b.png", "a road")]  # fmt: skip
    caps = folder / "caps.jsonl"
    caps.write_text("".join(json.dumps({"image": i, "caption": c}) + "\n" for i, c in rows))
    return caps


@pytest.fixture
def counts(monkeypatch):
    seen = {"decoded": 0, "hashed originals": 0, "hashed": 0, "rendered": 0, "embedded": 0}
    load, digest = run_module.load_image, scorer_module.image_digest
    put_recon, put_emb = ArtifactCache.put_reconstruction, ArtifactCache.put_embedding

    def counting_load(*a, **k):
        seen["decoded"] += 1
        return load(*a, **k)

    def counting_digest(img):
        seen["hashed originals"] += FORMAT_KEY in img.info  # renders carry no source format
        seen["hashed"] += 1
        return digest(img)

    def counting_put_recon(self, *a, **k):
        seen["rendered"] += 1
        return put_recon(self, *a, **k)

    def counting_put_emb(self, *a, **k):
        seen["embedded"] += 1
        return put_emb(self, *a, **k)

    monkeypatch.setattr(run_module, "load_image", counting_load)
    monkeypatch.setattr(scorer_module, "image_digest", counting_digest)
    monkeypatch.setattr(ArtifactCache, "put_reconstruction", counting_put_recon)
    monkeypatch.setattr(ArtifactCache, "put_embedding", counting_put_emb)
    return seen


@pytest.mark.parametrize("seeds", [1, 2])
def test_no_cache_run_does_each_unique_piece_of_work_once(tmp_path, counts, seeds):
    caps = _inputs(tmp_path)
    argv = smoke("score", tmp_path / "run", "--no-cache", "--captions", str(caps), "--seeds", str(seeds))
    assert main(argv) == 0
    assert counts == {
        "decoded": 2,  # one per file
        "hashed originals": 2,  # one per file, not per row and seed
        "hashed": 2 + 6 * seeds,  # and each render once
        "rendered": 6 * seeds,  # one per unique (caption, seed, size)
        "embedded": 2 + 6 * seeds,  # each original once, each render once
    }
    rows = [json.loads(x) for x in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert rows[0]["recon_score"] == rows[4]["recon_score"]  # the repeated pair: the same render, same score
