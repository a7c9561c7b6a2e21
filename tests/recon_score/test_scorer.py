"""ReconScorer on the smoke models: formula, determinism, batching, caching, bad input, missing models."""

import warnings

import numpy as np
import pytest
from PIL import Image

from recon_score.artifact_cache import ArtifactCache
from recon_score.errors import ModelNotAvailableError, ReconScoreWarning
from recon_score.images import load_image
from recon_score.presets import PRESETS, get_preset
from recon_score.scorer import ReconResult, ReconScorer, recon_score_from_cosine, recon_score_from_distance

CAPTIONS = [
    "There is a piece of farmland .",
    "two planes are parked near the terminal",
    "a river crosses the town",
]


@pytest.fixture(scope="module")
def ucm(sample_dir):
    return load_image(sample_dir / "images" / "UCM_1.tif")


def test_formula():
    """The ReconScore paper: ReconScore = 100 * (1 - d/2) with d = 1 - cos."""
    assert recon_score_from_cosine(1.0) == 100.0
    assert recon_score_from_cosine(-1.0) == 0.0
    assert recon_score_from_cosine(0.0) == 50.0
    for cos in np.linspace(-1, 1, 9):
        d = 1 - cos
        assert recon_score_from_cosine(cos) == pytest.approx(100 * (1 - d / 2))
    assert recon_score_from_distance(0.0) == 100.0
    assert recon_score_from_distance(0.25) == 75.0
    assert recon_score_from_distance(3.0) == 0.0


def test_scores_are_consistent_with_the_cosine(smoke_scorer, ucm):
    res = smoke_scorer.score(ucm, CAPTIONS)
    for r in res:
        assert r.ok and r.recon_score == pytest.approx(100 * (1 + r.cosine) / 2)
        assert r.distance == pytest.approx(1 - r.cosine)
        assert (r.width, r.height) == (256, 256) and r.reconstruction.size == (256, 256)
        assert r.seed == 42 and r.prompt.startswith("I want a remote sensing image")
        assert f" {r.caption} Remember," in r.prompt


def test_scores_equal_an_independent_cosine_of_the_embeddings(smoke_scorer, ucm):
    """Outside value beside the consistency check above: the encoder's raw (unnormalised) embeddings of the
    original and of each saved reconstruction, one image at a time, their cosine computed here with numpy in
    float64, and 100 * (1 + cos) / 2 by hand: the score the scorer reports for that reconstruction."""
    res = smoke_scorer.score(ucm, CAPTIONS)
    enc = smoke_scorer.encoder

    def raw(img):
        return enc.encode_images([img], normalize=False).numpy()[0].astype(np.float64)

    a = raw(ucm)
    for r in res:
        b = raw(r.reconstruction)
        cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert r.cosine == pytest.approx(cos, abs=1e-5)
        assert r.recon_score == pytest.approx(100 * (1 + cos) / 2, abs=1e-3)
    assert len({round(r.recon_score, 6) for r in res}) == len(res)  # three renders, three different scores


def test_same_inputs_same_numbers(ucm):
    a = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False)).score(
        ucm, CAPTIONS
    )
    b = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False)).score(
        ucm, CAPTIONS
    )
    assert [r.recon_score for r in a] == [r.recon_score for r in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x.reconstruction), np.asarray(y.reconstruction))


def test_batch_matches_one_by_one(ucm):
    """One CPU generator per item: batching changes pixels by float summation order only."""
    single = ReconScorer.from_preset("smoke", device="cpu", batch_size=1, cache=ArtifactCache(enabled=False))
    batched = ReconScorer.from_preset("smoke", device="cpu", batch_size=3, cache=ArtifactCache(enabled=False))
    a, b = single.score(ucm, CAPTIONS), batched.score(ucm, CAPTIONS)
    assert single.stats["rendered"] == batched.stats["rendered"] == 3
    for x, y in zip(a, b):
        diff = np.abs(np.asarray(x.reconstruction, np.int16) - np.asarray(y.reconstruction, np.int16))
        assert diff.max() <= 1
        assert x.recon_score == pytest.approx(y.recon_score, abs=1e-3)


