"""CLIPScore / RefCLIPScore: the functional core on plain tensors, the classes with the tiny open_clip encoder
(random weights, real CLIP BPE tokenizer), and the 77-token handling."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

from eval.metrics import CaptionBatch, build_metric
from eval.metrics.clip import (
    clip_score_aligned,
    embed_texts,
    max_reference_similarity,
    ref_clip_score,
    token_counter,
    with_prefix,
    word_windows,
)
from recon_score.errors import InputError, ReconScoreWarning

SMOKE = "smoke:open-clip"
LONG = " ".join(["a farmland plot with green crops beside a narrow dirt road"] * 12)  # ~130 tokens


def test_clip_score_formula():
    img = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 0.0]])  # normalised inside
    txt = torch.tensor([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.0]])
    expected = torch.tensor([2.5, 2.0, 0.0])  # 2.5 * max(cos, 0)
    torch.testing.assert_close(clip_score_aligned(img, txt), expected)
    torch.testing.assert_close(clip_score_aligned(img, txt, w=1.0), expected / 2.5)


def test_ref_clip_score_is_the_harmonic_mean_with_clamped_reference_similarity():
    clip_s = torch.tensor([2.5, 1.0, 0.0, float("nan")])
    ref_sim = torch.tensor([1.0, -0.2, 0.5, 0.3])
    out = ref_clip_score(clip_s, ref_sim)
    assert out[0].item() == pytest.approx(2 * 2.5 * 1.0 / 3.5)
    assert out[1].item() == 0.0 and out[2].item() == 0.0 and math.isnan(out[3].item())


def test_max_reference_similarity_per_owner():
    cand = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    refs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    out = max_reference_similarity(cand, refs, [0, 0, 1])
    assert out[0].item() == pytest.approx(1.0) and out[1].item() == pytest.approx(0.0) and math.isnan(out[2])


def test_prefix_joining_follows_the_authors_code():
    assert with_prefix("A photo depicts", "a farm") == "A photo depicts a farm"
    assert with_prefix("A photo depicts ", "a farm") == "A photo depicts a farm"
    assert with_prefix("", "a farm") == "a farm"


@pytest.mark.parametrize(
    ("tokens", "budget"), [([1] * 10, 4), ([2, 3, 1, 4, 1, 1, 2], 5), ([1, 9, 1], 3), ([1], 5)]
)
def test_word_windows_cover_everything_within_budget(tokens, budget):
    spans = word_windows(tokens, budget)
    assert spans[0][0] == 0 and spans[-1][1] == len(tokens)
    for (a, b), (c, d) in itertools.pairwise(spans):
        assert a < c <= b <= d  # each starts later, no gap
    for a, b in spans:
        assert sum(tokens[a:b]) <= budget or b - a == 1


@pytest.fixture(scope="module")
def encoder():
    from recon_score.encoders import build_encoder

    return build_encoder(SMOKE, device="cpu")


@pytest.fixture(scope="module")
def images(sample_dir):
    from recon_score.images import load_image

    return [load_image(sample_dir / "images" / f"UCM_{k}.tif") for k in (1, 2)]


def test_token_counting_matches_the_tokenizer(encoder):
    counter = token_counter(encoder)
    assert counter.context_length == 77 and counter.specials == 2
    assert counter.count("A photo depicts a farm.") + 2 == encoder.count_tokens("A photo depicts a farm.")


def test_clipscore_class_equals_the_formula(encoder, images):
    caps = ["a piece of farmland", "two planes at an airport", "a piece of farmland"]
    batch = CaptionBatch(candidates=caps, images=[images[0], images[1], images[1]])
    out = build_metric("clipscore", encoder=SMOKE, device="cpu").score(batch)
    img = encoder.encode_images([images[0], images[1], images[1]])
    txt = encoder.encode_texts([f"A photo depicts {c}" for c in caps])
    expected = (2.5 * (img * txt).sum(-1).clamp(min=0)).double().numpy()
    np.testing.assert_allclose(out.values, expected, atol=1e-6)
    assert out.extra["clipscore_truncated"] == [False] * 3
    assert out.info["long_text"] == "truncate" and out.info["context_length"] == 77


def test_refclipscore_class_equals_the_formula(encoder, images):
    caps, refs = (
        ["a piece of farmland", "fields"],
        [["There is a piece of farmland .", "cropland"], ["farms"]],
    )
    batch = CaptionBatch(candidates=caps, references=refs, images=images)
    out = build_metric("refclipscore", encoder=SMOKE, device="cpu").score(batch)
    img = encoder.encode_images(images)
    txt = encoder.encode_texts([f"A photo depicts {c}" for c in caps])
    ref = encoder.encode_texts([f"A photo depicts {r}" for rs in refs for r in rs])
    clip_s = 2.5 * (img * txt).sum(-1).clamp(min=0)
    best = torch.stack([(txt[0] * ref[:2]).sum(-1).max(), (txt[1] * ref[2:]).sum(-1).max()]).clamp(min=0)
    total = clip_s + best
    expected = torch.where(total > 0, 2 * clip_s * best / total.clamp(min=1e-12), torch.zeros_like(total))
    np.testing.assert_allclose(out.values, expected.double().numpy(), atol=1e-6)


def test_long_captions_truncate_with_a_warning_or_use_windows(encoder, images):
    batch = CaptionBatch(candidates=["a piece of farmland", LONG], images=images)
    with pytest.warns(ReconScoreWarning, match=r"1 of 2 captions exceed .*77-token.*sliding-window"):
        trunc = build_metric("clipscore", encoder=SMOKE, device="cpu").score(batch)
    assert trunc.extra["clipscore_truncated"] == [False, True] and trunc.info["rows_over_context"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slide = build_metric("clipscore", encoder=SMOKE, device="cpu", long_text="sliding-window").score(
            batch
        )
    assert slide.extra["clipscore_windows"][0] == 1 and slide.extra["clipscore_windows"][1] >= 2
    assert slide.values[0] == pytest.approx(trunc.values[0])  # short captions: same in both modes
    emb = embed_texts(encoder, [LONG], prefix="A photo depicts", long_text="sliding-window")
    assert (
        emb.n_tokens[0] > 77
        and emb.windows[0] >= 2
        and torch.linalg.norm(emb.emb[0]).item() == pytest.approx(1.0)
    )


def test_unreadable_images_give_nan_and_say_why(images):
    batch = CaptionBatch(candidates=["a", "b"], images=[images[0], InputError("image 'x.png' not found")])
    out = build_metric("clipscore", encoder=SMOKE, device="cpu").score(batch)
    assert not math.isnan(out.values[0]) and math.isnan(out.values[1])
    assert out.extra["clipscore_error"] == [None, "image 'x.png' not found"]


def test_bad_options_are_refused():
    from recon_score.errors import ReconScoreError

    with pytest.raises(ReconScoreError, match="long_text must be one of"):
        build_metric("clipscore", long_text="chunk")
    with pytest.raises(ReconScoreError, match="takes no option"):
        build_metric("clipscore", prefixx="x")


def test_hf_encoders_count_tokens_too():
    from recon_score.encoders import build_encoder

    counter = token_counter(build_encoder("smoke:hf-clip", device="cpu"))
    assert counter.context_length == 77 and counter.specials == 2 and counter.count("farm.") == 2
