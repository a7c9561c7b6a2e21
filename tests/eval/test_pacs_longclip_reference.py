"""PAC-S / RefPAC-S / PAC-S++ and Long-CLIP against the authors' code: tiny random checkpoints in the authors'
layouts were run once through aimagelab/pacscore and beichenzbc/Long-CLIP (tests/data/metrics/pacscore and
longclip: the scripts, the commits, the outputs). Here the same files go through reconscore's loaders."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from eval.metrics import CaptionBatch, build_metric
from recon_score.encoders import build_encoder
from recon_score.encoders.open_clip import RELEASES
from tests.eval.metric_helpers import DATA

PAC = DATA / "metrics" / "pacscore"
LONG = DATA / "metrics" / "longclip"
# the tiny architectures the reference scripts built, as open_clip configs (same keys and shapes)
TINY_L = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 16, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
TINY_OPENAI = {  # OpenAI layout as build_model derives it: heads = width // 64, QuickGELU
    "embed_dim": 16,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 16, "layers": 1, "width": 64, "patch_size": 8, "head_width": 64},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 1, "layers": 1},
}
TINY_LONG = {**TINY_OPENAI, "text_cfg": {**TINY_OPENAI["text_cfg"], "context_length": 248}}


@pytest.fixture
def tiny_archs(tmp_path, monkeypatch):
    """Registers the tiny configs with open_clip and points copies of the real releases at them."""
    import open_clip

    cfg = tmp_path / "cfg"
    cfg.mkdir()
    for name, c in (("TinyRefL", TINY_L), ("TinyRefB", TINY_OPENAI), ("TinyRefLong", TINY_LONG)):
        (cfg / f"{name}.json").write_text(json.dumps(c))
    open_clip.add_model_config(cfg)
    for real, arch in (
        ("pacs-ViT-L-14", "TinyRefL"),
        ("pacs++-ViT-B-32", "TinyRefB"),
        ("pacs++-ViT-B-32-lora-all", "TinyRefB"),
        ("longclip-B", "TinyRefLong"),
        ("longclip-B-fp32", "TinyRefLong"),
    ):
        monkeypatch.setitem(RELEASES, f"tiny-{real}", replace(RELEASES[real], arch=arch))
    return tmp_path


def _unpack(src, dst):
    dst.write_bytes(gzip.decompress(src.read_bytes()))
    return dst


def _pac_case():
    ref = np.load(PAC / "pacscore_reference.npz")
    refs = json.loads((PAC / "refs.json").read_text())
    images = [PAC / f"image{i}.png" for i in range(3)]
    return ref, CaptionBatch([str(c) for c in ref["cands"]], refs, images)


def _scores(release: str, path, batch):
    enc = f"open_clip:tiny-{release}@{path}"
    pac = build_metric("pacscore", encoder=enc, device="cpu").score(batch).values
    refpac = build_metric("refpacscore", encoder=enc, device="cpu").score(batch).values
    return pac, refpac, build_encoder(enc, device="cpu")


def test_pacs_vit_l_14_normalises_as_the_authors_open_clip_config(tiny_archs):
    """compute_metrics.py builds ViT-L/14 with open_clip's laion2b_s32b_b82k config: mean = std = 0.5."""
    ref, batch = _pac_case()
    path = _unpack(PAC / "openClip_ViT-L-14.pth.gz", tiny_archs / "openClip_ViT-L-14.pth")
    pac, refpac, enc = _scores("pacs-ViT-L-14", path, batch)
    pixels = torch.stack([enc.preprocess(Image.open(p)) for p in batch.images]).numpy()
    np.testing.assert_allclose(pixels, ref["vitl_pixels"], atol=1e-6)
    np.testing.assert_allclose(pac, ref["vitl_pac"], atol=1e-5)
    np.testing.assert_allclose(refpac, ref["vitl_refpac"], atol=1e-5)


def test_pacs_plus_plus_applies_the_lora_pairs_the_authors_script_applies(tiny_archs):
    """The authors' PAC++ evaluation ignores the MLP LoRA pairs (marked merged by model.eval() before loading);
    the `-lora-all` variant folds them too and so differs from the authors' numbers."""
    ref, batch = _pac_case()
    path = _unpack(PAC / "PAC++_clip_ViT-B-32.pth.gz", tiny_archs / "PAC++_clip_ViT-B-32.pth")
    pac, refpac, _ = _scores("pacs++-ViT-B-32", path, batch)
    np.testing.assert_allclose(pac, ref["pacpp_pac"], atol=1e-5)
    np.testing.assert_allclose(refpac, ref["pacpp_refpac"], atol=1e-5)
    pac_all, _, _ = _scores("pacs++-ViT-B-32-lora-all", path, batch)
    assert np.abs(pac_all - ref["pacpp_pac"]).max() > 1e-3


def test_refpacs_keeps_a_negative_reference_cosine_and_the_floor_option_clips_it(tiny_archs):
    from eval.metrics.pacs import ref_pac_score

    pac, ref = torch.tensor([1.0, 0.5, 0.0]), torch.tensor([-0.2, 0.5, 0.0])
    np.testing.assert_allclose(ref_pac_score(pac, ref).numpy(), [2 * -0.2 / 0.8, 0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(ref_pac_score(pac, ref, floor="zero").numpy(), [0.0, 0.5, 0.0])
    assert build_metric("refpacscore", weights="smoke").config()["reference_floor"] == "none"
    assert build_metric("reflongclipscore", weights="smoke").config()["reference_floor"] == "zero"


def test_longclip_rounds_weights_to_fp16_as_the_authors_build_model(tiny_archs):
    """longclip.load -> build_model converts Linear/Conv/attention/projection weights to fp16 before
    load_state_dict, then model.float() on CPU; `-fp32` keeps the file's values and differs by about 1e-4."""
    ref = np.load(LONG / "longclip_reference.npz")
    path = _unpack(LONG / "longclip-tiny.pt.gz", tiny_archs / "longclip-tiny.pt")
    images = [Image.open(PAC / f"image{i}.png") for i in range(3)]
    texts = [str(t) for t in ref["texts"]]
    out = {}
    for name in ("longclip-B", "longclip-B-fp32"):
        enc = build_encoder(f"open_clip:tiny-{name}@{path}", device="cpu")
        with torch.no_grad():
            out[name] = (enc._embed_texts(texts).numpy(), enc._embed_images(images).numpy())
        dtype = enc.info.extra["checkpoint_dtype"]
        assert dtype.startswith("float16" if name == "longclip-B" else "as stored")
    np.testing.assert_allclose(out["longclip-B"][0], ref["text"], atol=1e-5)
    np.testing.assert_allclose(out["longclip-B"][1], ref["image"], atol=1e-5)
    gap = max(np.abs(out["longclip-B-fp32"][i] - ref[k]).max() for i, k in ((0, "text"), (1, "image")))
    assert gap > 1e-4