def test_seed_is_shared_by_all_captions_of_an_image(smoke_scorer, ucm):
    """The authors seeded candidate k with 42 + k; here every caption of an image uses the preset's seed."""
    res = smoke_scorer.score(ucm, CAPTIONS[:2])
    assert {r.seed for r in res} == {42}
    forward = smoke_scorer.score(ucm, CAPTIONS)
    backward = smoke_scorer.score(ucm, CAPTIONS[::-1])[::-1]
    assert [r.recon_score for r in forward] == pytest.approx([r.recon_score for r in backward], abs=1e-9)


def test_cache_avoids_rendering_again(tmp_path, ucm):
    cache = ArtifactCache(tmp_path / "cache")
    s1 = ReconScorer.from_preset("smoke", device="cpu", cache=cache)
    first = s1.score(ucm, CAPTIONS)
    assert s1.stats["rendered"] == 3
    s2 = ReconScorer.from_preset("smoke", device="cpu", cache=cache)
    again = s2.score(
        ucm, [*CAPTIONS, "storage tanks beside a harbor"]
    )  # the describer's case: one new candidate
    assert s2.stats["rendered"] == 1 and s2.stats["reconstruction_cache_hits"] == 3
    assert [r.recon_score for r in again[:3]] == [r.recon_score for r in first]
    assert [r.cached for r in again] == [True, True, True, False]
    s3 = ReconScorer.from_preset("smoke", device="cpu", cache=cache)
    s3.score(ucm, CAPTIONS)
    assert s3.renderer._pipe is None  # a fully cached call never loads the T2I model
    # batch composition is part of the key (pixels differ across batch shapes, docs/runs.md): at batch size 2
    # the batch [c0, c1] is new and rendered; the last batch [c2] is the batch-1 render cached above
    s4 = ReconScorer.from_preset("smoke", device="cpu", cache=cache, batch_size=2)
    s4.score(ucm, CAPTIONS)
    assert s4.stats["rendered"] == 2 and s4.stats["reconstruction_cache_hits"] == 1


def test_other_settings_miss_the_cache(tmp_path, ucm):
    cache = ArtifactCache(tmp_path / "cache")
    ReconScorer.from_preset("smoke", device="cpu", cache=cache).score(ucm, CAPTIONS[:1])
    for change in ({"steps": 3}, {"seed": 7}, {"guidance_scale": 1.5}, {"prompt_template": "{caption}"}):
        s = ReconScorer.from_preset("smoke", overrides=change, device="cpu", cache=cache)
        s.score(ucm, CAPTIONS[:1])
        assert s.stats["rendered"] == 1, change


def test_bad_items_do_not_lose_the_batch(smoke_scorer, ucm, tmp_path):
    (tmp_path / "corrupt.png").write_bytes(b"not an image")
    tiny = Image.new("RGB", (8, 8))
    res = smoke_scorer.score(
        [ucm, tmp_path / "corrupt.png", tiny, ucm, ucm, tmp_path / "missing.tif"],
        [CAPTIONS[0], CAPTIONS[0], CAPTIONS[0], "   ", None, CAPTIONS[0]],
    )
    assert res[0].ok and res[0].recon_score is not None
    assert "corrupt.png" in res[1].error
    assert "too small" in res[2].error
    assert "whitespace" in res[3].error
    assert "missing" in res[4].error
    assert "not found" in res[5].error


def test_non_square_keeps_aspect(smoke_scorer, ucm):
    wide = ucm.resize((400, 150))
    r = smoke_scorer.score(wide, CAPTIONS[0])
    assert (r.width, r.height) == (256, 96) and r.reconstruction.size == (256, 96)


def test_truncation_warns_once(smoke_scorer, ucm):
    smoke_scorer._warned_truncation = False
    long_caption = " ".join(["farmland"] * 700)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = smoke_scorer.score(ucm, [long_caption, long_caption + " with trees"])
    ours = [w for w in caught if issubclass(w.category, ReconScoreWarning)]
    assert len(ours) == 1 and "512" in str(ours[0].message)
    assert all(r.truncated for r in res)
    assert not smoke_scorer.score(ucm, CAPTIONS[0]).truncated


