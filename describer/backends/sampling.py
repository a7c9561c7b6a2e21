"""One `Sampling` -> the request each backend sends, with every sampling field explicit, so no backend draws
from a checkpoint's or server's hidden defaults. See docs/describer.md, "Sampling: one configuration, every
backend"; each builder's dict is what run.json records under `sampling.request`."""

from __future__ import annotations

from describer.backends.base import Sampling
from recon_score.errors import ReconScoreError


def transformers_kwargs(s: Sampling) -> dict:
    """Fields of the `transformers.GenerationConfig` passed to `generate` (num_return_sequences = n)."""
    sample = s.temperature > 0
    return {
        "do_sample": sample,
        "temperature": s.temperature if sample else 1.0,
        "top_p": s.top_p if sample else 1.0,
        "top_k": s.top_k if sample else 0,  # 0: TopKLogitsWarper is not added
        "repetition_penalty": s.repetition_penalty,
        "max_new_tokens": s.max_new_tokens,
        "num_return_sequences": s.n,
        # filters a checkpoint may switch on that `Sampling` does not expose, set to values that disable them
        # (None would be replaced by the checkpoint's value; see GenerationMixin._prepare_generation_config)
        "min_p": 0.0,
        "typical_p": 1.0,
        "epsilon_cutoff": 0.0,
        "eta_cutoff": 0.0,
        "no_repeat_ngram_size": 0,
        "encoder_repetition_penalty": 1.0,
        "min_new_tokens": 0,
        "num_beams": 1,
    }


def generation_config(s: Sampling, base=None):
    """A GenerationConfig for `s`, keeping the checkpoint's token ids (eos/pad/bos) from `base`."""
    from transformers import GenerationConfig

    ids = {
        k: getattr(base, k)
        for k in ("eos_token_id", "pad_token_id", "bos_token_id")
        if getattr(base, k, None) is not None
    }
    return GenerationConfig(**ids, **transformers_kwargs(s))


def vllm_kwargs(s: Sampling, *, seed: int, n: int | None = None) -> dict:
    """Keyword arguments of `vllm.SamplingParams` (top_k -1 = off in every vLLM version)."""
    return {
        "n": s.n if n is None else n,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k if s.top_k > 0 else -1,
        "min_p": 0.0,
        "repetition_penalty": s.repetition_penalty,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": s.max_new_tokens,
        "seed": seed,
    }


def openai_body(s: Sampling, *, seed: int, n: int, extensions: bool = True) -> dict:
    """Sampling fields of a chat-completions body. `top_k`, `repetition_penalty` and `min_p` are extensions that
    vLLM and SGLang servers accept at the top level; a strict OpenAI endpoint rejects them, so
    `extensions=False` omits them and is refused when they are not at their neutral values (they could not be
    applied, and the candidates would come from another distribution)."""
    body = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_new_tokens,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "n": n,
        "seed": seed,
    }
    if extensions:
        body |= {
            "top_k": s.top_k if s.top_k > 0 else -1,
            "repetition_penalty": s.repetition_penalty,
            "min_p": 0.0,
        }
    elif s.top_k > 0 or s.repetition_penalty != 1.0:
        raise ReconScoreError(
            f"top_k={s.top_k} / repetition_penalty={s.repetition_penalty} cannot be sent to a strict OpenAI "
            "endpoint (standard fields only); use a vLLM/SGLang server, or --top-k 0 --repetition-penalty 1"
        )
    return body
