"""The vLLM offline engine (an optional extra in its own environment, docs/describer.md): `SamplingParams(n=N,
seed=...)` per image, so an image's candidates do not depend on the rest of the batch; completions and judging."""

from __future__ import annotations

from describer.backends.base import (
    TOP_LOGPROBS,
    Candidate,
    CaptionRequest,
    JudgeAnswer,
    JudgeRequest,
    JudgeStep,
    LocalBackend,
    Sampling,
    completion,
    digit_token_ids,
    prompt_seed,
)
from describer.backends.sampling import vllm_kwargs
from recon_score.errors import ReconScoreError


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ReconScoreError(
            "the vllm backend needs vLLM: pip install 'reconscore[vllm]' (it pins its own torch; "
            "use a separate virtual environment)"
        ) from err
    return vllm


class VLLMBackend(LocalBackend):
    name = "vllm"
    gpu_memory_utilization, max_model_len = 0.85, 8192

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "bfloat16",
        revision: str | None = None,
        trust_remote_code: bool = False,
        text_only: bool = False,
    ):
        self.model_name, self.revision, self.dtype = model, revision, dtype
        self.trust_remote_code, self.text_only = trust_remote_code, text_only
        if text_only:  # vLLM and the model are checked when the backend is built
            _import_vllm()
            self.resolved  # noqa: B018

    def identity(self) -> dict:
        vllm = _import_vllm()
        out = {"backend": self.name, **self.resolved.as_dict(), "dtype": self.dtype, "vllm": vllm.__version__}
        return out if self.text_only else {**out, **self.text_and_pixels()}

    def _load(self):
        """The same memory bounds for the VLM and the text LLM: a text LLM's full context (Qwen3-8B's 40,960 tokens)
        needs more KV cache than a 24 GB card has beside its weights."""
        vllm = _import_vllm()
        path = str(self.resolved.path)
        engine = {
            "model": path,
            "dtype": self.dtype,
            "trust_remote_code": self.trust_remote_code,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
        }
        if self.text_only:
            self._model = vllm.LLM(**engine)
            return
        from transformers import AutoProcessor

        self._processor = AutoProcessor.from_pretrained(path, trust_remote_code=self.trust_remote_code)
        self._model = vllm.LLM(**engine, limit_mm_per_prompt={"image": 1})

    def sampling_request(self, sampling: Sampling) -> dict:
        return {"SamplingParams": {**vllm_kwargs(sampling, seed=0), "seed": "per image"}}

    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        vllm = _import_vllm()
        self._ensure_loaded()
        text = self._chat_text(prompt)
        params = [vllm.SamplingParams(**vllm_kwargs(sampling, seed=r.seed)) for r in requests]
        try:
            images = self.vlm_images(requests, prompt)
            inputs = [{"prompt": text, "multi_modal_data": {"image": im}} for im in images]
            outputs = self._model.generate(inputs, sampling_params=params, use_tqdm=False)
        except Exception as err:  # engine errors are per batch; report them per candidate
            return [
                [Candidate(None, error=f"vLLM generation failed: {err}"[:500])] * sampling.n for _ in requests
            ]
        results = []
        for out in outputs:
            cands = [self.candidate(o.text, o.finish_reason) for o in out.outputs[: sampling.n]]
            cands += [Candidate(None, error="vLLM returned fewer samples than n")] * (sampling.n - len(cands))
            results.append(cands)
        return results

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        vllm = _import_vllm()
        self._ensure_loaded()
        messages = [[{"role": "user", "content": p}] for p in prompts]
        params = [
            vllm.SamplingParams(**vllm_kwargs(sampling, seed=prompt_seed(sampling.seed, p), n=1))
            for p in prompts
        ]
        try:
            outs = self._model.chat(messages, sampling_params=params, use_tqdm=False)
        except Exception as err:  # engine errors: report per prompt
            return [Candidate(None, error=f"vLLM generation failed: {err}"[:500]) for _ in prompts]
        return [completion(o.outputs[0].text, o.outputs[0].finish_reason) for o in outs]

    def judge(self, req: JudgeRequest) -> JudgeAnswer:
        """The greedy answer with vLLM's top-k log-probabilities (a digit outside the top k is absent)."""
        vllm = _import_vllm()
        if req.digits_only:
            raise ReconScoreError(
                "the vllm judge has no digits-only mode (a smoke judge runs on transformers)"
            )
        self._ensure_loaded()
        tok = self._processor.tokenizer
        by_id = {i: d for d, i in digit_token_ids(tok).items()}
        text = self._judge_text(req.prompt, req.conversation)
        params = vllm.SamplingParams(temperature=0.0, max_tokens=req.max_new_tokens, logprobs=TOP_LOGPROBS)
        out = self._model.generate(
            [{"prompt": text, "multi_modal_data": {"image": req.image}}], params, use_tqdm=False
        )
        gen = out[0].outputs[0]
        if gen.logprobs is None:
            raise ReconScoreError("vLLM returned no log-probabilities; FLEUR needs them")
        steps = []
        for token_id, top in zip(gen.token_ids, gen.logprobs):
            logprobs = {by_id[i]: float(lp.logprob) for i, lp in top.items() if i in by_id}
            steps.append(JudgeStep(tok.decode([token_id]), by_id.get(token_id), logprobs))
        return JudgeAnswer(gen.text.strip(), steps)
