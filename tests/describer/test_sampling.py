"""One resolved sampling configuration, applied in full by every backend.

transformers: checked on the logits processors the real `generate` builds from a checkpoint whose
generation_config.json sets its own top_k, top_p, temperature, repetition penalty and more (as
Qwen3-VL-8B-Instruct's does). vLLM (not installed): the SamplingParams kwargs against vLLM's documented
parameter names. OpenAI-compatible: the JSON body a loopback server receives.
"""

import json
import shutil

import pytest

from describer.backends import Sampling, build_captioner
from describer.backends.sampling import openai_body, transformers_kwargs, vllm_kwargs
from recon_score.errors import ReconScoreError
from tests.describer.test_backends import FakeServer, _reqs

# a checkpoint that would change the distribution if anything were inherited from it
CHECKPOINT_GENERATION = {
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "repetition_penalty": 1.05,
    "min_p": 0.2,
    "typical_p": 0.5,
    "no_repeat_ngram_size": 3,
}
OURS = Sampling(n=2, temperature=0.9, top_p=0.95, top_k=5, repetition_penalty=1.0, max_new_tokens=3, seed=1)


@pytest.fixture(scope="module")
def checkpoint_with_defaults(tmp_path_factory):
    from recon_score.synthetic.smoke import ensure_fixture

    path = tmp_path_factory.mktemp("vlm") / "qwen3-vl"
    shutil.copytree(ensure_fixture("qwen3-vl"), path)
    cfg = json.loads((path / "generation_config.json").read_text())
    cfg.update(CHECKPOINT_GENERATION)
    (path / "generation_config.json").write_text(json.dumps(cfg))
    return path


def _processors(captioner, monkeypatch, call):
    """The logits processors transformers' generate actually built, and the generation config it used."""
    seen = {}
    model = captioner._model
    original = model._get_logits_processor

    def spy(generation_config, *args, **kwargs):
        seen["config"] = generation_config
        seen["processors"] = original(generation_config, *args, **kwargs)
        return seen["processors"]

    monkeypatch.setattr(model, "_get_logits_processor", spy)
    call()
    return seen["config"], {type(p).__name__: p for p in seen["processors"]}


def test_transformers_overrides_the_checkpoint_generation_config(checkpoint_with_defaults, monkeypatch):
    cap = build_captioner("transformers", str(checkpoint_with_defaults), device="cpu")
    cap._load()
    assert cap._model.generation_config.top_k == 20  # the fixture really carries its own defaults
    config, procs = _processors(cap, monkeypatch, lambda: cap.generate(_reqs(1), "Describe.", OURS))
    assert procs["TemperatureLogitsWarper"].temperature == pytest.approx(0.9)
    assert procs["TopKLogitsWarper"].top_k == 5
    assert procs["TopPLogitsWarper"].top_p == pytest.approx(0.95)
    assert procs["MinPLogitsWarper"].min_p == 0.0  # keeps every token
    for inherited in (
        "RepetitionPenaltyLogitsProcessor",
        "TypicalLogitsWarper",
        "NoRepeatNGramLogitsProcessor",
    ):
        assert inherited not in procs
    assert config.max_new_tokens == 3 and config.num_return_sequences == 2 and config.do_sample is True

    # top_k 0 = off: no top-k filter at all, although the checkpoint asks for 20
    off = Sampling(n=1, temperature=0.9, top_p=0.95, top_k=0, max_new_tokens=2)
    _, procs = _processors(cap, monkeypatch, lambda: cap.generate(_reqs(1), "Describe.", off))
    assert "TopKLogitsWarper" not in procs


def test_transformers_plain_kwargs_would_inherit(checkpoint_with_defaults, monkeypatch):
    """The library behaviour the fix addresses: temperature/top_p alone (the authors' call) keep top_k 20 and the
    checkpoint's repetition penalty."""
    import torch

    cap = build_captioner("transformers", str(checkpoint_with_defaults), device="cpu")
    cap._load()
    inputs = cap._processor(
        text=[cap._chat_text("Describe.")], images=[_reqs(1)[0].image], return_tensors="pt"
    )

    def old_call():
        torch.manual_seed(0)
        cap._model.generate(**inputs, do_sample=True, temperature=0.8, top_p=0.9, max_new_tokens=2)

    _, procs = _processors(cap, monkeypatch, old_call)
    assert procs["TopKLogitsWarper"].top_k == 20
    assert "RepetitionPenaltyLogitsProcessor" in procs


# vLLM's SamplingParams fields (docs.vllm.ai, Inference Parameters, v0.8.3)
VLLM_FIELDS = {
    "n",
    "best_of",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "max_tokens",
    "min_tokens",
}


def test_vllm_sampling_params():
    kw = vllm_kwargs(OURS, seed=7)
    assert set(kw) <= VLLM_FIELDS
    assert kw == {
        "n": 2,
        "temperature": 0.9,
        "top_p": 0.95,
        "top_k": 5,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 3,
        "seed": 7,
    }
    assert vllm_kwargs(Sampling(top_k=0), seed=1)["top_k"] == -1  # vLLM's "consider all tokens"


def test_openai_body_sent():
    with FakeServer() as srv:
        cap = build_captioner("openai", "m", base_url=srv.url)
        cap.generate(_reqs(1), "Describe.", OURS)
        strict = build_captioner("openai", "m", base_url=srv.url, sampling_extensions=False)
        strict.generate(_reqs(1), "Describe.", Sampling(n=1, top_k=0, repetition_penalty=1.0))
    body = srv.requests[0]["body"]
    sent = {k: body[k] for k in body if k not in ("model", "messages")}
    assert sent == {
        "temperature": 0.9,
        "top_p": 0.95,
        "max_tokens": 3,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "n": 2,
        "seed": 100,
        "top_k": 5,
        "repetition_penalty": 1.0,
        "min_p": 0.0,
    }
    assert "top_k" not in srv.requests[1]["body"] and "repetition_penalty" not in srv.requests[1]["body"]
    with pytest.raises(ReconScoreError, match="strict OpenAI endpoint"):
        strict.sampling_request(OURS)  # top_k 5 cannot be applied there: refused, not dropped


def test_the_three_requests_agree():
    """Every field of the resolved config reaches every backend with the same meaning."""
    for s in (OURS, Sampling(), Sampling(temperature=0.3, top_p=1.0, top_k=40, repetition_penalty=1.1)):
        t, v, o = transformers_kwargs(s), vllm_kwargs(s, seed=3), openai_body(s, seed=3, n=s.n)
        assert t["temperature"] == v["temperature"] == o["temperature"] == s.temperature
        assert t["top_p"] == v["top_p"] == o["top_p"] == s.top_p
        assert t["top_k"] == s.top_k and v["top_k"] == o["top_k"] == (s.top_k or -1)
        assert t["repetition_penalty"] == v["repetition_penalty"] == o["repetition_penalty"]
        assert t["max_new_tokens"] == v["max_tokens"] == o["max_tokens"] == s.max_new_tokens
        assert t["num_return_sequences"] == v["n"] == o["n"] == s.n


def test_paper_preset_sampling():
    """The ReconScore paper / RemoteDescriber.py: temperature 0.8, top_p 0.9, 512 tokens; top_k 20 came from
    Qwen3-VL-8B-Instruct's generation_config.json, which the authors' generate call inherited."""
    from describer.presets import DESCRIBER_PRESETS

    p = DESCRIBER_PRESETS["paper"]
    assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty, p.max_new_tokens) == (
        0.8,
        0.9,
        20,
        1.0,
        512,
    )
