"""ReconScore as a training signal, accepted by TRL's own trainers (not a look-alike): one DPOTrainer step on
pairs that `reconscore pairs` made from a smoke describe run, and one GRPOTrainer step driven by
ReconScoreReward. Tiny random Qwen3-VL (the project's `qwen3-vl` fixture), offline, on the CPU."""

import logging
import math

import numpy as np
import pytest
import torch

from eval.cli import main
from recon_score.reward import ReconScoreReward, completion_text, length_residuals
from recon_score.synthetic.smoke import ensure_fixture
from tests.smoke_cli import smoke

trl = pytest.importorskip("trl")  # the `train` extra (also in `dev`)


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory):
    """A smoke describe run on two bundled images (3 candidates each) turned into best-vs-each pairs: 4 pairs."""
    root = tmp_path_factory.mktemp("training")
    run, out = root / "describe", root / "pairs"
    assert main(smoke("describe", run, "--n", "3", "--limit", "2")) == 0
    assert main(["pairs", str(run), "--out", str(out), "--policy", "best-vs-each"]) == 0
    return out


@pytest.fixture(scope="module")
def dataset(pairs_dir):
    from datasets import load_dataset

    return load_dataset(str(pairs_dir), split="train")


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(before: dict, model, prefix: str) -> bool:
    return any(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters() if prefix in n)


def test_dpo_trainer_takes_one_step_on_the_pairs(dataset, tmp_path):
    from trl import DPOConfig, DPOTrainer

    assert len(dataset) == 4  # 2 images x (best vs each of the 2 others)
    args = DPOConfig(
        output_dir=str(tmp_path / "dpo"),
        use_cpu=True,
        save_strategy="no",
        max_steps=1,
        per_device_train_batch_size=4,
        max_length=None,  # TRL's advice for VLMs: truncation could cut image tokens
        report_to="none",
        logging_steps=1,
        learning_rate=1e-3,
    )
    # a saved folder as the model: TRL loads the reference model from the same path
    trainer = DPOTrainer(model=str(ensure_fixture("qwen3-vl")), args=args, train_dataset=dataset)
    before = _params(trainer.model)
    trainer.train()
    log = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    # policy = reference at the first step: DPO's loss is -log sigmoid(0) = ln 2 exactly
    assert log["loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert math.isfinite(log["logps/chosen"]) and math.isfinite(log["logps/rejected"])
    assert _changed(before, trainer.model, "language_model")
    assert _changed(before, trainer.model, "visual")  # the images reached the vision tower


def test_grpo_trainer_takes_one_step_with_the_reward(dataset, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    reward = ReconScoreReward.from_preset("smoke", device="cpu", batch_size=4)
    calls = []

    def spy(**kwargs):
        out = reward(**kwargs)
        calls.append((kwargs, out))
        return out

    spy.__name__ = reward.__name__
    prompts = dataset.select_columns(["image", "prompt"]).select(range(2))
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        use_cpu=True,
        save_strategy="no",
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        report_to="none",
        logging_steps=1,
        learning_rate=1e-3,
    )
    trainer = GRPOTrainer(
        model=str(ensure_fixture("qwen3-vl")), reward_funcs=spy, args=args, train_dataset=prompts
    )
    before = _params(trainer.model)
    trainer.train()
    assert trainer.state.global_step == 1 and _changed(before, trainer.model, "language_model")
    kwargs, out = calls[0]
    assert len(out) == len(kwargs["completions"]) == 2 and all(isinstance(r, float) for r in out)
    # what TRL passed: conversational completions and the rows' images; the reward is ReconScore of exactly those
    texts = [completion_text(c) for c in kwargs["completions"]]
    direct = reward.scorer.score_seeds(list(zip(kwargs["image"], texts)), reward.seeds)
    assert out == [r.recon_score for r in direct]
    assert trainer.state.log_history[0]["rewards/recon_score/mean"] == pytest.approx(np.mean(out), rel=1e-5)
    assert reward.seeds[0] != reward.scorer.preset.seed  # never the held-out evaluation seed


def test_failed_rows_are_none_with_a_logged_reason(dataset, caplog):
    reward = ReconScoreReward.from_preset("smoke", device="cpu")
    img = dataset[0]["image"]
    completions = [
        [{"role": "assistant", "content": "a farm"}],
        [{"role": "assistant", "content": "  "}],
        "a road",
    ]
    with caplog.at_level(logging.WARNING, logger="recon_score.reward"):
        out = reward(prompts=["p"] * 3, completions=completions, image=[img, img, None])
    assert isinstance(out[0], float) and out[1] is None and out[2] is None
    assert reward.failures == ["empty completion", "no image for completion 2 in column 'image'"]
    assert "empty completion" in caplog.text and "no image" in caplog.text


def test_a_completion_that_is_not_text_is_named_by_its_type(dataset):
    """An int, None or bytes completion is not "empty": the reason says its type; a row without an image in
    `images` (TRL's multi-image column) names `images`, not 'image'."""
    reward = ReconScoreReward.from_preset("smoke", device="cpu")
    img = dataset[0]["image"]
    out = reward(prompts=["p"] * 4, completions=[7, None, b"a farm", "a road"], images=[[img]] * 3 + [[]])
    assert out == [None] * 4
    assert reward.failures == [
        "completion 0 is an int, not text (a string, or assistant messages with text content)",
        "completion 1 is None, not text (a string, or assistant messages with text content)",
        "completion 2 is a bytes, not text (a string, or assistant messages with text content)",
        "no image for completion 3 in column 'images'",
    ]


def test_length_residuals_match_an_outside_least_squares_fit():
    from scipy.stats import linregress

    texts = ["a", "a b", "a b c d", "a b c d e f g h", "x y"]
    scores = [50.0, 52.0, 57.0, 61.0, None]
    out = length_residuals(scores, texts)
    fit = linregress(np.log([1, 2, 4, 8]), scores[:4])
    expected = [s - (fit.intercept + fit.slope * math.log(n)) for s, n in zip(scores[:4], [1, 2, 4, 8])]
    assert out[:4] == pytest.approx(expected) and out[4] is None
    assert np.corrcoef(np.log([1, 2, 4, 8]), out[:4])[0, 1] == pytest.approx(0.0, abs=1e-9)
    assert length_residuals([3.0, 5.0], ["a", "a b"]) == [-1.0, 1.0]  # too few to fit: the mean is subtracted
