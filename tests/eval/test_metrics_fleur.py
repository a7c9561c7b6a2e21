"""FLEUR / RefFLEUR: the score smoothing of the authors' `fleur.py` (Yebin46/FLEUR) on fixed log-probabilities
worked out by hand, the prompt and padded pixels against the authors' own functions (data/fleur, made by
make_fleur_reference.py from their code), and the judge through the describer's transformers and
OpenAI-compatible engines (a tiny Qwen3-VL whose logits are scripted; a canned server response)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from describer.backends.base import Backend, JudgeRequest, JudgeStep, llava_v1_prompt
from eval.metrics import CaptionBatch, build_metric
from eval.metrics.fleur import (
    FLEUR_PROMPT,
    LLAVA_IMAGE_MEAN,
    REFFLEUR_PROMPT,
    FleurError,
    expand_to_square,
    fleur_score,
    printed_score,
)
from recon_score.errors import ReconScoreError

DATA = Path(__file__).parent / "data" / "fleur"
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def step(token, probs=None):
    """A generated token and the digits' probabilities at its position (given as probabilities, stored as logs)."""
    d = int(token) if token.isdigit() and len(token) == 1 else None
    return JudgeStep(token, d, {k: math.log(p) for k, p in (probs or {}).items()})


def test_one_decimal_is_the_expected_first_decimal():
    # "0.7": at the "7": p(6)=0.2, p(7)=0.7, p(8)=0.1 -> 0.1 * (6*0.2 + 7*0.7 + 8*0.1) = 0.69
    steps = [step("0"), step("."), step("7", {6: 0.2, 7: 0.7, 8: 0.1})]
    assert fleur_score("0.7", steps) == pytest.approx(0.69)


def test_two_decimals_add_the_second_digit_at_a_hundredth():
    # "0.85": 0.1 * (8*0.5 + 9*0.5) + 0.01 * (5*0.6 + 4*0.4) = 0.85 + 0.046 = 0.896
    steps = [step("0"), step("."), step("8", {8: 0.5, 9: 0.5}), step("5", {5: 0.6, 4: 0.4})]
    assert fleur_score("Score: 0.85", steps) == pytest.approx(0.896)


def test_repeated_digits_pick_the_authors_occurrence():
    # "0.05": d1 = 0 is the second "0" (after the dot); "0.77": d2 = 7 is the second "7"
    steps = [step("0", {0: 1.0}), step("."), step("0", {0: 0.5, 1: 0.5}), step("5", {5: 1.0})]
    assert fleur_score("0.05", steps) == pytest.approx(0.1 * 0.5 + 0.01 * 5)
    steps = [step("0"), step("."), step("7", {7: 1.0}), step("7", {7: 0.5, 6: 0.5})]
    assert fleur_score("0.77", steps) == pytest.approx(0.7 + 0.01 * (3.5 + 3.0))


def test_one_is_point_nine_p0_plus_p1():
    steps = [step("1", {1: 0.6, 0: 0.3, 9: 0.1}), step("."), step("0")]
    assert fleur_score("1.0", steps) == pytest.approx(0.9 * 0.3 + 0.6)


def test_digits_outside_a_servers_top_k_count_as_zero():
    steps = [step("0"), step("."), step("4", {4: 0.9})]  # the other digits were not in the top k
    assert fleur_score("0.4", steps) == pytest.approx(0.36)


@pytest.mark.parametrize(
    "text, message",
    [("I cannot tell", "no number"), ("1.5", "outside"), ("0.5 or 0.6", "no number")],
)
def test_unusable_answers_are_row_errors(text, message):
    with pytest.raises(FleurError, match=message):
        fleur_score(text, [step("0"), step("."), step("5")])


def test_printed_score_strips_like_the_authors():
    assert printed_score("...0.8.") == 0.8 and printed_score("Score: 0.25") == 0.25


# -- the transformers backend, on a tiny VLM whose next-token logits are scripted -------------------------------
@pytest.fixture(scope="module")
def tiny_judge():
    from describer.backends import build_captioner

    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu")
    cap._load()
    return cap


