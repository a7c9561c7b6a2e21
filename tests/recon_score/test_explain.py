"""Explanations proved on a planted signal: a toy T2I pipeline (diffusers' call signature, driven through the
Renderer's real call) paints known shapes for known words at known places, and an encoder whose patch tokens are
local colour statistics. The recall map, the phrase deltas and their regions must point at what was planted."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from scipy import stats

from recon_score.artifact_cache import ArtifactCache
from recon_score.encoders.base import FULL_BOX, Encoder, EncoderInfo, PatchGrid
from recon_score.explain import (
    PhraseEffect,
    _region,
    explain_one,
    holm,
    maps_npz,
    paired_effect,
    split_phrases,
    without,
)
from recon_score.scorer import ReconScorer

# word -> (colour, shape, box as fractions of the image)
PLANTS = {
    "red square": ((220, 30, 30), "rect", (0.05, 0.05, 0.40, 0.40)),
    "blue circle": ((30, 40, 220), "disk", (0.58, 0.58, 0.95, 0.95)),
    "yellow triangle": ((235, 220, 20), "tri", (0.35, 0.55, 0.65, 0.95)),
}
FIELD, BARE = (40, 160, 40), (128, 128, 128)


def paint(text: str, width: int, height: int, generator: torch.Generator) -> Image.Image:
    """Green when the text has "green field" (grey otherwise), each planted word's shape at its place, plus the
    seed's noise: a per-image brightness shift and per-pixel noise."""
    img = Image.new("RGB", (width, height), FIELD if "green field" in text else BARE)
    draw = ImageDraw.Draw(img)
    for word, (colour, shape, (x0, y0, x1, y1)) in PLANTS.items():
        if word not in text:
            continue
        box = (x0 * width, y0 * height, x1 * width, y1 * height)
        if shape == "rect":
            draw.rectangle(box, fill=colour)
        elif shape == "disk":
            draw.ellipse(box, fill=colour)
        else:
            draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) / 2, box[1])], fill=colour)
    shift = float(torch.randn(1, generator=generator)) * 6
    noise = torch.randn(height, width, 3, generator=generator).numpy() * 10
    return Image.fromarray(np.clip(np.asarray(img, np.float64) + shift + noise, 0, 255).astype(np.uint8))


class PaintPipeline:
    """diffusers' text-to-image call signature; returns `.images` like a pipeline output."""

    def __call__(
        self, prompt, height, width, num_inference_steps, generator, output_type="pil", guidance_scale=0.0
    ):
        images = [paint(p, width, height, g) for p, g in zip(prompt, generator)]
        return type("Output", (), {"images": images})()


