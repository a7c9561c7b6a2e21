"""Text-only LLM completion on the describer's backends (transformers, vLLM, OpenAI-compatible), for the
robustness-set generators (paraphrases, perturbations, length-controlled rewrites) and caption rewriting.

One completion per prompt; each prompt's seed is derived from the run's seed and the prompt text, so a
prompt's output does not depend on its neighbours or on where a resumed run restarted.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

from describer.backends.base import Candidate, Sampling, clean_generation
from describer.backends.sampling import generation_config, openai_body, vllm_kwargs
from recon_score.errors import ModelNotAvailableError, ReconScoreError
from recon_score.seeds import derive_seed

log = logging.getLogger(__name__)


# A rewrite, paraphrase or perturbation is one caption cell of a table: whitespace runs (newlines included) are
# joined, unlike the describer's captions, which stay as generated (describer.backends.base.clean_generation).
ONE_LINE = True


def prompt_seed(base: int, prompt: str) -> int:
    return derive_seed(base, hashlib.sha256(prompt.encode()).hexdigest())


class TextLLM:
    name = "base"

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        raise NotImplementedError

    def identity(self) -> dict:
        raise NotImplementedError

    def preflight(self) -> None:
        """Check once, before any prompt, that the backend can serve (the openai backend asks the server)."""


class TransformersTextLLM(TextLLM):
    name = "transformers"

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "bfloat16",
        revision: str | None = None,
        trust_remote_code: bool = False,
    ):
        from recon_score.hub import resolve_model

        self.model_name, self.device = model, device
        self.dtype = dtype if str(device).startswith("cuda") else "float32"
        self.resolved = resolve_model(
            model, revision=revision, kind="causal language model", option="--model"
        )
        self.trust_remote_code = trust_remote_code
        self._model = self._tok = None

    def identity(self) -> dict:
        return {"backend": self.name, **self.resolved.as_dict(), "dtype": self.dtype}

    def _load(self):
        import transformers.utils.logging as tlog
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from recon_score.runtime import parse_dtype

        tlog.disable_progress_bar()
        path = str(self.resolved.path)
        try:
            self._tok = AutoTokenizer.from_pretrained(path, trust_remote_code=self.trust_remote_code)
            self._model = (
                AutoModelForCausalLM.from_pretrained(
                    path, dtype=parse_dtype(self.dtype), trust_remote_code=self.trust_remote_code
                )
                .to(self.device)
                .eval()
            )
        except (OSError, ValueError) as err:
            raise ModelNotAvailableError(
                self.model_name,
                searched=[path],
                reason=str(err)[:300],
                fix="Point --model at a transformers causal LM folder.",
            ) from err
        self._tok.padding_side = "left"
        if self._tok.pad_token is None:
            self._tok.pad_token = self._tok.eos_token

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        import torch

        if self._model is None:
            self._load()
        out = []
        for prompt in prompts:  # one call per prompt: outputs independent of neighbours (seeded per prompt)
            if getattr(self._tok, "chat_template", None):
                text = self._tok.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                )
            else:
                text = prompt
            enc = self._tok([text], return_tensors="pt").to(self.device)
            torch.manual_seed(prompt_seed(sampling.seed, prompt))
            config = generation_config(replace(sampling, n=1), self._model.generation_config)
            with torch.inference_mode():
                ids = self._model.generate(**enc, generation_config=config)
            new = ids[0, enc["input_ids"].shape[1] :]
            eos = self._model.generation_config.eos_token_id
            eos = set(eos) if isinstance(eos, list) else {eos}
            finish = "stop" if any(t in eos for t in new.tolist()) else "length"
            out.append(
                clean_generation(
                    self._tok.decode(new, skip_special_tokens=True), finish, collapse_whitespace=ONE_LINE
                )
            )
        return out


class OpenAITextLLM(TextLLM):
    name = "openai"

    def __init__(
        self, model: str, *, base_url: str, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8
    ):
        from describer.backends.openai import OpenAICaptioner

        self._client = OpenAICaptioner(
            model, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency
        )
        self._client.image_input, self._client.collapse_whitespace = "direct", ONE_LINE  # text only

    def identity(self) -> dict:
        return self._client.identity()

    def preflight(self) -> None:
        self._client.preflight()

    def _one(self, prompt: str, sampling: Sampling) -> Candidate:
        payload = {
            "model": self._client.model,
            "messages": [{"role": "user", "content": prompt}],
            **openai_body(
                sampling, seed=prompt_seed(sampling.seed, prompt), n=1, extensions=self._client.extensions
            ),
        }
        try:
            choices = self._client._post(payload).get("choices", [])
        except ReconScoreError as err:
            return Candidate(None, error=str(err)[:500])
        return (
            self._client._candidate(choices[0]) if choices else Candidate(None, error="no choices returned")
        )

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self._client.concurrency) as pool:
            return list(pool.map(lambda p: self._one(p, sampling), prompts))


class VLLMTextLLM(TextLLM):
    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "bfloat16",
        revision: str | None = None,
        trust_remote_code: bool = False,
    ):
        from describer.backends.vllm import _import_vllm
        from recon_score.hub import resolve_model

        self._vllm = _import_vllm()
        self.resolved = resolve_model(
            model, revision=revision, kind="causal language model", option="--model"
        )
        self.dtype, self.trust_remote_code = dtype, trust_remote_code
        self._llm = None

    def identity(self) -> dict:
        return {
            "backend": self.name,
            **self.resolved.as_dict(),
            "dtype": self.dtype,
            "vllm": self._vllm.__version__,
        }

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        if self._llm is None:
            self._llm = self._vllm.LLM(
                model=str(self.resolved.path), dtype=self.dtype, trust_remote_code=self.trust_remote_code
            )
        messages = [[{"role": "user", "content": p}] for p in prompts]
        params = [
            self._vllm.SamplingParams(**vllm_kwargs(sampling, seed=prompt_seed(sampling.seed, p), n=1))
            for p in prompts
        ]
        try:
            outs = self._llm.chat(messages, sampling_params=params, use_tqdm=False)
        except Exception as err:  # engine errors: report per prompt
            return [Candidate(None, error=f"vLLM generation failed: {err}"[:500]) for _ in prompts]
        return [
            clean_generation(o.outputs[0].text, o.outputs[0].finish_reason, collapse_whitespace=ONE_LINE)
            for o in outs
        ]


def build_text_llm(
    backend: str,
    model: str,
    *,
    device: str = "cpu",
    dtype: str = "bfloat16",
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 8,
    trust_remote_code: bool = False,
) -> TextLLM:
    if backend == "transformers":
        return TransformersTextLLM(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    if backend == "openai":
        return OpenAITextLLM(model, base_url=base_url or "", api_key_env=api_key_env, concurrency=concurrency)
    if backend == "vllm":
        return VLLMTextLLM(model, dtype=dtype, trust_remote_code=trust_remote_code)
    raise ValueError(f"unknown text LLM backend {backend!r}; choose transformers, vllm or openai")