def scripted_logits(cap, script: list[str], digit_logits: dict[int, float]):
    """A hook on the LM head: at step t the vocabulary gets logit 0, the digits `digit_logits`, and the scripted
    token 20 (so greedy decoding prints the script); returns the remover and the per-step logit vectors."""
    tok = cap._processor.tokenizer
    vocab = cap._model.lm_head.out_features
    ids = [tok.convert_tokens_to_ids("<|im_end|>") if t == "<eos>" else tok.encode(t)[-1] for t in script]
    digit_ids = {d: tok.encode(str(d))[-1] for d in range(10)}
    state = {"t": 0, "vectors": []}

    def hook(_module, _args, output):
        vec = torch.zeros(vocab)
        for d, v in digit_logits.items():
            vec[digit_ids[d]] = v
        vec[ids[min(state["t"], len(ids) - 1)]] = 20.0
        state["vectors"].append(vec)
        state["t"] += 1
        out = torch.zeros_like(output)
        out[:, -1] = vec
        return out

    return cap._model.lm_head.register_forward_hook(hook), state, digit_ids


def test_transformers_judge_returns_the_models_digit_log_probabilities(tiny_judge, sample_dir):
    image = Image.open(next((sample_dir / "images").iterdir()))
    digit_logits = {6: 18.0, 7: 19.0, 8: 17.0}
    handle, state, digit_ids = scripted_logits(tiny_judge, ["0", ".", "7", "<eos>"], digit_logits)
    try:
        answer = tiny_judge.judge(JudgeRequest(image, FLEUR_PROMPT.format(candidate="a farm"), 8))
    finally:
        handle.remove()
    assert answer.text == "0.7" and [s.digit for s in answer.steps[:3]] == [0, None, 7]
    logp = torch.log_softmax(state["vectors"][2], dim=-1)
    for d in range(10):
        assert answer.steps[2].digit_logprobs[d] == pytest.approx(float(logp[digit_ids[d]]), abs=1e-5)
    p = logp.exp()
    expected = 0.1 * sum(float(p[digit_ids[k]]) * k for k in range(10))  # by hand from the scripted logits
    assert fleur_score(answer.text, answer.steps) == pytest.approx(expected, rel=1e-5)


def test_fleur_metric_through_the_transformers_backend(tiny_judge, sample_dir):
    images = sorted((sample_dir / "images").iterdir())[:2]
    handle, state, digit_ids = scripted_logits(tiny_judge, ["0", ".", "6", "<eos>"], {5: 19.0})
    try:
        m = build_metric("fleur", captioner=tiny_judge, max_new_tokens=8)
        out = m.score(CaptionBatch(["a farm", None, "a farm"], None, [images[0], images[1], images[0]]))
    finally:
        handle.remove()
    p = torch.softmax(state["vectors"][2], dim=-1)
    expected = 0.1 * sum(float(p[digit_ids[k]]) * k for k in range(10))  # ~ 0.1 * (6 e + 5) / (e + 1)
    assert out.values[0] == pytest.approx(expected, rel=1e-5) and np.isnan(out.values[1])
    assert (
        out.values[2] == out.values[0] and out.info["distinct_pairs"] == 1
    )  # a repeated pair is judged once
    assert out.extra["fleur_printed"] == [0.6, None, 0.6] and out.extra["fleur_error"][1] == "no caption"
    assert m.config()["judge"]["backend"] == "transformers"


# -- OpenAI-compatible servers: top_logprobs ------------------------------------------------------------------
def server(monkeypatch, response):
    from describer.backends.openai import OpenAIBackend

    cap = OpenAIBackend("judge", base_url="http://localhost:1/v1")
    sent = []
    monkeypatch.setattr(cap, "_post", lambda body: sent.append(body) or response)
    monkeypatch.setattr(cap, "preflight", lambda: None)
    return cap, sent


def lp(token, p, top=()):
    return {
        "token": token,
        "logprob": math.log(p),
        "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in top],
    }


