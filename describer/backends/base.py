"""The contract every captioner backend fulfils: N sampled captions per image, errors per candidate."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from PIL import Image

from recon_score.prompts import clean_caption


@dataclass(frozen=True)
class Sampling:
    """The one resolved sampling configuration every backend applies in full (describer.backends.sampling).

    The ReconScore paper / the authors' `RemoteDescriber.py`: temperature 0.8, top_p 0.9, 512 new tokens, N = 10, through
    transformers' `generate`, which also applied the checkpoint's generation_config.json (Qwen3-VL-8B-Instruct:
    top_k 20). Every field is sent explicitly, so no backend inherits a checkpoint's or a server's defaults.
    `top_k = 0` and `repetition_penalty = 1.0` mean off.
    """

    n: int = 10
    temperature: float = 0.8
    top_p: float = 0.9
    max_new_tokens: int = 512
    seed: int = 0
    top_k: int = 0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0 or not (0 < self.top_p <= 1):
            raise ValueError(f"invalid sampling: temperature={self.temperature}, top_p={self.top_p}")
        if self.top_k < 0 or self.repetition_penalty <= 0 or self.max_new_tokens < 1:
            raise ValueError(
                f"invalid sampling: top_k={self.top_k} (>= 0; 0 = off), repetition_penalty="
                f"{self.repetition_penalty} (> 0; 1 = off), max_new_tokens={self.max_new_tokens} (>= 1)"
            )


@dataclass
class Candidate:
    text: str | None
    error: str | None = None
    finish_reason: str | None = None  # "stop", "length" (hit max_new_tokens), "content_filter", ...

    def as_dict(self) -> dict:
        return {"caption": self.text, "error": self.error, "finish_reason": self.finish_reason}


@dataclass
class CaptionRequest:
    """One image to caption; `seed` is derived from the run's seed and the image's pixels (recon_score.seeds.derive_seed)."""

    image: Image.Image
    seed: int
    key: str = ""  # a label for error messages (image id)
    extra: dict = field(default_factory=dict)


_THINK = re.compile(r"<think>.*?</think>\s*", re.S)


def clean_generation(
    text: str | None, finish_reason: str | None = None, *, collapse_whitespace: bool = False
) -> Candidate:
    """The caption as the VLM wrote it, less a reasoning block; an empty or refused generation is an error.

    The authors' `RemoteDescriber.py` passes the decoded text on unchanged (newlines, markdown, trailing spaces),
    so by default only a `<think>...</think>` block and the whitespace after it are removed.
    `collapse_whitespace=True` (a named variant) joins whitespace runs into single spaces and strips the ends,
    with the same rule the reconstruction prompt uses (recon_score.prompts.clean_caption).
    """
    if finish_reason == "content_filter":
        return Candidate(
            None, error="generation refused by the server (content_filter)", finish_reason=finish_reason
        )
    if text is None:
        return Candidate(None, error="no text in the response", finish_reason=finish_reason)
    cleaned = _THINK.sub("", text)
    if "<think>" in cleaned:  # an unterminated reasoning block: the answer never came
        cleaned = cleaned.split("<think>", 1)[0]
    if not cleaned.strip():
        return Candidate(None, error="empty generation", finish_reason=finish_reason)
    return Candidate(
        clean_caption(cleaned, collapse_whitespace=collapse_whitespace), finish_reason=finish_reason
    )


class Captioner:
    """Base class. `generate` returns, for each request, exactly `sampling.n` candidates (errors included).

    `image_input` (describer.backends.vision) says how an image becomes the VLM's pixels and
    `collapse_whitespace` how its text becomes a caption; build_captioner sets both (describe: from the preset).
    """

    name: str = "base"
    image_input: str = "direct"
    collapse_whitespace: bool = False

    def candidate(self, text: str | None, finish_reason: str | None = None) -> Candidate:
        """One generated text as a candidate, by this captioner's text rule."""
        return clean_generation(text, finish_reason, collapse_whitespace=self.collapse_whitespace)

    def vlm_images(self, requests: list[CaptionRequest], prompt: str) -> list[Image.Image]:
        """The pixels handed to the VLM for each request (describer.backends.vision.vlm_images)."""
        from describer.backends.vision import vlm_images

        return vlm_images([r.image for r in requests], self.image_input, prompt)

    def text_and_pixels(self) -> dict:
        """How images became pixels and texts became captions, for identity() (run.json)."""
        from describer.backends.vision import image_input_identity

        return {
            "image_input": image_input_identity(self.image_input),
            "collapse_whitespace": self.collapse_whitespace,
        }

    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        raise NotImplementedError

    def identity(self) -> dict:
        """What produced the candidates (model id + revision, backend, dtype): recorded in run.json."""
        raise NotImplementedError

    def sampling_request(self, sampling: Sampling) -> dict:
        """The sampling fields this backend sends for `sampling` (seed: per image), recorded in run.json; raises
        if the backend cannot apply all of them. A backend that does not say records None."""
        return {"request": None}

    def model_needs(self) -> list:
        """The weights this backend loads locally (recon_score.preflight); a server backend loads none."""
        return []

    def preflight(self) -> None:
        """Check, once before any image is read, that the backend can serve at all (raises ReconScoreError)."""

    def unload(self) -> None:
        """Free accelerator memory before the T2I phase."""


class LocalCaptioner(Captioner):
    """A captioner that loads a VLM checkpoint here (transformers, vLLM): `model_name` and `revision` name it."""

    model_name: str
    revision: str | None
    _resolved = None

    @property
    def resolved(self):
        """The checkpoint's local path, id and revision (recon_score.hub), resolved once."""
        if self._resolved is None:
            from recon_score.hub import resolve_model

            self._resolved = resolve_model(
                self.model_name, revision=self.revision, kind="vision-language model", option="--captioner"
            )
        return self._resolved

    def model_needs(self) -> list:
        from recon_score.preflight import ModelNeed

        return [ModelNeed("VLM (captioner)", self.model_name, "--captioner", revision=self.revision)]
