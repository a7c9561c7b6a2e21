"""vLLM offline engine: `SamplingParams(n=N, seed=...)` per image, so the N samples share one prefill and each
image's candidates are reproducible whatever else is in the batch. vLLM is an optional extra (it pins its own
torch): `pip install 'reconscore[vllm]'` in a separate environment."""

from __future__ import annotations

from describer.backends.base import Candidate, CaptionRequest, LocalCaptioner, Sampling
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


class VLLMCaptioner(LocalCaptioner):
    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "bfloat16",
        revision: str | None = None,
        trust_remote_code: bool = False,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int = 8192,
    ):
        self.model_name, self.revision, self.dtype = model, revision, dtype
        self.trust_remote_code = trust_remote_code
        self.gpu_memory_utilization, self.max_model_len = gpu_memory_utilization, max_model_len
        self._llm = None
        self._processor = None

    def identity(self) -> dict:
        vllm = _import_vllm()
        return {
            "backend": self.name,
            **self.resolved.as_dict(),
            "dtype": self.dtype,
            "vllm": vllm.__version__,
            **self.text_and_pixels(),
        }

    def _load(self):
        vllm = _import_vllm()
        from transformers import AutoProcessor

        path = str(self.resolved.path)
        self._processor = AutoProcessor.from_pretrained(path, trust_remote_code=self.trust_remote_code)
        self._llm = vllm.LLM(
            model=path,
            dtype=self.dtype,
            trust_remote_code=self.trust_remote_code,
            limit_mm_per_prompt={"image": 1},
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.max_model_len,
        )

    def sampling_request(self, sampling: Sampling) -> dict:
        return {"SamplingParams": {**vllm_kwargs(sampling, seed=0), "seed": "per image"}}

    def unload(self) -> None:
        self._llm = None
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass

    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        vllm = _import_vllm()
        if self._llm is None:
            self._load()
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = self._processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        params = [vllm.SamplingParams(**vllm_kwargs(sampling, seed=r.seed)) for r in requests]
        try:
            images = self.vlm_images(requests, prompt)
            inputs = [{"prompt": text, "multi_modal_data": {"image": im}} for im in images]
            outputs = self._llm.generate(inputs, sampling_params=params, use_tqdm=False)
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