def test_openai_judge_reads_top_logprobs(monkeypatch):
    content = [lp("0", 0.99), lp(".", 0.99), lp("8", 0.6, [("8", 0.6), ("9", 0.3), ("a", 0.1)])]
    response = {"choices": [{"message": {"content": "0.8"}, "logprobs": {"content": content}}]}
    cap, sent = server(monkeypatch, response)
    refs = ["a farm", "fields"]
    m = build_metric("reffleur", captioner=cap)
    out = m.score(CaptionBatch(["a   farm\nnear a road"], [refs], [Image.new("RGB", (8, 8))]))
    assert out.values[0] == pytest.approx(0.1 * (8 * 0.6 + 9 * 0.3))
    body = sent[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": llava_v1_prompt("").split(" USER:")[0]}
    prompt = body["messages"][1]["content"][1]["text"]
    assert prompt == REFFLEUR_PROMPT.format(candidate="a farm near a road", references="a farm\nfields")
    assert m.config()["conversation"] == "llava_v1"


def test_a_server_without_logprobs_stops_the_metric_with_one_clear_error(monkeypatch):
    cap, _ = server(monkeypatch, {"choices": [{"message": {"content": "0.8"}}]})
    with pytest.raises(ReconScoreError, match="no token log-probabilities"):
        cap.judge(JudgeRequest(Image.new("RGB", (8, 8)), "x", 4))
    batch = CaptionBatch(["a farm"], None, [Image.new("RGB", (8, 8))])
    with pytest.raises(ReconScoreError, match="no token log-probabilities"):  # every row would fail alike
        build_metric("fleur", captioner=cap).score(batch)


def test_backends_without_logprobs_are_refused():
    class Other(Backend):
        name = "other"

    with pytest.raises(ReconScoreError, match="cannot return token log-probabilities"):
        Other().judge(JudgeRequest(None, "x", 4))


# -- the judge's input as the authors' code makes it (LLaVA's llava_v1 conversation, expand2square) -------------
def test_prompts_are_the_authors_llava_v1_rendering():
    ref = json.loads((DATA / "prompts.json").read_text())
    fleur, reffleur = build_metric("fleur", captioner=object()), build_metric("reffleur", captioner=object())
    text = fleur._prompt(ref["candidate"], [])
    assert text == ref["fleur"]["instruction"] and llava_v1_prompt(text) == ref["fleur"]["prompt"]
    text = reffleur._prompt(ref["candidate"], ref["references"])
    assert text == ref["reffleur"]["instruction"] and llava_v1_prompt(text) == ref["reffleur"]["prompt"]


@pytest.mark.parametrize("size", ["7x4", "4x9", "5x5", "2x6"])
@pytest.mark.parametrize("mean_name, mean", [("clip", LLAVA_IMAGE_MEAN), ("half", (0.5, 0.5, 0.5))])
def test_padding_is_the_authors_expand2square(size, mean_name, mean):
    image = Image.open(DATA / f"input_{size}.png")
    expected = np.asarray(Image.open(DATA / f"padded_{size}_{mean_name}.png"))
    assert np.array_equal(np.asarray(expand_to_square(image, mean)), expected)


class Recorder:
    """The judge's processor, recording the text and images it is called with."""

    def __init__(self, processor):
        self.processor, self.calls = processor, []

    def __getattr__(self, name):
        return getattr(self.processor, name)

    def __call__(self, *, text, images, **kw):
        self.calls.append((text, images))
        return self.processor(text=text, images=images, **kw)


def test_the_transformers_judge_receives_the_authors_prompt_and_padded_pixels(tiny_judge, monkeypatch):
    ref = json.loads((DATA / "prompts.json").read_text())
    recorder = Recorder(tiny_judge._processor)
    monkeypatch.setattr(tiny_judge, "_processor", recorder)
    image = Image.open(DATA / "input_7x4.png")
    m = build_metric("fleur", captioner=tiny_judge, max_new_tokens=2)
    m.score(CaptionBatch([ref["candidate"]], None, [image]))
    (text,), (sent,) = recorder.calls[0]
    assert text == ref["fleur"]["prompt"].replace("<image>", QWEN_IMAGE)  # the processor's own image token
    mean = {tuple(LLAVA_IMAGE_MEAN): "clip", (0.5, 0.5, 0.5): "half"}[tuple(tiny_judge.image_mean())]
    expected = np.asarray(Image.open(DATA / f"padded_7x4_{mean}.png"))  # the judge processor's mean colour
    assert np.array_equal(np.asarray(sent), expected)
    variant = build_metric("fleur", captioner=tiny_judge, max_new_tokens=2, conversation="chat-template")
    variant.image_aspect_ratio = "none"
    variant.score(CaptionBatch([ref["candidate"]], None, [image]))
    (text,), (sent,) = recorder.calls[1]
    assert "A chat between" not in text and sent.size == (7, 4)


def test_the_smoke_judge_answers_with_digits_so_the_score_is_computed(sample_dir):
    images = sorted((sample_dir / "images").iterdir())[:2]
    m = build_metric("fleur", weights="smoke", device="cpu")
    out = m.score(CaptionBatch(["a farm", "a road"], None, images))
    assert "fleur_error" not in out.extra, out.extra
    assert all(0 <= v <= 1 for v in out.values)
    assert all(p is not None and len(str(p)) <= 4 for p in out.extra["fleur_printed"])
    assert m.config()["dtype"] == "bfloat16" and m.config()["authors_dtype"] == "float16"
