"""CycleReward: the port on transformers' BLIP modules against the authors' `cyclereward` 0.1.7 package, run once in
a scratch environment by tests/data/metrics/make_cyclereward_reference.py: the full-size state-dict layout (625
keys) and the package's own `score()` on a bundled image at a reduced size with seeded weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from eval.metrics import CaptionBatch, build_metric
from eval.metrics.cyclereward import (
    CycleRewardSize,
    blip_tokenizer,
    build_model,
    convert_checkpoint,
    package_key_to_port,
)
from recon_score.checkpoints import load_strict
from recon_score.errors import ModelNotAvailableError, ReconScoreError
from tests.eval.metric_helpers import DATA, REPO

REF = json.loads((DATA / "metrics" / "cyclereward_reference.json").read_text())


def seeded(layout: dict) -> dict:
    """The reference script's weights: one PCG64 stream over the sorted keys, 0.05 N(0,1) (+1 for norm weights)."""
    rng = np.random.default_rng(0)
    out = {}
    for k in sorted(layout):
        shape = tuple(layout[k])
        if k.endswith("position_ids"):
            out[k] = torch.arange(shape[-1]).expand(shape).clone()
            continue
        v = rng.standard_normal(size=shape).astype(np.float32) * 0.05
        if k.endswith(".weight") and "norm" in k.lower():
            v += 1.0
        out[k] = torch.from_numpy(v)
    return out


def test_full_size_layout_is_the_packages_625_keys_one_to_one():
    layout = REF["full_layout"]
    assert len(layout) == 625
    mapped = {package_key_to_port(k) for k in layout}
    assert len(mapped) == 625 and not any(k.startswith("unmapped.") for k in mapped)
    state = {k: torch.empty(s, device="meta") for k, s in layout.items()}
    state["blip.text_encoder.embeddings.position_ids"] = torch.arange(512).expand(1, -1)
    model = build_model(CycleRewardSize(), meta=True)
    load_strict(model, convert_checkpoint(state), "CycleReward-Combo.pth")  # raises on any difference
    assert sum(p.numel() for p in model.parameters()) > 400_000_000


def test_a_key_the_package_does_not_have_fails_loading():
    state = {
        k: torch.empty(s, device="meta") for k, s in REF["full_layout"].items() if "position_ids" not in k
    }
    state["blip.visual_encoder_m.cls_token"] = torch.empty(1, 1, 1024, device="meta")
    del state["mlp.layers.8.bias"]
    with pytest.raises(ModelNotAvailableError, match=r"1 missing keys \['mlp.layers.8.bias'\].*unmapped"):
        load_strict(build_model(CycleRewardSize(), meta=True), convert_checkpoint(state), "x.pth")
    with pytest.raises(ReconScoreError, match="position_ids"):
        convert_checkpoint({"blip.text_encoder.embeddings.position_ids": torch.zeros(1, 4)})


@pytest.fixture(scope="module")
def small_port(tmp_path_factory):
    """The port at the reference's reduced size with the reference's seeded weights and vocabulary."""
    size = CycleRewardSize(
        REF["small"]["width"], REF["small"]["depth"], REF["small"]["heads"], REF["small_med_config"]
    )
    model = build_model(size)
    load_strict(model, convert_checkpoint(seeded(REF["small_layout"])), "seeded")
    from eval.metrics.cyclereward import restore_buffers

    restore_buffers(model, "cpu")
    folder = tmp_path_factory.mktemp("vocab")
    (folder / "vocab.txt").write_text("\n".join(REF["vocab"]) + "\n")
    return model, blip_tokenizer(folder)


def test_scores_match_the_packages_score(small_port):
    model, tok = small_port
    m = build_metric("cyclereward", batch_size=2, device="cpu")
    m._model, m._tokenizer, m.device = model, tok, "cpu"
    image = REPO / REF["image"]
    caps = REF["captions"]
    out = m.score(CaptionBatch([*caps, None], None, [image] * (len(caps) + 1)))
    np.testing.assert_allclose(out.values[:3], REF["scores"], rtol=0, atol=2e-6)
    assert np.isnan(out.values[3]) and out.extra["cyclereward_error"][3] == "no caption"
    assert out.extra["cyclereward_truncated"] == [False, False, True, False]  # 200 words > 128 tokens
    assert out.info == {"distinct_pairs": 3, "rows_over_context": 1, "context_length": 128}


def test_missing_checkpoint_names_the_release_file(monkeypatch, tmp_path):
    monkeypatch.setenv("RECONSCORE_WEIGHTS", str(tmp_path))
    m = build_metric("cyclereward", model_type="CycleReward-I2T", device="cpu")
    with pytest.raises(ModelNotAvailableError, match=r"CycleReward-I2T\.pth.*releases/download/v1\.0\.0"):
        m.score(CaptionBatch(["a farm"], None, [REPO / REF["image"]]))


class Payload:
    pass


def test_checkpoint_is_read_weights_only(monkeypatch, tmp_path):
    folder = tmp_path / "cyclereward"
    folder.mkdir()
    torch.save({"mlp.layers.0.weight": Payload()}, folder / "CycleReward-Combo.pth")
    monkeypatch.setenv("RECONSCORE_WEIGHTS", str(tmp_path))
    m = build_metric("cyclereward", device="cpu")
    with pytest.raises(
        ModelNotAvailableError, match=r"not a weights-only torch checkpoint.*CycleReward-Combo\.pth"
    ):
        m.score(CaptionBatch(["a farm"], None, [REPO / REF["image"]]))


def test_missing_tokenizer_names_the_hub_id(monkeypatch, tmp_path):
    folder = tmp_path / "cyclereward"
    folder.mkdir()
    small = {k: v for k, v in seeded(REF["small_layout"]).items()}
    torch.save(small, folder / "CycleReward-T2I.pth")
    monkeypatch.setenv("RECONSCORE_WEIGHTS", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = build_metric("cyclereward", model_type="CycleReward-T2I", tokenizer="google-bert/bert-base-uncased")
    with pytest.raises(ModelNotAvailableError, match="google-bert/bert-base-uncased"):
        m.score(CaptionBatch(["a farm"], None, [REPO / REF["image"]]))


def test_smoke_weights_score_offline(sample_dir):
    images = sorted((sample_dir / "images").iterdir())[:2]
    out = build_metric("cyclereward", weights="smoke", device="cpu").score(
        CaptionBatch(["a farm", "roads"], None, images)
    )
    assert np.isfinite(out.values).all() and out.info["distinct_pairs"] == 2
