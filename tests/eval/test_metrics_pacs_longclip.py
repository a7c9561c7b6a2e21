"""PAC-S / RefPAC-S and Long-CLIP-S / RefLong-CLIP-S: formulas against the authors' code re-implemented here
(aimagelab/pacscore `evaluation/pac_score/pac_score.py`; beichenzbc/Long-CLIP `model/model_longclip.py`), the
released key layouts (tests/data/metrics/layouts.json, dumped from the authors' own model classes by
make_layouts.py beside it), strict loading with weights_only=True, and the missing-weights message."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from eval.metrics import CaptionBatch, build_metric
from recon_score.checkpoints import load_strict
from recon_score.encoders import build_encoder
from recon_score.encoders.base import EncoderInfo
from recon_score.encoders.open_clip import RELEASES, release_model, release_state_dict
from recon_score.errors import ModelNotAvailableError
from tests.eval.metric_helpers import DATA

LAYOUTS = json.loads((DATA / "metrics" / "layouts.json").read_text())


# -- the authors' formulas, re-implemented from pac_score.py (numpy, as there) -----------------------------------
def authors_pac(images, cands, w=2.0):
    images = images / np.sqrt(np.sum(images**2, axis=1, keepdims=True))
    cands = cands / np.sqrt(np.sum(cands**2, axis=1, keepdims=True))
    return w * np.clip(np.sum(images * cands, axis=1), 0, None), cands


def authors_refpac(cands_normed, refs_per_row, pac):
    per = []
    for cand, refs in zip(cands_normed, refs_per_row):
        refs = refs / np.sqrt(np.sum(refs**2, axis=1, keepdims=True))
        per.append(np.max(cand.dot(refs.T)))
    per = np.array(per)
    return 2 * pac * per / (pac + per)


class FixedEncoder:
    """An image+text encoder with fixed embeddings per text / image (no tokenizer: nothing is counted)."""

    kind, has_images, has_texts = "embedding", True, True

    def __init__(self, table: dict[str, np.ndarray], images: np.ndarray):
        self.table, self.images = table, images
        self.info = EncoderInfo(
            spec="fixed", kind="embedding", modalities=("image", "text"), source="test", dim=4
        )
        self.device = torch.device("cpu")
        self.seen: list[str] = []

    def encode_texts(self, texts):
        self.seen += list(texts)
        return torch.tensor(np.stack([self.table[t] for t in texts]), dtype=torch.float64)

    def encode_images(self, images):
        return torch.tensor(self.images[[int(im.info["row"]) for im in images]], dtype=torch.float64)


@pytest.fixture
def fixed_case():
    from PIL import Image

    rng = np.random.default_rng(7)
    cands = ["a farm with fields", "two tennis courts", "a harbour"]
    refs = [["fields and a farm", "a farmland"], ["tennis courts"], ["boats in a harbour", "a port", "water"]]
    prefix = "A photo depicts "
    texts = [prefix + t for t in cands + [r for rs in refs for r in rs]]
    table = {t: rng.normal(size=4) + 0.8 for t in texts}  # positive offset: cosines mostly > 0
    images = rng.normal(size=(3, 4)) + 0.8
    ims = []
    for i in range(3):
        im = Image.new(
            "RGB", (8, 8), (i, 0, 0)
        )  # distinct pixels: identical ones are one image, encoded once
        im.info["row"] = i
        ims.append(im)
    return cands, refs, table, images, ims


def _metric(name, table, images):
    m = build_metric(name, weights="smoke")
    m._encoder = FixedEncoder(table, images)
    return m


def test_pacs_and_refpacs_match_the_authors_formulas(fixed_case):
    cands, refs, table, images, ims = fixed_case
    prefix = "A photo depicts "
    cand_emb = np.stack([table[prefix + c] for c in cands])
    pac, cand_normed = authors_pac(images, cand_emb)
    ref_emb = [np.stack([table[prefix + r] for r in rs]) for rs in refs]
    refpac = authors_refpac(cand_normed, ref_emb, pac)
    batch = CaptionBatch(list(cands), [list(r) for r in refs], ims)
    m = _metric("pacscore", table, images)
    np.testing.assert_allclose(m.score(batch).values, pac, rtol=1e-6)
    r = _metric("refpacscore", table, images)
    np.testing.assert_allclose(r.score(batch).values, refpac, rtol=1e-6)
    assert m.config()["w"] == 2.0 and all(
        t.startswith(prefix) for t in r._encoder.seen
    )  # references prefixed


def test_refpacs_does_not_clip_a_negative_reference_similarity():
    from eval.metrics.pacs import ref_pac_score

    pac, ref = torch.tensor([1.0, 0.5, 0.0]), torch.tensor([-0.2, 0.5, 0.0])
    expected = [2 * 1.0 * -0.2 / 0.8, 0.5, 0.0]  # the authors' 2*p*r/(p+r); 0 where p + r = 0
    np.testing.assert_allclose(ref_pac_score(pac, ref).numpy(), expected, rtol=1e-6)


def test_longclip_s_is_clip_s_with_weight_2_5(fixed_case):
    cands, refs, table, images, ims = fixed_case
    prefix = "A photo depicts "
    pac, cand_normed = authors_pac(images, np.stack([table[prefix + c] for c in cands]), w=2.5)
    batch = CaptionBatch(list(cands), [list(r) for r in refs], ims)
    np.testing.assert_allclose(_metric("longclipscore", table, images).score(batch).values, pac, rtol=1e-6)
    sims = np.array(
        [
            max(cand_normed[i] @ (table[prefix + r] / np.linalg.norm(table[prefix + r])) for r in rs)
            for i, rs in enumerate(refs)
        ]
    )
    s = np.clip(sims, 0, None)
    expected = 2 * pac * s / (pac + s)  # RefCLIP-S: harmonic mean with the clipped max reference cosine
    np.testing.assert_allclose(
        _metric("reflongclipscore", table, images).score(batch).values, expected, rtol=1e-6
    )


def test_longclip_position_table_matches_the_authors_masks():
    """model_longclip.encode_text adds positional_embedding * mask1 + positional_embedding_res * mask2."""
    rel = RELEASES["longclip-B"]
    pos, res = torch.randn(248, 6), torch.randn(248, 6)
    mask1 = torch.zeros(248, 1)
    mask1[:20] = 1
    mask2 = 1 - mask1
    state = release_state_dict(rel, {"positional_embedding": pos, "positional_embedding_res": res, "x": pos})
    torch.testing.assert_close(state["positional_embedding"], pos * mask1 + res * mask2)
    assert "positional_embedding_res" not in state


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_released_key_layout_loads_strictly(name):
    """Every key and shape of the authors' model (as their loader saves/loads it) fits open_clip's CLIP."""
    rel = RELEASES[name]
    layout = next(
        LAYOUTS[k] for k in LAYOUTS if RELEASES[k].filename == rel.filename
    )  # variants share a file
    state = {k: torch.empty(shape, device="meta") for k, shape in layout.items()}
    ckpt = {"state_dict": state} if rel.layout != "longclip" else state
    model = release_model(rel, device="cpu", mode="empty")
    load_strict(model, release_state_dict(rel, ckpt), name)
    assert model.positional_embedding.shape[0] == rel.context_length
    broken = dict(state)
    broken.pop(next(iter(broken)))
    broken["visual.extra"] = torch.empty(1, device="meta")
    with pytest.raises(ModelNotAvailableError, match=r"1 missing keys.*1 unexpected"):
        broken = {"state_dict": broken} if rel.layout != "longclip" else broken
        load_strict(release_model(rel, device="cpu", mode="empty"), release_state_dict(rel, broken), name)


def test_pacs_plus_plus_lora_folds_into_the_weights_as_the_authors_layers_add_it():
    """custom_loralib (aimagelab/pacscore): Linear adds (x A^T B^T) * s; MultiheadAttention's in_proj adds
    linear(linear(x, A), B) * s; Conv2d convolves with W + (B A).view(W.shape) * s; s = lora_alpha / r = 1 / 4.
    Every pair folded is the `-lora-all` variant; the releases' default leaves the MLP pairs out, as the authors'
    evaluation does (tests/eval/test_pacs_longclip_reference.py runs it against their code)."""
    import torch.nn.functional as F

    from recon_score.encoders.open_clip import merge_lora

    g = torch.Generator().manual_seed(0)
    r, d, k = 4, 6, 2
    w, b, a, bb = (
        torch.randn(5, d, generator=g),
        torch.randn(5, generator=g),
        torch.randn(r, d, generator=g),
        torch.randn(5, r, generator=g),
    )
    qkv, qa, qb = (
        torch.randn(3 * d, d, generator=g),
        torch.randn(r, d, generator=g),
        torch.randn(3 * d, r, generator=g),
    )
    cw, ca, cb = (
        torch.randn(5, 3, k, k, generator=g),
        torch.randn(r * k, 3 * k, generator=g),
        torch.randn(5 * k, r * k, generator=g),
    )
    state = {
        "mlp.c_fc.weight": w,
        "mlp.c_fc.bias": b,
        "mlp.c_fc.lora_A": a,
        "mlp.c_fc.lora_B": bb,
        "attn.in_proj_weight": qkv,
        "attn.in_proj_weight_lora_A": qa,
        "attn.in_proj_weight_lora_B": qb,
        "conv1.weight": cw,
        "conv1.lora_A": ca,
        "conv1.lora_B": cb,
    }
    merged = merge_lora(state)
    assert sorted(merged) == ["attn.in_proj_weight", "conv1.weight", "mlp.c_fc.bias", "mlp.c_fc.weight"]
    x, s = torch.randn(3, d, generator=g), 1 / r
    torch.testing.assert_close(
        F.linear(x, merged["mlp.c_fc.weight"], b), F.linear(x, w, b) + (x @ a.T @ bb.T) * s
    )
    torch.testing.assert_close(
        F.linear(x, merged["attn.in_proj_weight"]), F.linear(x, qkv) + F.linear(F.linear(x, qa), qb) * s
    )
    img = torch.randn(1, 3, 4, 4, generator=g)
    conv_authors = F.conv2d(img, cw + (cb @ ca).view(cw.shape) * s, stride=k)
    torch.testing.assert_close(F.conv2d(img, merged["conv1.weight"], stride=k), conv_authors)
    default = merge_lora(
        {f"x.{k}": v for k, v in state.items()}, unused=RELEASES["pacs++-ViT-B-32"].lora_unused
    )
    torch.testing.assert_close(default["x.mlp.c_fc.weight"], w)  # the MLP pair is dropped, not folded
    torch.testing.assert_close(default["x.attn.in_proj_weight"], merged["attn.in_proj_weight"])
    assert not [k for k in default if "lora" in k]


@pytest.fixture
def tiny_release(monkeypatch, tmp_path):
    """A Long-CLIP-layout release of a tiny registered architecture, saved as the authors save theirs."""
    import open_clip

    from recon_score.encoders.open_clip import Release
    from recon_score.synthetic.tiny_models import OPEN_CLIP_TINY_CFG

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "TinyLong-ViT.json").write_text(json.dumps(OPEN_CLIP_TINY_CFG))
    open_clip.add_model_config(tmp_path / "cfg")
    rel = Release("TinyLong-ViT", 248, "tiny-long.pt", None, "test", "longclip", "Long-CLIP")
    monkeypatch.setitem(RELEASES, "tinylong", rel)
    torch.manual_seed(1)
    model = release_model(rel, device="cpu", mode="smoke")
    state = dict(model.state_dict())
    pos = state["positional_embedding"]
    state["positional_embedding_res"] = pos.clone()
    state["positional_embedding"] = torch.cat([pos[:20], torch.zeros_like(pos[20:])])  # rows 20+ unused
    torch.save(state, tmp_path / "tiny-long.pt")
    return rel, model, tmp_path / "tiny-long.pt"


def test_release_checkpoint_loads_and_encodes_like_the_saved_model(tiny_release):
    _rel, model, path = tiny_release
    enc = build_encoder(f"open_clip:tinylong@{path}", device="cpu")
    torch.testing.assert_close(enc.model.positional_embedding, model.positional_embedding)
    text = ["a long caption " * 30]
    with torch.no_grad():
        ref = model.encode_text(enc.tokenizer(text))
    torch.testing.assert_close(enc.model.encode_text(enc.tokenizer(text)), ref)
    assert enc.context_length == 248 and enc.tokenizer(text).shape == (1, 248)


class NotATensor:
    pass


def test_release_checkpoint_is_read_with_weights_only(tiny_release, tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"positional_embedding": NotATensor()}, evil)
    with pytest.raises(ModelNotAvailableError, match=r"not a weights-only torch checkpoint.*evil\.pt"):
        build_encoder(f"open_clip:tinylong@{evil}", device="cpu")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(ModelNotAvailableError, match=r"not a weights-only.*text\.pt"):
        build_encoder(f"open_clip:tinylong@{tmp_path / 'text.pt'}", device="cpu")


def test_missing_weights_name_the_file_and_the_source(monkeypatch, tmp_path):
    monkeypatch.setenv("RECONSCORE_WEIGHTS", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match=r"clip_ViT-B-32\.pth.*pacscore"):
        build_encoder("open_clip:pacs-ViT-B-32", device="cpu")
    with pytest.raises(ModelNotAvailableError, match=r"longclip-B\.pt.*BeichenZhang/LongCLIP-B"):
        build_encoder("open_clip:longclip-B", device="cpu")
    with pytest.raises(ModelNotAvailableError, match=r"nope\.pt"):
        build_encoder(f"open_clip:longclip-L@{tmp_path / 'nope.pt'}", device="cpu")


def test_longclip_counts_captions_only_clip_s_truncates(sample_dir):
    images = sorted((sample_dir / "images").iterdir())[:3]
    caps = ["a farm " * 50, "a harbour " * 200, "two courts"]  # ~102 tokens, ~402 tokens, 5 tokens
    batch = CaptionBatch(caps, None, images)
    with pytest.warns(Warning, match="1 of 3 captions exceed the encoder's 248-token"):
        out = build_metric("longclipscore", weights="smoke", device="cpu").score(batch)
    assert out.info["clip_s_truncates_only"] == 1 and out.info["rows_over_context"] == 1
    assert out.extra["longclipscore_truncated"] == [False, True, False]


def test_length_study_includes_longclip_s(tmp_path, sample_dir):
    """`study length` (Table 5) runs Long-CLIP-S by default beside CLIP-S, with its 248-token limit."""
    import pandas as pd

    from eval.cli import main

    refs = ["There is a piece of farmland .", "It is a piece of cropland ."]
    texts = {
        "short": "There is a piece of farmland .",
        "medium": "There is a piece of farmland with crops planted in straight rows .",
        "long": "There is a large piece of farmland " + "with long straight rows " * 20 + ".",
    }
    rows = [
        {"id": f"x:{k}", "image": "images/UCM_1.tif", "source_caption": " ".join(refs), "kind": k}
        | {"references": refs, "caption": t, "error": None}
        for k, t in texts.items()
    ]
    gen = tmp_path / "g.jsonl"
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["study", "length", "--generated", str(gen), "--images", str(sample_dir), "--preset", "smoke"]
    argv += [
        "--metrics",
        "clipscore,longclipscore",
        "--encoder",
        "smoke:open-clip",
        "--out",
        str(tmp_path / "t5"),
    ]
    assert main(argv) == 0
    df = pd.read_csv(tmp_path / "t5" / "table.csv", index_col=0)
    assert df.loc["Long-CLIP-S", "Max Tokens"] == 248 and df.loc["CLIPScore", "Max Tokens"] == 77
    assert df.loc["Long-CLIP-S", ["S.", "M.", "L."]].notna().all()
    from eval.cli.study import length

    assert "longclipscore" in next(p.default for p in length.params if p.name == "metrics")


def test_random_weights_need_a_released_fine_tune():
    from recon_score.errors import ReconScoreError

    assert build_metric("pacscore", weights="smoke").spec == "smoke:open-clip/pacs-ViT-B-32"
    spec = build_metric("longclipscore", encoder="open_clip:longclip-L", weights="shapes").spec
    assert spec == "shapes:open-clip/longclip-L"
    with pytest.raises(ReconScoreError, match="released CLIP fine-tune"):
        build_metric("pacscore", encoder="open_clip:ViT-B-32/openai", weights="smoke")
