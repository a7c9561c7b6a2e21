"""The GRPO/RLOO reward callable's inputs and options without a trainer: image forms (PIL, path, array, the
`datasets` {"bytes", "path"} dict), bad images as that row's None, length mismatches, a seed per training step,
and the minimum within-group spread checked against TRL's per-group advantage formula."""

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from recon_score.images import load_image
from recon_score.reward import ReconScoreReward, step_seeds

SAMPLE = Path(__file__).resolve().parents[2] / "recon_score" / "sample" / "images" / "UCM_1.tif"


@pytest.fixture(scope="module")
def reward():
    return ReconScoreReward.from_preset("smoke", device="cpu", batch_size=8)


def test_from_preset_hands_the_rewards_options_to_it_and_the_rest_to_the_scorer(tmp_path):
    from recon_score.artifact_cache import ArtifactCache

    cache = ArtifactCache(tmp_path / "cache")
    r = ReconScoreReward.from_preset(
        "smoke", device="cpu", batch_size=3, cache=cache, normalize="length", seeds=[5]
    )
    assert (r.scorer.batch_size, r.scorer.cache, r.scorer.preset.name) == (3, cache, "smoke")
    assert (r.normalize, r.seeds, r.seed_schedule) == ("length", [5], "fixed")
    with pytest.raises(TypeError, match="batch"):
        ReconScoreReward.from_preset("smoke", device="cpu", batchsize=3)


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_every_image_form_is_accepted_and_a_bad_one_is_that_rows_none(reward, tmp_path):
    img = load_image(SAMPLE, reader=reward.scorer.preset.image_reader)
    png = _png(img)
    (tmp_path / "tile.png").write_bytes(png)
    (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
    images = [
        img,  # PIL
        str(tmp_path / "tile.png"),  # a path
        np.asarray(img),  # a uint8 HWC array
        {"bytes": png, "path": "tile.png"},  # datasets' undecoded Image value
        {"bytes": None, "path": str(tmp_path / "tile.png")},
        str(tmp_path / "cut.png"),  # truncated file
        {"bytes": png[:100], "path": "x.png"},  # truncated bytes
        str(tmp_path / "missing.png"),
        12,
    ]
    before = len(reward.failures)
    out = reward(prompts=["p"] * len(images), completions=["a farm"] * len(images), image=images)
    assert len(out) == len(images)
    assert all(isinstance(v, float) for v in out[:5]) and out[:5] == pytest.approx([out[0]] * 5)
    assert out[5:] == [None] * 4
    reasons = reward.failures[before:]
    assert len(reasons) == 4
    assert "cut.png" in reasons[0] and "image 6" in reasons[1] and "missing.png" in reasons[2]
    assert "image 8: a int is not an image" in reasons[3]


def test_lengths_must_match(reward):
    img = load_image(SAMPLE)
    with pytest.raises(ValueError, match=r"1 entries in column 'image' but 3 completions"):
        reward(prompts=["p"] * 3, completions=["a", "b", "c"], image=[img])
    with pytest.raises(ValueError, match=r"2 prompts but 3 completions"):
        reward(prompts=["p"] * 2, completions=["a", "b", "c"], image=[img] * 3)


def test_a_seed_per_step_recorded_and_never_the_held_out_seed(reward):
    step = ReconScoreReward(reward.scorer, seed_schedule="step")
    img = load_image(SAMPLE)
    logged = []
    kwargs = dict(prompts=["p"] * 2, completions=["a farm", "a road"], image=[img, img])
    out0 = step(
        **kwargs, trainer_state=SimpleNamespace(global_step=0), log_extra=lambda c, v: logged.append((c, v))
    )
    out1 = step(**kwargs, trainer_state=SimpleNamespace(global_step=1))
    s0, s1 = (h["seeds"] for h in step.seed_history)
    assert [h["step"] for h in step.seed_history] == [0, 1] and s0 != s1
    assert s0 == step_seeds(step.seeds[0], 0, 1, exclude={42}) and 42 not in s0 + s1
    assert logged == [("recon_score_seeds", [str(s0[0])] * 2)]
    direct = [r.recon_score for r in reward.scorer.score_seeds([(img, "a farm"), (img, "a road")], s1)]
    assert out1 == direct and out0 != out1
    step(**kwargs)  # no trainer_state (RLOO, a plain call): the call counter is the step
    assert step.seed_history[-1]["step"] == 2
    assert step_seeds(7, 3, 4, exclude=set()) == step_seeds(7, 3, 4, exclude=set())  # a pure function


class _FixedScorer:
    """Returns given scores, so the spread rule is tested on exact numbers."""

    preset = SimpleNamespace(seed=42, image_reader="pil")

    def __init__(self, scores):
        self.scores = scores

    def score_seeds(self, pairs, seeds):
        return [SimpleNamespace(recon_score=self.scores[i], error=None) for i in range(len(pairs))]


def _trl_advantages(rewards: list[float], group: int) -> np.ndarray:
    """TRL GRPOTrainer, scale_rewards="group": (r - group mean) / (group std (ddof 1) + 1e-4)."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1, group)
    return ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()


def test_min_spread_gives_a_narrow_group_zero_advantage():
    from PIL import Image

    scores = [50.0, 50.0005, 49.9995, 40.0, 45.0, 50.0]
    img = Image.new("RGB", (8, 8))
    kwargs = dict(prompts=["p"] * 6, completions=list("abcdef"), image=[img] * 6)
    plain = ReconScoreReward(_FixedScorer(scores))(**kwargs)
    # a 0.001-point spread (well inside seed noise) becomes advantages of +-0.83 (std 5e-4, eps 1e-4)
    assert np.abs(_trl_advantages(plain, 3)[:3]).max() > 0.8
    metrics = []
    r = ReconScoreReward(_FixedScorer(scores), min_spread=0.01, group_size=3)
    out = r(**kwargs, log_metric=lambda name, v: metrics.append((name, v)))
    adv = _trl_advantages(out, 3)
    assert np.all(adv[:3] == 0) and np.allclose(adv[3:], _trl_advantages(plain, 3)[3:])
    assert (
        out[:3] == [pytest.approx(50.0)] * 3
        and r.flat_groups == 1
        and metrics == [("recon_score/flat_groups", 1.0)]
    )
    with pytest.raises(ValueError, match="not whole groups of group_size=4"):
        ReconScoreReward(_FixedScorer(scores), min_spread=0.01, group_size=4)(**kwargs)
    with pytest.raises(ValueError, match="needs group_size"):
        ReconScoreReward(_FixedScorer(scores), min_spread=0.01)
