"""Captioner backends behind one interface (describer.backends.base.Captioner)."""

from __future__ import annotations

from describer.backends.base import (
    Candidate,
    Captioner,
    CaptionRequest,
    Sampling,
    clean_generation,
)
from recon_score.seeds import derive_seed

BACKENDS = ("transformers", "vllm", "openai")

__all__ = [
    "BACKENDS",
    "Candidate",
    "CaptionRequest",
    "Captioner",
    "Sampling",
    "build_captioner",
    "clean_generation",
    "derive_seed",
]


def build_captioner(
    backend: str,
    model: str,
    *,
    device: str = "cpu",
    dtype: str = "bfloat16",
    revision: str | None = None,
    batch_size: int = 1,
    trust_remote_code: bool = False,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 8,
    sampling_extensions: bool = True,
) -> Captioner:
    if backend == "transformers":
        from describer.backends.transformers import TransformersCaptioner

        return TransformersCaptioner(
            model,
            device=device,
            dtype=dtype,
            revision=revision,
            batch_size=batch_size,
            trust_remote_code=trust_remote_code,
        )
    if backend == "vllm":
        from describer.backends.vllm import VLLMCaptioner

        return VLLMCaptioner(model, dtype=dtype, revision=revision, trust_remote_code=trust_remote_code)
    if backend == "openai":
        from describer.backends.openai import OpenAICaptioner

        return OpenAICaptioner(
            model,
            base_url=base_url or "",
            api_key_env=api_key_env,
            concurrency=concurrency,
            extensions=sampling_extensions,
        )
    raise ValueError(f"unknown captioner backend {backend!r}; choose one of {', '.join(BACKENDS)}")
