"""The engine of any OpenAI-compatible chat endpoint (`vllm serve`, SGLang, a hosted API): captions, text
completions and judge answers with `top_logprobs`. See docs/describer.md, "Inputs, backends, outputs" (images as
PNG data URLs, `n` and `seed`, retries, the API key from an environment variable)."""

from __future__ import annotations

import base64
import io
import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

from describer.backends.base import (
    LLAVA_V1_SYSTEM,
    TOP_LOGPROBS,
    Backend,
    Candidate,
    CaptionRequest,
    JudgeAnswer,
    JudgeRequest,
    JudgeStep,
    Sampling,
    completion,
    digit_of,
    prompt_seed,
)
from describer.backends.sampling import openai_body
from recon_score.errors import ReconScoreError

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


def _image_message(image, text: str) -> dict:
    """One user message: the image as a PNG data URL, then the text."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
    }


class OpenAIBackend(Backend):
    name = "openai"
    max_retries, backoff, timeout = 5, 1.0, 120.0  # exponential backoff from 1 s; seconds per request

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        sampling_extensions: bool = True,
        text_only: bool = False,
    ):
        try:
            import httpx
        except ImportError as err:
            raise ReconScoreError("the openai backend needs httpx: pip install 'reconscore[openai]'") from err
        if not base_url:
            raise ReconScoreError("the openai backend needs --base-url (e.g. http://localhost:8000/v1)")
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key_env, self.text_only = api_key_env, text_only
        # send top_k / repetition_penalty / min_p (vLLM, SGLang servers)
        self.extensions = sampling_extensions
        self.concurrency = max(1, concurrency)
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)

    def identity(self) -> dict:
        out = {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "concurrency": self.concurrency,
            "sampling_extensions": self.extensions,
        }
        return out if self.text_only else {**out, **self.text_and_pixels()}

    def sampling_request(self, sampling: Sampling) -> dict:
        body = openai_body(sampling, seed=0, n=sampling.n, extensions=self.extensions)
        return {"body": {**body, "seed": "per image (+k for servers that ignore n)"}}

    def preflight(self) -> None:
        """One GET of the models endpoint, no retries: an unreachable server, a rejected key or an unknown model
        name fail here in seconds, before the run, instead of after six attempts per candidate."""
        import httpx

        url = f"{self.base_url}/models"
        try:
            resp = self._client.get("/models", timeout=10.0)
        except httpx.TransportError as err:
            raise ReconScoreError(
                f"openai backend: cannot reach {url} ({type(err).__name__}: {err}); is the server running at "
                "--base-url?"
            ) from None
        if resp.status_code in (401, 403):
            raise ReconScoreError(
                f"openai backend: {url} rejected the request (HTTP {resp.status_code}); the API key is read from "
                f"${self.api_key_env} ({'set' if os.environ.get(self.api_key_env) else 'not set'})"
            )
        if resp.status_code == 404:  # some servers do not list models: the first request will tell
            log.warning("%s: no models endpoint (HTTP 404); not checking that %r is served", url, self.model)
            return
        if resp.status_code >= 400:
            raise ReconScoreError(
                f"openai backend: {url} returned HTTP {resp.status_code}: {resp.text[:200]}"
            )
        try:
            served = [m.get("id") for m in resp.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            return
        if served and self.model not in served:
            raise ReconScoreError(
                f"openai backend: {self.base_url} does not serve {self.model!r}; it serves {', '.join(map(str, served))}"
            )

    def _post(self, payload: dict) -> dict:
        import httpx

        delay = self.backoff
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._client.post("/chat/completions", json=payload)
                if resp.status_code in RETRY_STATUS:
                    raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
                if resp.status_code >= 400:
                    raise ReconScoreError(
                        f"{self.base_url}/chat/completions returned HTTP {resp.status_code}: "
                        f"{resp.text[:300]}"
                    )
                return resp.json()
            except (_Retryable, httpx.TransportError) as err:
                if attempt >= self.max_retries:
                    raise ReconScoreError(
                        f"{self.base_url} failed after {self.max_retries + 1} attempts: {err}"
                    ) from err
                log.info("retrying after %s (attempt %d)", err, attempt + 1)
                time.sleep(delay * (1 + 0.25 * random.random()))
                delay *= 2
        raise AssertionError("unreachable")

    def _one(self, req: CaptionRequest, prompt: str, sampling: Sampling) -> list[Candidate]:
        try:
            messages = [_image_message(self.vlm_images([req], prompt)[0], prompt)]
        except ValueError as err:  # qwen-vl-utils refuses extreme aspect ratios
            return [Candidate(None, error=f"image preprocessing failed: {err}"[:500])] * sampling.n

        cands: list[Candidate] = []
        try:
            data = self._post(self._body(messages, sampling, seed=req.seed, n=sampling.n))
            cands = [self._candidate(c) for c in data.get("choices", [])[: sampling.n]]
            while len(cands) < sampling.n:  # servers that ignore `n`: candidate k asked alone, with seed + k
                body = self._body(messages, sampling, seed=req.seed + len(cands), n=1)
                cands.append(self._first(self._post(body)))
        except ReconScoreError as err:
            cands += [Candidate(None, error=str(err)[:500])] * (sampling.n - len(cands))
        return cands

    def _body(self, messages: list[dict], sampling: Sampling, *, seed: int, n: int) -> dict:
        return {
            "model": self.model,
            "messages": messages,
            **openai_body(sampling, seed=seed, n=n, extensions=self.extensions),
        }

    def _first(self, data: dict, clean=None) -> Candidate:
        """A response's first choice as a candidate (an error when it has none)."""
        choices = data.get("choices", [])
        return self._candidate(choices[0], clean) if choices else Candidate(None, error="no choices returned")

    def _candidate(self, choice: dict, clean=None) -> Candidate:
        """One choice as a candidate, by `clean` (default: this captioner's caption rule)."""
        msg = choice.get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if msg.get("refusal"):
            return Candidate(None, error=f"refused: {msg['refusal']}"[:300], finish_reason="refusal")
        return (clean or self.candidate)(content, choice.get("finish_reason"))

    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, prompt, sampling), requests))

    def _complete_one(self, prompt: str, sampling: Sampling) -> Candidate:
        body = self._body(
            [{"role": "user", "content": prompt}], sampling, seed=prompt_seed(sampling.seed, prompt), n=1
        )
        try:
            return self._first(self._post(body), completion)
        except ReconScoreError as err:
            return Candidate(None, error=str(err)[:500])

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda p: self._complete_one(p, sampling), prompts))

    def judge(self, req: JudgeRequest) -> JudgeAnswer:
        """The greedy answer with the server's `top_logprobs` (a digit outside the top k is absent). The server
        applies its own chat template: "llava_v1" sends LLaVA's system line as a system message."""
        if req.digits_only:
            raise ReconScoreError(
                "the openai judge has no digits-only mode (a smoke judge runs on transformers)"
            )
        messages = [_image_message(req.image, req.prompt)]
        if req.conversation == "llava_v1":
            messages.insert(0, {"role": "system", "content": LLAVA_V1_SYSTEM})
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": req.max_new_tokens,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
        }
        choice = (self._post(body).get("choices") or [{}])[0]
        tokens = (choice.get("logprobs") or {}).get("content")
        if not tokens:
            raise ReconScoreError(
                f"{self.base_url} returned no token log-probabilities; FLEUR needs them (`logprobs`/`top_logprobs`; "
                f"a vLLM server needs --max-logprobs >= {TOP_LOGPROBS})"
            )
        steps = []
        for t in tokens:
            token, logprobs = t.get("token", ""), {}
            for alt in [t, *(t.get("top_logprobs") or [])]:
                d = digit_of(alt.get("token", ""))
                if d is not None and d not in logprobs:
                    logprobs[d] = float(alt["logprob"])
            steps.append(JudgeStep(token, digit_of(token), logprobs))
        text = (choice.get("message") or {}).get("content") or "".join(s.token for s in steps)
        return JudgeAnswer(text.strip(), steps)


class _Retryable(Exception):
    pass
