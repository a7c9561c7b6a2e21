"""Pic2Word and SEARLE from checkpoints in their released layouts (random weights, smoke open_clip encoder).

What is checked is the mechanism the published numbers rest on: the network reads the unnormalised image
embedding, its token is what the text tower sees at the placeholder, and the released files load as they are."""

import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from eval.cli import main
from recon_score.encoders import build_encoder
from recon_score.errors import InputError
from retrieval.data import EvalData
from retrieval.errors import MethodUnavailableError
from retrieval.evaluate import evaluate
from retrieval.methods import build_method
from retrieval.methods.base import Resources
from retrieval.methods.learned import load_im2text, load_phi
from tests.retrieval import layouts


@pytest.fixture(scope="module")
def encoder():
    return build_encoder("smoke:open-clip", device="cpu")


def word_embedding(encoder, word: str) -> torch.Tensor:
    ids = encoder.tokenizer.encode(word)
    assert len(ids) == 1, f"{word!r} is not one token"
    return encoder.model.token_embedding.weight[ids[0]].detach().clone()


def phi_state(
    in_dim: int, width: int, *, hidden: int = 24, seed: int = 0, constant: torch.Tensor | None = None
):
    g = torch.Generator().manual_seed(seed)
    shapes = {"layers.0": (hidden, in_dim), "layers.3": (hidden, hidden), "layers.6": (width, hidden)}
    state = {}
    for name, shape in shapes.items():
        state[f"{name}.weight"] = torch.randn(*shape, generator=g) * 0.2
        state[f"{name}.bias"] = torch.randn(shape[0], generator=g) * 0.1
    if constant is not None:  # the network ignores the image and always emits `constant`
        state["layers.6.weight"] = torch.zeros(width, hidden)
        state["layers.6.bias"] = constant.clone()
    return state


def im2text_state(in_dim: int, width: int, *, middle: int = 20, n_layer: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    state, dim = {}, in_dim
    for i in range(n_layer):
        state[f"module.layers.{i}.0.weight"] = torch.randn(middle, dim, generator=g) * 0.2
        state[f"module.layers.{i}.0.bias"] = torch.randn(middle, generator=g) * 0.1
        dim = middle
    state["module.fc_out.weight"] = torch.randn(width, middle, generator=g) * 0.2
    state["module.fc_out.bias"] = torch.randn(width, generator=g) * 0.1
    return state


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, encoder):
    d = tmp_path_factory.mktemp("ckpt")
    dim, width = encoder.info.dim, encoder.pseudo_token_width
    searle = d / "SEARLE_smoke.pt"
    torch.save({"Phi": phi_state(dim, width)}, searle)
    pic2word = d / "pic2word_model.pt"
    torch.save(
        {
            "epoch": 30,
            "name": "pic2word",
            "state_dict": {"module.logit_scale": torch.tensor(4.6)},  # the frozen CLIP (unused here)
            "state_dict_img2text": im2text_state(dim, width),
        },
        pic2word,
    )
    return {"searle": searle, "pic2word": pic2word}