def test_distance_encoder(ucm):
    s = ReconScorer.from_preset(
        "smoke", overrides={"encoder": "lpips:alex"}, device="cpu", cache=ArtifactCache(enabled=False)
    )
    r = s.score(ucm, CAPTIONS[0])
    assert r.cosine is None and r.distance > 0
    assert r.recon_score == pytest.approx(100 * (1 - min(r.distance, 1)))
    assert s.config()["score_formula"] == "100*(1-min(d,1))"


def test_config_records_everything(smoke_scorer):
    cfg = smoke_scorer.config()
    assert cfg["preset"] == get_preset("smoke").to_dict()
    assert cfg["t2i"]["pipeline"] == "ZImagePipeline" and cfg["t2i"]["revision"].startswith("fixture:")
    assert cfg["encoder"]["spec"] == "smoke:dreamsim" and "meaningless" in cfg["note"]


def test_paper_preset_is_the_protocol():
    p = PRESETS["paper"]
    assert (p.t2i_model, p.steps, p.guidance_scale, p.max_sequence_length, p.seed) == (
        "Tongyi-MAI/Z-Image",
        28,
        0.0,
        512,
        42,
    )
    assert (p.max_side, p.size_multiple, p.encoder, p.dtype, p.vae_tiling) == (
        1024,
        16,
        "dreamsim:ensemble",
        "bfloat16",
        True,
    )
    assert p.prompt_template == (
        "I want a remote sensing image with a realistic satellite perspective view. {caption} "
        "Remember, I want a vertical remote sensing satellite perspective from top to bottom."
    )
    smoke = PRESETS["smoke"]
    assert smoke.prompt_template == p.prompt_template and smoke.seed == p.seed  # smoke shrinks, never swaps


def test_paper_without_weights_fails_clearly():
    s = ReconScorer.from_preset("paper", device="cpu", check_models=False)  # the CLI's check
    with pytest.raises(ModelNotAvailableError) as err:
        s.preflight()
    msg = str(err.value)
    assert "Tongyi-MAI/Z-Image" in msg and "--t2i-model" in msg and "HF_HUB_OFFLINE" in msg


def test_mismatched_lengths_raise(smoke_scorer, ucm):
    with pytest.raises(ValueError, match="as many images as captions"):
        smoke_scorer.score([ucm, ucm], ["a", "b", "c"])


def test_similarity_scores_is_the_one_conversion():
    """Hand-computed: cos((1, 0), (0.6, 0.8)) = 0.6 -> 100 * 1.6 / 2 = 80; a NaN or inf anywhere is the pair's
    error, never a score (the one non-finite check of the project)."""
    import numpy as np

    from recon_score.scorer import NON_FINITE, similarity_scores

    a = np.array([[1.0, 0.0], [1.0, 0.0], [np.nan, 0.0]])
    b = np.array([[0.6, 0.8], [1.0, 0.0], [1.0, 0.0]])
    (s1, c1, d1, e1), (s2, _, d2, _), bad = similarity_scores(a, b)
    assert (s1, c1, e1) == (pytest.approx(80.0), pytest.approx(0.6), None) and d1 == pytest.approx(0.4)
    assert (s2, d2) == (100.0, 0.0) and bad == (None, None, None, NON_FINITE)
    assert similarity_scores(distances=[0.25, float("inf")]) == [
        (75.0, None, 0.25, None),
        (None, None, None, NON_FINITE),
    ]


def test_score_one_pair_returns_one_result(smoke_scorer, ucm):
    one = smoke_scorer.score(ucm, CAPTIONS[0])
    assert isinstance(one, ReconResult) and one.caption == CAPTIONS[0]
    (listed,) = smoke_scorer.score(ucm, [CAPTIONS[0]])  # a list of captions: a list, even of one
    assert listed.recon_score == one.recon_score
