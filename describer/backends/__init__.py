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
    image_input: str = "direct",
    collapse_whitespace: bool = False,
) -> Captioner:
    """A captioner of `backend`; `image_input` and `collapse_whitespace` as in the describer preset (checked now,
    so a missing qwen-vl-utils fails before any model loads)."""
    from describer.backends.vision import check_image_input

    check_image_input(image_input)
    captioner = _backend(
        backend,
        model,
        device=device,
        dtype=dtype,
        revision=revision,
        batch_size=batch_size,
        trust_remote_code=trust_remote_code,
        base_url=base_url,
        api_key_env=api_key_env,
        concurrency=concurrency,
        sampling_extensions=sampling_extensions,
    )
    captioner.image_input, captioner.collapse_whitespace = image_input, collapse_whitespace
    return captioner


def _backend(
    backend: str,
    model: str,
    *,
    device: str,
    dtype: str,
    revision: str | None,
    batch_size: int,
    trust_remote_code: bool,
    base_url: str | None,
    api_key_env: str,
    concurrency: int,
    sampling_extensions: bool,
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
