"""One class per engine: the registry the CLI reads, text completions and judge answers on the same classes, and
a generation of invisible characters only as that candidate's error (never the batch's or the run's)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from describer.backends import (
    BACKENDS,
    CaptionRequest,
    Sampling,
    build_backend,
    build_captioner,
    clean_generation,
)
from describer.backends.base import Backend

INVISIBLE = "\u200b\u200d\u2060"  # zero-width space, joiner, word joiner


def test_the_registry_names_the_engine_classes_and_the_cli_reads_it():
    import click

    from eval.cli import cli

    assert list(BACKENDS) == ["transformers", "vllm", "openai"]
    classes = {n: e.load() for n, e in BACKENDS.items() if n != "vllm" or _has_vllm()}
    assert all(issubclass(c, Backend) and c.name == n for n, c in classes.items())
    for method in ("generate", "complete", "judge"):  # each engine has all three
        assert all(getattr(c, method) is not getattr(Backend, method) for c in classes.values()), method
    ctx = click.Context(cli)
    for command in ("generate", "describe"):
        params = {p.name: p for p in cli.get_command(ctx, command).params}
        assert list(params["backend"].type.choices) == list(BACKENDS)
    with pytest.raises(ValueError, match=r"unknown backend 'tgi'; known: transformers, vllm, openai"):
        build_backend("tgi", "m")


def _has_vllm() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("text", [INVISIBLE, " \u200b\n", "<think>x</think>\u2060"])
def test_an_invisible_generation_is_a_candidate_error(text):
    cand = clean_generation(text, "stop")
    assert cand.text is None and cand.error and cand.finish_reason == "stop"


def openai_backend(monkeypatch, responses):
    from describer.backends.openai import OpenAIBackend

    cap = OpenAIBackend("m", base_url="http://localhost:1/v1")
    sent = []
    monkeypatch.setattr(cap, "_post", lambda body: sent.append(body) or responses.pop(0))
    return cap, sent


def _choice(text):
    return {"message": {"content": text}, "finish_reason": "stop"}


def test_openai_keeps_the_good_siblings_of_an_invisible_candidate(monkeypatch):
    cap, _ = openai_backend(
        monkeypatch, [{"choices": [_choice("a farm"), _choice(INVISIBLE), _choice("a road")]}]
    )
    req = CaptionRequest(Image.new("RGB", (8, 8)), seed=1, key="a")
    (cands,) = cap.generate([req], "Describe.", Sampling(n=3))
    assert [c.text for c in cands] == ["a farm", None, "a road"]
    assert cands[1].error and "visible" in cands[1].error


def test_openai_completions_are_one_line_and_seeded_per_prompt(monkeypatch):
    from describer.backends.base import prompt_seed

    cap, sent = openai_backend(
        monkeypatch, [{"choices": [_choice("two\n  cars ")]}, {"choices": [_choice(INVISIBLE)]}]
    )
    cap.concurrency = 1
    out = cap.complete(["p1", "p2"], Sampling(n=1, seed=5))
    assert out[0].text == "two cars" and out[1].text is None and out[1].error
    assert sent[0]["seed"] == prompt_seed(5, "p1") and sent[0]["messages"] == [
        {"role": "user", "content": "p1"}
    ]
    assert sent[0]["n"] == 1


@pytest.fixture(scope="module")
def tiny_vlm():
    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu")
    cap._load()
    return cap


def test_transformers_generation_of_invisible_text_stays_inside_generate(tiny_vlm, monkeypatch):
    monkeypatch.setattr(
        tiny_vlm._processor, "batch_decode", lambda ids, **kw: [INVISIBLE, "a farm"] * (len(ids) // 2)
    )
    rng = np.random.default_rng(0)
    req = CaptionRequest(Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)), seed=3, key="a")
    (cands,) = tiny_vlm.generate([req], "Describe.", Sampling(n=2, max_new_tokens=2))
    assert cands[0].text is None and "visible" in cands[0].error and cands[1].text == "a farm"