def test_pseudo_token_is_what_the_text_tower_sees(encoder):
    """Injecting the embedding of a real word at the placeholder gives exactly the embedding of the text with
    that word written out; any other token gives something else."""
    texts = ["a photo of $ that has more planes", "a photo of $ that is flooded", "$ at night"]
    words = ["airport", "river", "bridge"]
    pseudo = torch.stack([word_embedding(encoder, w) for w in words])
    got = encoder.encode_texts_with_pseudo_tokens(texts, pseudo, placeholder="$", batch_size=2)
    want = encoder.encode_texts([t.replace("$", w) for t, w in zip(texts, words)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    star = encoder.encode_texts_with_pseudo_tokens(["a photo of * , red"], pseudo[:1], placeholder="*")
    torch.testing.assert_close(star, encoder.encode_texts(["a photo of airport , red"]), rtol=0, atol=1e-6)
    other = encoder.encode_texts_with_pseudo_tokens(texts[:1], pseudo[1:2], placeholder="$")
    assert (other - want[:1]).abs().max() > 1e-3
    assert encoder.placeholder_id("$") == 259  # SEARLE hard-codes 259 for '$' in the OpenAI CLIP vocabulary
    with pytest.raises(ValueError, match="no '\\$' token"):
        encoder.encode_texts_with_pseudo_tokens(["no placeholder here"], pseudo[:1], placeholder="$")
    with pytest.raises(ValueError, match="single token"):
        encoder.placeholder_id("$$ placeholder")


def test_released_layouts_load_and_compute_their_formulas(checkpoints, tmp_path):
    x = torch.randn(5, 32) * 3
    phi = load_phi(checkpoints["searle"])
    s = torch.load(checkpoints["searle"], weights_only=True)["Phi"]
    h = F.gelu(x @ s["layers.0.weight"].T + s["layers.0.bias"])
    h = F.gelu(h @ s["layers.3.weight"].T + s["layers.3.bias"])
    torch.testing.assert_close(phi(x), h @ s["layers.6.weight"].T + s["layers.6.bias"])

    net = load_im2text(checkpoints["pic2word"])
    s = torch.load(checkpoints["pic2word"], weights_only=True)["state_dict_img2text"]
    h = x
    for i in range(2):
        h = F.relu(h @ s[f"module.layers.{i}.0.weight"].T + s[f"module.layers.{i}.0.bias"])
    torch.testing.assert_close(net(x), h @ s["module.fc_out.weight"].T + s["module.fc_out.bias"])

    bare = tmp_path / "phi_bare.pt"  # a bare state dict is accepted too
    torch.save(phi_state(32, 32, seed=3), bare)
    assert load_phi(bare)(x).shape == (5, 32)

    wrong = tmp_path / "wrong.pt"
    torch.save({"Phi": {"fc.weight": torch.zeros(2, 2)}}, wrong)
    with pytest.raises(InputError, match=r"lacks 'layers.0.weight'.*SEARLE's Phi"):
        load_phi(wrong)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match=r"cannot read checkpoint .*garbage.pt"):
        load_im2text(garbage)


def test_pickled_code_in_a_checkpoint_is_refused(tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"Phi": phi_state(4, 4), "extra": Image.new("RGB", (1, 1))}, evil)  # an arbitrary object
    with pytest.raises(InputError, match="cannot read checkpoint"):
        load_phi(evil)


def _setup(tmp_path, encoder, n_refs: int = 3):
    images = [Image.new("RGB", (24, 24), layouts.COLOURS[i]) for i in range(n_refs)]
    texts = ["has more planes", "is flooded", "at night", "with a road"]
    refs = [0, 1, 0, 2]  # query 2 shares query 0's reference image
    db = encoder.encode_images([Image.new("RGB", (24, 24), c) for c in layouts.COLOURS])
    q_img = encoder.encode_images([images[i] for i in refs])
    q_txt = encoder.encode_texts(texts)
    data = EvalData(q_img, q_txt, db, torch.tensor([[i, i] for i in range(4)]), ["g"] * 4).validate()
    loaded = []

    def load_reference(i):
        loaded.append(i)
        return images[refs[i]]

    resources = Resources(
        texts=texts, reference_keys=[f"ref{i}" for i in refs], load_reference=load_reference, encoder=encoder
    )
    return data, resources, images, refs, texts, loaded


def test_searle_query_is_the_template_with_the_network_token(tmp_path, encoder):
    """A Phi that always emits the embedding of 'airport' turns every query into the plain text
    '{text} airport': the composition is exactly the RS-CIR benchmark paper's prompt "{attribute_value} {$}"."""
    ckpt = tmp_path / "SEARLE_const.pt"
    torch.save({"Phi": phi_state(encoder.info.dim, 32, constant=word_embedding(encoder, "airport"))}, ckpt)
    data, resources, _, _, texts, loaded = _setup(tmp_path, encoder)
    resources.checkpoints = {"searle": ckpt}
    res = evaluate(build_method("searle"), data, resources=resources)
    assert res.details == [f"{t} $" for t in texts]
    assert sorted(loaded) == [0, 1, 3]  # each reference image is embedded once
    prepared = build_method("searle").prepare(_context(data, resources))
    want = encoder.encode_texts([f"{t} airport" for t in texts])
    torch.testing.assert_close(prepared.query_vectors, want, rtol=0, atol=1e-6)


