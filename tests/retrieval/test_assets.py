"""Bundled data: BASIC's LAION-1M mean (a plain .npy, never a pickle), matched to its CLIP and recorded."""

import hashlib
import re
from importlib import resources

import numpy as np
import pytest
import torch

from retrieval.means import LAION_1M_CLIP_L14, bundled_image_mean
from retrieval.methods import build_method
from retrieval.methods.base import MethodContext, Resources


def test_laion_mean_is_a_safe_array_with_its_provenance():
    assets = resources.files("retrieval") / "assets"
    raw = (assets / LAION_1M_CLIP_L14.file).read_bytes()
    provenance = (assets / "PROVENANCE.md").read_text()
    assert hashlib.sha256(raw).hexdigest() in provenance  # the file is the one the note describes
    assert re.search(r"Licence: MIT", provenance) and "463cc1d4881854f9667977b6dab0e775902ea760" in provenance
    with resources.as_file(assets / LAION_1M_CLIP_L14.file) as path:
        arr = np.load(path, allow_pickle=False)
    assert arr.dtype == np.float32 and arr.shape == (768,) and np.isfinite(arr).all()
    assert 0.1 < float(np.linalg.norm(arr)) < 10.0  # an unnormalised mean of unit-ish CLIP embeddings


def test_the_mean_is_used_for_its_clip_only():
    mean, source = bundled_image_mean("open_clip:ViT-L-14/openai", 768)
    assert mean.shape == (768,) and "icir" in source
    assert bundled_image_mean("open_clip:ViT-L-14/laion2b_s32b_b82k", 768) is None
    assert bundled_image_mean("open_clip:ViT-L-14/openai", 512) is None


@pytest.mark.parametrize("given", [True, False])
def test_basic_centres_with_the_bundled_mean_or_the_database_mean(given):
    g = torch.Generator().manual_seed(0)
    d = 768
    db = torch.nn.functional.normalize(torch.randn(20, d, generator=g), dim=-1)
    q = db[:2]
    corpus = torch.nn.functional.normalize(torch.randn(8, d, generator=g), dim=-1)
    r = Resources(corpus_pos=corpus, corpus_neg=corpus.flip(0))
    if given:
        r.image_mean, r.image_mean_source = bundled_image_mean("open_clip:ViT-L-14/openai", d)
    cfg = {
        "projection": "false",
        "query_expansion": "false",
        "min_normalization": "false",
        "contextualize": "false",
    }
    prep = build_method("basic", cfg).prepare(MethodContext(q, q, db, torch.arange(2), r))
    note = next(n for n in prep.notes if n.startswith("basic: image mean"))
    assert ("LAION-1M" in note) if given else ("database mean" in note)
