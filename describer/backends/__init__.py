"""The inference engines (transformers, vLLM, OpenAI-compatible) behind one interface (describer.backends.base.
Backend): captions, text completions and judge answers. `BACKENDS` is the one registry; command-line choices
read its keys."""

from __future__ import annotations

from dataclasses import dataclass

from describer.backends.base import Backend, Candidate, CaptionRequest, Sampling, clean_generation
from recon_score.registry import Entry, Registry
from recon_score.seeds import derive_seed

__all__ = [
    "BACKENDS",
    "Backend",
    "Candidate",
    "CaptionRequest",
    "Sampling",
    "build_backend",
    "build_captioner",
    "clean_generation",
    "derive_seed",
]


@dataclass(frozen=True)
class Engine(Entry):
    """A registry entry: the engine's class as a lazy target (transformers needs torch, vLLM its own environment)
    and the build options it takes."""

    options: tuple[str, ...] = ()


BACKENDS: Registry[Engine] = Registry(
    "backend",
    (
        Engine(
            "transformers",
            "describer.backends.transformers:TransformersBackend",
            "a checkpoint loaded here with transformers (exact log-probabilities)",
            ("device", "dtype", "revision", "batch_size", "trust_remote_code"),
        ),
        Engine(
            "vllm",
            "describer.backends.vllm:VLLMBackend",
            "a checkpoint loaded here with vLLM's offline engine (optional extra)",
            ("dtype", "revision", "trust_remote_code"),
        ),
        Engine(
            "openai",
            "describer.backends.openai:OpenAIBackend",
            "an OpenAI-compatible server (vllm serve, SGLang, a hosted API)",
            ("base_url", "api_key_env", "concurrency", "sampling_extensions"),
        ),
    ),
)


def build_backend(backend: str, model: str, *, text_only: bool = False, **options) -> Backend:
    """The engine `backend` for `model`; `options` may name any engine's build options, each engine takes its own
    (BACKENDS[...].options). `text_only`: a text LLM for `complete` instead of a VLM."""
    engine = BACKENDS[backend]  # an unknown name: one UnknownNameError with the known names
    unknown = set(options) - {o for e in BACKENDS.values() for o in e.options}
    if unknown:
        raise TypeError(f"unknown backend option(s): {', '.join(sorted(unknown))}")
    mine = {k: v for k, v in options.items() if k in engine.options}
    return engine.load()(model, text_only=text_only, **mine)


def build_captioner(
    backend: str, model: str, *, image_input: str = "direct", collapse_whitespace: bool = False, **options
) -> Backend:
    """A VLM engine of `backend`; `image_input` and `collapse_whitespace` as in the describer preset (checked now,
    so a missing qwen-vl-utils fails before any model loads)."""
    from describer.backends.vision import check_image_input

    check_image_input(image_input)
    captioner = build_backend(backend, model, **options)
    captioner.image_input, captioner.collapse_whitespace = image_input, collapse_whitespace
    return captioner