class ColourPatches(Encoder):
    """Patch tokens = mean colour of each 8x8 cell of a 64x64 squash (centred); embedding = the 4x4 cell means."""

    def __init__(self):
        self.info = EncoderInfo(
            spec="test:colour-patches", kind="embedding", modalities=("image",), source="test"
        )
        self.device = torch.device("cpu")

    def _cells(self, images, n):
        arr = np.stack(
            [
                np.asarray(im.convert("RGB").resize((64, 64), Image.Resampling.BOX), np.float64)
                for im in images
            ]
        )
        return torch.from_numpy(arr.reshape(len(images), n, 64 // n, n, 64 // n, 3).mean((2, 4)) / 255 - 0.5)

    def _embed_images(self, images):
        self.calls += 1
        return self._cells(images, 4).reshape(len(images), -1).float()

    has_patch_tokens = True
    calls = 0

    def _embed_with_patches(self, images):
        self.calls += 1
        cells = self._cells(images, 8)  # the 4x4 embedding is the mean of the 8x8 grid's 2x2 blocks
        emb = cells.reshape(len(images), 4, 2, 4, 2, 3).mean((2, 4)).reshape(len(images), -1).float()
        return emb, [PatchGrid(cells.float(), [FULL_BOX] * len(images))]


class NoPatches(ColourPatches):
    has_patch_tokens = False


def planted_original() -> Image.Image:
    return paint("green field red square blue circle", 128, 128, torch.Generator().manual_seed(999))


@pytest.fixture
def toy_scorer():
    scorer = ReconScorer.from_preset(
        "smoke", device="cpu", cache=ArtifactCache(enabled=False), overrides={"max_side": 128}
    )
    scorer.renderer._pipe = PaintPipeline()
    scorer._encoder = ColourPatches()
    return scorer


SEEDS = [1, 2, 3, 4, 5]


def region_mean(grid: np.ndarray, box) -> float:
    rows, cols = grid.shape
    x0, y0, x1, y1 = box
    return float(
        grid[int(y0 * rows) : int(np.ceil(y1 * rows)), int(x0 * cols) : int(np.ceil(x1 * cols))].mean()
    )


def inside(point_box, plant_box) -> bool:
    cx, cy = (point_box[0] + point_box[2]) / 2, (point_box[1] + point_box[3]) / 2
    x0, y0, x1, y1 = plant_box
    return x0 <= cx <= x1 and y0 <= cy <= y1


def test_recall_map_is_low_where_an_unmentioned_object_is(toy_scorer):
    expl = toy_scorer.explain(planted_original(), "a green field, a red square", seeds=SEEDS[:2])
    blue = PLANTS["blue circle"][2]
    recall = expl.recall
    rest = recall.copy()
    rest[int(blue[1] * 8) : 8, int(blue[0] * 8) : 8] = np.nan
    assert region_mean(recall, (0.65, 0.65, 0.9, 0.9)) < np.nanmean(rest) - 0.5
    r, c = np.unravel_index(np.argmin(recall), recall.shape)
    assert inside(((c + 0.5) / 8, (r + 0.5) / 8, (c + 0.5) / 8, (r + 0.5) / 8), blue)
    assert expl.aligned.shape == recall.shape and expl.box == FULL_BOX


def test_correct_and_wrong_phrases_get_significant_deltas_of_opposite_sign(toy_scorer):
    caption = "a green field, a red square, a yellow triangle and a blue circle"
    expl = toy_scorer.explain(planted_original(), caption, seeds=SEEDS)
    by_text = {p.text: p for p in expl.phrases}
    assert list(by_text) == ["a green field", "a red square", "a yellow triangle", "and a blue circle"]
    for right in ("a green field", "a red square", "and a blue circle"):
        assert by_text[right].delta > 0 and by_text[right].significant, by_text[right]
    wrong = by_text["a yellow triangle"]
    assert wrong.delta < 0 and wrong.significant, wrong
    assert expl.worst_phrase.text == "a yellow triangle"
    # where each phrase lives: the recall drops most inside its planted shape
    assert inside(by_text["a red square"].region, PLANTS["red square"][2])
    assert inside(by_text["and a blue circle"].region, PLANTS["blue circle"][2])
    assert expl.phrase_drops.shape == (4, 8, 8)


def test_deltas_are_the_per_seed_paired_differences(toy_scorer):
    caption = "a green field, a red square"
    expl = toy_scorer.explain(planted_original(), caption, seeds=SEEDS[:3])
    reduced = [
        toy_scorer.score(planted_original(), without(caption, split_phrases(caption)[1]), seeds=s)
        for s in SEEDS[:3]
    ]
    expected = [f - r.recon_score for f, r in zip(expl.per_seed, reduced)]
    assert expl.phrases[1].per_seed == pytest.approx(expected, abs=1e-5)


def test_an_encoder_without_patch_tokens_still_attributes_phrases(toy_scorer):
    toy_scorer._encoder = NoPatches()
    expl = toy_scorer.explain(planted_original(), "a green field, a yellow triangle", seeds=SEEDS[:3])
    assert expl.recall is None and "no patch tokens" in expl.maps_note
    assert expl.phrases[1].delta < 0


def test_paired_effect_matches_scipy_ttest_rel():
    full, reduced = [71.2, 70.4, 72.9, 70.1], [70.0, 70.9, 71.1, 69.0]
    mean, _se, t, p = paired_effect(full, reduced)
    ref = stats.ttest_rel(full, reduced)
    assert t == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-12)
    assert mean == pytest.approx(np.mean(np.subtract(full, reduced)))
    assert paired_effect([1.0], [0.5])[1:] == (None, None, None)


def test_holm_by_hand():
    """Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.06 for the last."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == [] and holm([0.2]) == [0.2]


# statsmodels 0.15.0, multipletests(p, alpha=0.05, method="holm"): (p, adjusted p, reject), recorded from it (its
# import and first calls take minutes on a loaded 2-core machine, so the test keeps its answers, not the call)
STATSMODELS_HOLM = [
    ([0.2, 0.001, 0.049, 0.5, 0.012], [0.4, 0.005, 0.147, 0.5, 0.048], [False, True, False, False, True]),
    ([0.03, 0.03, 0.03], [0.09, 0.09, 0.09], [False, False, False]),
    ([0.8, 0.02], [0.8, 0.04], [False, True]),
    (
        [0.0001, 0.3, 0.02, 0.04, 0.011, 0.6, 0.047, 0.009],
        [0.0008, 0.6, 0.1, 0.16, 0.066, 0.6, 0.16, 0.063],
        [True, False, False, False, False, False, False, False],
    ),
]


@pytest.mark.parametrize(("p", "adjusted", "reject"), STATSMODELS_HOLM)
def test_holm_matches_statsmodels(p, adjusted, reject):
    assert holm(p) == pytest.approx(adjusted, rel=1e-12, abs=1e-15)
    assert [a < 0.05 for a in holm(p)] == reject


def test_significance_is_holm_corrected_and_said_in_the_record(toy_scorer):
    caption = "a green field, a red square, a yellow triangle and a blue circle"
    expl = toy_scorer.explain(planted_original(), caption, seeds=SEEDS)
    scored = [p for p in expl.phrases if p.p is not None]
    assert [p.p_adjusted for p in scored] == pytest.approx(holm([p.p for p in scored]))
    assert all(p.significant == (p.p_adjusted < 0.05) for p in scored)
    rec = expl.record()
    assert (
        rec["correction"] == "holm"
        and rec["worst_phrase"] == "a yellow triangle"
        and rec["worst_note"] is None
    )


def test_no_worst_phrase_when_nothing_hurt(toy_scorer):
    expl = toy_scorer.explain(planted_original(), "a green field, a red square", seeds=SEEDS)
    assert all(p.delta > 0 for p in expl.phrases)
    assert expl.worst_phrase is None and expl.record()["worst_phrase"] is None
    assert expl.record()["worst_note"] == "no phrase hurt" and "no phrase hurt" in repr(expl)
    one = explain_one(toy_scorer, planted_original(), "a green field, a yellow triangle", seeds=[1])
    assert one.worst_phrase is None and one.worst_note.startswith("one seed")


def test_a_region_only_beyond_the_seed_noise_of_the_map():
    steady = np.zeros((4, 3, 3))
    steady[:, 1, 2] = [0.30, 0.31, 0.29, 0.30]  # drops at (1, 2) on every seed
    noisy = np.zeros((4, 3, 3))
    noisy[:, 1, 2] = [1.2, -0.9, 1.1, -0.8]  # the largest mean drop, but within the seed noise
    for drops, expected in ((steady, [2 / 3, 1 / 3, 1.0, 2 / 3]), (noisy, None)):
        effect = PhraseEffect("x", 0, 1, "object", 1.0, [1.0])
        _region(effect, drops, FULL_BOX, 0.05)
        assert effect.region == (pytest.approx(expected, abs=1e-6) if expected else None)
    effect = PhraseEffect("x", 0, 1, "object", 1.0, [1.0])
    _region(effect, steady[:1], FULL_BOX, 0.05)  # one seed: no noise estimate, no region
    assert effect.region is None


@pytest.mark.parametrize(
    "caption, phrases",
    [
        ("green farmland", ["green farmland"]),
        (
            "A dense residential area with many houses, some trees and a road that runs left to right.",
            [
                "A dense residential area",
                "with many houses",
                "some trees",
                "and a road",
                "that runs left to right",
            ],
        ),
        (
            "two white planes near the terminal; a runway lies to the north.",
            ["two white planes near the terminal", "a runway lies to the north"],
        ),
        ("Sandy beach. Waves, which are white", ["Sandy beach", "Waves", "which are white"]),
        ("Android phones, Oregon roads", ["Android phones", "Oregon roads"]),  # connectives match whole words
    ],
)
def test_phrase_rule(caption, phrases):
    assert [p.text for p in split_phrases(caption)] == phrases


def test_leaving_a_phrase_out_keeps_a_tidy_sentence():
    caption = "a green field, a red square, and a blue circle."
    p = split_phrases(caption)
    assert [without(caption, x) for x in p] == [
        "a red square, and a blue circle.",
        "a green field, and a blue circle.",
        "a green field, a red square.",
    ]
    assert [x.kind for x in split_phrases("three tanks, a red roof, on the left, a barn")] == [
        "count",
        "colour",
        "spatial",
        "object",
    ]


def test_maps_file_is_the_same_bytes_every_time_and_loads_without_pickle(toy_scorer):
    expl = toy_scorer.explain(planted_original(), "a green field, a red square", seeds=[1, 2])
    data = maps_npz(expl)
    assert data == maps_npz(expl)
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(io.BytesIO(data)).infolist())
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        np.testing.assert_array_equal(z["recall"], expl.recall)
        assert tuple(z["box"]) == FULL_BOX


def test_dreamsim_towers_give_the_tokens_dreamsim_takes_its_cls_from():
    """On dreamsim's own PerceptualModel (ensemble + LoRA, random weights at a small width): the embedding is
    `encode_images`' own, and each tower's grid, taken in the same forward, is the block-11 output of dreamsim's
    `extract_descriptors`, whose token 0 is the CLS feature dreamsim's `_extract_cls` returns."""
    from recon_score.encoders import build_encoder
    from recon_score.encoders.dreamsim import perceptual_model

    enc = build_encoder("shapes:dreamsim@0.02", device="cpu")
    images = [planted_original(), Image.new("RGB", (96, 64), (200, 10, 10))]
    assert enc.has_patch_tokens
    emb, grids = enc.encode_images_and_patches(images)
    assert torch.equal(emb, enc.encode_images(images))  # the same embedding from the one forward pass
    inner = perceptual_model(enc.model)
    assert len(grids) == len(inner.extractor_list) == 3
    x = enc._pixels(images)
    with torch.inference_mode():
        for i, (grid, extractor, model_type) in enumerate(zip(grids, inner.extractor_list, inner.model_list)):
            assert grid.tokens.shape[1:3] == (14, 14) and grid.boxes == [FULL_BOX, FULL_BOX]
            full = extractor.extract_descriptors(inner._preprocess(x, model_type), 11)[:, 0, 0]
            cls = inner._extract_cls(inner._preprocess(x, model_type), i)[:, 0, 0]
            torch.testing.assert_close(full[:, 0], cls)
            torch.testing.assert_close(full[:, 1:].reshape(grid.tokens.shape), grid.tokens)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": [1, 1]}, "at least 2 distinct seeds"),
        ({"seeds": [1]}, "at least 2 distinct seeds"),
        ({"seeds": "12"}, "seeds must be a list of integers"),
        ({"seeds": 3}, "seeds must be a list of integers"),
        ({"seeds": [1, 2.5]}, "seeds must be integers"),
        ({"seeds": [True, 2]}, "seeds must be integers"),
        ({"max_phrases": -1}, "max_phrases must be an integer >= 1"),
        ({"max_phrases": 0}, "max_phrases must be an integer >= 1"),
        ({"level": 2}, "strictly between 0 and 1"),
        ({"level": 0}, "strictly between 0 and 1"),
    ],
)
def test_explain_checks_its_arguments_as_the_cli_does(toy_scorer, kwargs, message):
    from recon_score.errors import ArgumentError, ReconScoreError

    args = {"seeds": [1, 2], **kwargs}
    with pytest.raises(ArgumentError, match=message) as err:
        toy_scorer.explain(planted_original(), "a green field, a red square", **args)
    assert isinstance(err.value, ReconScoreError)
    assert toy_scorer.stats["rendered"] == 0  # refused before any render


