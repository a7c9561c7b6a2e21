"""SEARLE's OTI on the smoke open_clip encoder (random weights): the authors' loss, that it decreases, and that
the optimised pseudo-token is what the text tower sees in the composed query."""

import random

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from recon_score.encoders import build_encoder
from recon_score.errors import InputError
from retrieval.errors import MethodUnavailableError
from retrieval.methods import build_method
from retrieval.methods.base import MethodContext, Resources
from retrieval.methods.oti import PALAVRA_TEMPLATES, OTIConfig, image_phrases, invert
from retrieval.textlists import read_phrases
from tests.retrieval import layouts


@pytest.fixture(scope="module")
def encoder():
    return build_encoder("smoke:open-clip", device="cpu")


@pytest.fixture(scope="module")
def images():
    return [Image.new("RGB", (24, 24), layouts.COLOURS[i]) for i in range(3)]


WORDS = ["airport", "harbor", "forest", "river"]
PHRASES = {
    "airport": ["airport with long runways", "a busy airport"],
    "forest": ["forest next to a lake"],
    "river": ["a winding river"],
}


def test_first_step_is_the_authors_loss_and_the_loss_decreases(encoder, images):
    raw = encoder.encode_images(images, normalize=False)
    vocab = encoder.encode_texts(WORDS)
    pairs = image_phrases(raw, vocab, WORDS, PHRASES, top_k=4)
    assert any(pairs) and all(c in p for row in pairs for c, p in row)  # the GPT loss takes part
    cfg = OTIConfig(steps=40, lr=0.02, lambda_gpt=0.25, batch_size=3)
    result = invert(encoder, raw, pairs, cfg)

    # the authors' first step, re-derived: N(0, 0.02) tokens, CosineEmbeddingLoss(target 1) on the template
    # sentence and on the swapped phrase, (l_cos + 0.25 l_gpt) / 1.25
    rng = random.Random(cfg.seed)
    token = (
        torch.randn(3, encoder.pseudo_token_width, generator=torch.Generator().manual_seed(cfg.seed)) * 0.02
    )
    texts = [rng.choice(PALAVRA_TEMPLATES).format(" $ ") for _ in range(3)]
    criterion, one = torch.nn.CosineEmbeddingLoss(), torch.ones(1)
    with torch.no_grad():
        l_cos = criterion(encoder.pseudo_token_features(texts, token, placeholder="$"), raw, one)
        rows = [i for i, p in enumerate(pairs) if p]
        chosen = [rng.choice(pairs[i]) for i in rows]
        plain = encoder.encode_texts([p for _, p in chosen])
        swapped = encoder.pseudo_token_features(
            [p.replace(c, " $ ", 1) for c, p in chosen], token[rows], placeholder="$"
        )
        l_gpt = criterion(swapped, plain, one) if rows else torch.tensor(0.0)
    lam = 0.25 if rows else 0.0
    assert result.losses[0] == pytest.approx(float((l_cos + lam * l_gpt) / (1 + lam)), abs=1e-5)
    head, tail = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert tail < head - 1e-3
    assert result.tokens.shape == (3, encoder.pseudo_token_width)


def test_the_optimised_token_changes_the_composed_query(encoder, images, tmp_path):
    refs, texts = [0, 1, 0, 2], ["red", "dense", "red", "oval"]
    q_img = encoder.encode_images([images[i] for i in refs])
    db = encoder.encode_images([Image.new("RGB", (24, 24), c) for c in layouts.COLOURS])
    resources = Resources(
        texts=texts,
        reference_keys=[f"r{i}" for i in refs],
        load_reference=lambda i: images[refs[i]],
        encoder=encoder,
        vocabulary=encoder.encode_texts(WORDS),
        vocabulary_texts=WORDS,
        concept_phrases=PHRASES,
    )
    method = build_method("searle-oti", {"steps": "15", "lr": "0.02"})
    prep = method.prepare(MethodContext(q_img, encoder.encode_texts(texts), db, torch.arange(4), resources))
    assert prep.details == [f"{t} $" for t in texts]  # the RS-CIR benchmark paper's "{attribute_value} {$}"
    plain = encoder.encode_texts(prep.details)  # the placeholder's own word embedding
    assert (prep.query_vectors - plain).abs().amax(dim=1).min() > 1e-4
    torch.testing.assert_close(prep.query_vectors[0], prep.query_vectors[2])  # one token per reference image
    assert not torch.allclose(prep.query_vectors[0], prep.query_vectors[1])
    assert any("15 steps" in n for n in prep.notes)
    torch.testing.assert_close(torch.as_tensor(prep.scores(torch.arange(4))), prep.query_vectors @ db.T)


def test_defaults_are_seed_000s_and_missing_inputs_are_named(encoder):
    cfg = build_method("searle-oti").config
    assert (cfg.steps, cfg.lr, cfg.lambda_gpt, cfg.template) == (200, 0.002, 0.25, "{text} $")
    with pytest.raises(MethodUnavailableError, match=r"vocabulary.*--phrases FILE"):
        build_method("searle-oti").check(
            Resources(encoder=encoder, texts=["a"], load_reference=lambda i: None)
        )
    assert (
        build_method("searle-oti", {"lambda_gpt": "0"}).missing(
            Resources(encoder=encoder, texts=["a"], load_reference=lambda i: None)
        )
        == []
    )


def test_phrase_files(tmp_path):
    good = tmp_path / "phrases.csv"
    good.write_text("concept,phrase\nairport,a satellite image of airport that has runways\n")
    assert read_phrases(good) == {"airport": ["a satellite image of airport that has runways"]}
    bad = tmp_path / "bad.csv"
    bad.write_text("airport,a busy harbour\n")
    with pytest.raises(InputError, match=r"bad.csv: line 1: the phrase .* does not contain its concept"):
        read_phrases(bad)


def test_encoder_features_are_differentiable_in_the_token(encoder):
    token = torch.zeros(1, encoder.pseudo_token_width, requires_grad=True)
    with torch.enable_grad():
        out = F.normalize(encoder.pseudo_token_features(["a $ photo"], token, placeholder="$"), dim=-1)
        out.sum().backward()
    assert token.grad is not None and token.grad.abs().sum() > 0
