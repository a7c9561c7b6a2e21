"""Greedy answers with per-token digit log-probabilities, for MLLM judges that smooth a printed score over the
probabilities of the digit tokens (FLEUR). One function per backend, on the captioners' own loaded models and
clients: transformers (exact log-softmax over the vocabulary), vLLM and OpenAI-compatible servers (their top-k
log-probabilities; a digit outside the top k counts as probability 0). A server that returns no log-probabilities
is a clear error, never a silent fallback to the printed number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recon_score.errors import ReconScoreError

DIGITS = tuple(range(10))
TOP_LOGPROBS = 20  # the most OpenAI's API returns per position


@dataclass
class JudgeStep:
    """One generated token: which digit it is (None if not a single digit) and the digits' log-probabilities at
    its position (a digit missing from a server's top k is absent)."""

    token: str
    digit: int | None
    digit_logprobs: dict[int, float] = field(default_factory=dict)


@dataclass
class JudgeAnswer:
    text: str
    steps: list[JudgeStep]


def judge_greedy(captioner, image, prompt: str, *, max_new_tokens: int) -> JudgeAnswer:
    """The captioner's greedy answer to (image, prompt), with digit log-probabilities per generated token."""
    kind = getattr(captioner, "name", "")
    if kind == "transformers":
        return _transformers(captioner, image, prompt, max_new_tokens)
    if kind == "openai":
        return _openai(captioner, image, prompt, max_new_tokens)
    if kind == "vllm":
        return _vllm(captioner, image, prompt, max_new_tokens)
    raise ReconScoreError(
        f"backend {kind!r} cannot return token log-probabilities (transformers, vllm, openai can)"
    )


def digit_token_ids(tokenizer) -> dict[int, int]:
    """Digit -> its token id, as FLEUR's `tokenizer.encode(str(s))[-1]`; each digit must be one token."""
    ids = {d: tokenizer.encode(str(d), add_special_tokens=False)[-1] for d in DIGITS}
    bad = [d for d, i in ids.items() if tokenizer.decode([i]).strip() != str(d)]
    if bad:
        raise ReconScoreError(
            f"the judge's tokenizer has no single token for digit(s) {bad}; score smoothing needs one per digit"
        )
    return ids


def _transformers(cap, image, prompt: str, max_new_tokens: int) -> JudgeAnswer:
    import torch
    from transformers import GenerationConfig

    if cap._model is None:
        cap._load()
    model, processor = cap._model, cap._processor
    tok = processor.tokenizer
    ids = digit_token_ids(tok)
    by_id = {i: d for d, i in ids.items()}
    inputs = processor(text=[cap._prompt_text(prompt)], images=[image], return_tensors="pt").to(cap.device)
    base = model.generation_config
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        eos_token_id=base.eos_token_id,
        pad_token_id=base.pad_token_id if base.pad_token_id is not None else tok.pad_token_id,
        output_logits=True,  # raw logits: the model's own distribution, before any processor
        return_dict_in_generate=True,
    )
    with torch.inference_mode():
        out = model.generate(**inputs, generation_config=config)
    new = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    steps = []
    for pos, token_id in enumerate(new):
        logp = torch.log_softmax(out.logits[pos][0].float(), dim=-1)
        steps.append(
            JudgeStep(
                token=tok.decode([token_id]),
                digit=by_id.get(token_id),
                digit_logprobs={d: float(logp[i]) for d, i in ids.items()},
            )
        )
    return JudgeAnswer(tok.decode(new, skip_special_tokens=True).strip(), steps)


def _digit_of(token: str) -> int | None:
    return int(token) if len(token) == 1 and token.isdigit() else None


def _openai(cap, image, prompt: str, max_new_tokens: int) -> JudgeAnswer:
    from describer.backends.openai import image_data_url

    content = [
        {"type": "image_url", "image_url": {"url": image_data_url(image)}},
        {"type": "text", "text": prompt},
    ]
    body = {
        "model": cap.model,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0.0,
        "max_tokens": max_new_tokens,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
    }
    data = cap._post(body)
    choice = (data.get("choices") or [{}])[0]
    tokens = (choice.get("logprobs") or {}).get("content")
    if not tokens:
        raise ReconScoreError(
            f"{cap.base_url} returned no token log-probabilities; FLEUR needs them (`logprobs`/`top_logprobs`; a "
            f"vLLM server needs --max-logprobs >= {TOP_LOGPROBS})"
        )
    steps = []
    for t in tokens:
        logprobs = {}
        for alt in [t, *(t.get("top_logprobs") or [])]:
            d = _digit_of(alt.get("token", ""))
            if d is not None and d not in logprobs:
                logprobs[d] = float(alt["logprob"])
        steps.append(
            JudgeStep(token=t.get("token", ""), digit=_digit_of(t.get("token", "")), digit_logprobs=logprobs)
        )
    text = (choice.get("message") or {}).get("content") or "".join(s.token for s in steps)
    return JudgeAnswer(text.strip(), steps)


def _vllm(cap, image, prompt: str, max_new_tokens: int) -> JudgeAnswer:
    from describer.backends.vllm import _import_vllm

    vllm = _import_vllm()
    if cap._llm is None:
        cap._load()
    tok = cap._processor.tokenizer
    by_id = {i: d for d, i in digit_token_ids(tok).items()}
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    text = cap._processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens, logprobs=TOP_LOGPROBS)
    out = cap._llm.generate([{"prompt": text, "multi_modal_data": {"image": image}}], params, use_tqdm=False)
    gen = out[0].outputs[0]
    if gen.logprobs is None:
        raise ReconScoreError("vLLM returned no log-probabilities; FLEUR needs them")
    steps = []
    for token_id, top in zip(gen.token_ids, gen.logprobs):
        logprobs = {by_id[i]: float(lp.logprob) for i, lp in top.items() if i in by_id}
        steps.append(
            JudgeStep(token=tok.decode([token_id]), digit=by_id.get(token_id), digit_logprobs=logprobs)
        )
    return JudgeAnswer(gen.text.strip(), steps)