def test_the_cli_refuses_one_explain_seed():
    from click.testing import CliRunner

    from eval.cli import cli

    result = CliRunner().invoke(
        cli, ["score", "--preset", "smoke", "--explain", "--explain-seeds", "1", "--out", "x"]
    )
    assert result.exit_code == 2 and "--explain-seeds" in result.output


def test_one_forward_pass_gives_the_embedding_and_the_patch_tokens(toy_scorer):
    enc = toy_scorer.encoder
    enc.calls = 0
    expl = toy_scorer.explain(planted_original(), "a green field, a red square", seeds=[1, 2])
    # the original once, then one batch of K renders per variant (full caption, two phrases left out)
    assert enc.calls == 1 + 3 and expl.recall is not None


@pytest.mark.parametrize("spec", ["smoke:dreamsim", "smoke:open-clip"])
def test_synthetic_encoders_give_their_embedding_with_the_patch_tokens(spec):
    from recon_score.encoders import build_encoder

    enc = build_encoder(spec, device="cpu")
    images = [planted_original(), Image.new("RGB", (96, 64), (200, 10, 10))]
    assert enc.has_patch_tokens
    emb, grids = enc.encode_images_and_patches(images, batch_size=1)
    assert torch.equal(emb, enc.encode_images(images, batch_size=1))
    assert all(g.tokens.shape[0] == 2 and len(g.boxes) == 2 for g in grids)