def test_pic2word_feeds_the_unnormalised_image_embedding(checkpoints, tmp_path, encoder):
    data, resources, images, refs, texts, _ = _setup(tmp_path, encoder)
    resources.checkpoints = dict(checkpoints)
    prepared = build_method("pic2word").prepare(_context(data, resources))
    raw = encoder.encode_images([images[i] for i in refs], normalize=False)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(4))  # the raw tower output, not unit vectors
    tokens = load_im2text(checkpoints["pic2word"])(raw)
    prompts = [f"{t} *" for t in texts]  # the RS-CIR benchmark paper's "{attribute_value} {*}"
    want = encoder.encode_texts_with_pseudo_tokens(prompts, tokens, placeholder="*")
    torch.testing.assert_close(prepared.query_vectors, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        torch.as_tensor(prepared.scores(torch.arange(4))), want @ data.database.T, rtol=0, atol=1e-5
    )


def _context(data, resources):
    from retrieval.methods.base import MethodContext

    return MethodContext(data.query_image, data.query_text, data.database, torch.arange(4), resources)


def test_what_is_missing_is_said(checkpoints, tmp_path, encoder):
    data, resources, *_ = _setup(tmp_path, encoder)
    with pytest.raises(MethodUnavailableError, match=r"released checkpoint .*--checkpoint searle=PATH"):
        evaluate(build_method("searle"), data, resources=resources)
    with pytest.raises(MethodUnavailableError, match="not a file"):
        evaluate(
            build_method("searle"), data, resources=Resources(checkpoints={"searle": tmp_path / "nope.pt"})
        )
    with pytest.raises(MethodUnavailableError, match=r"pseudo-tokens.*reference images"):
        evaluate(build_method("pic2word"), data, resources=Resources(checkpoints=dict(checkpoints)))
    small = tmp_path / "SEARLE_ViT-B32.pt"
    torch.save({"Phi": phi_state(8, 32)}, small)
    resources.checkpoints = {"searle": small}
    with pytest.raises(InputError, match=r"maps 8-d image embeddings .* use the CLIP it was trained on"):
        evaluate(build_method("searle"), data, resources=resources)


def test_retrieve_cli_runs_both_and_resumes(checkpoints, tmp_path, capsys):
    root = layouts.xview2(tmp_path / "xview2")
    out = tmp_path / "out"
    searle = tmp_path / "SEARLE_smoke.pt"
    searle.write_bytes(checkpoints["searle"].read_bytes())
    argv = [
        "retrieve", "--benchmark", "xview2-cir", "--root", str(root), "--encoder", "smoke:open-clip",
        "--methods", "pic2word,searle,image", "--out", str(out), "--device", "cpu",
        "--checkpoint", f"pic2word={checkpoints['pic2word']}", "--checkpoint", f"searle={searle}",
    ]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    assert {record["methods"][m]["status"] for m in ("pic2word", "searle")} == {"ok"}
    per_query = pd.read_parquet(out / "per_query.parquet")
    details = per_query.loc[per_query["method"] == "searle", "detail"].tolist()
    assert details and all(d.endswith(" $") for d in details)
    capsys.readouterr()
    assert main(argv) == 0  # a finished run: no method computed again
    assert "retrieve: method" not in capsys.readouterr().err
    torch.save({"Phi": phi_state(32, 32, seed=9)}, searle)  # new weights: recomputed
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "retrieve: method searle on" in err and "searle: read from" not in err
    assert "pic2word: read from" in err and "retrieve: method pic2word" not in err
