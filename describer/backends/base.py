"""The contract every captioner backend fulfils: N sampled captions per image, errors per candidate."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from PIL import Image


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters (seed 004: temperature 0.8, top_p 0.9, up to 512 new tokens, N = 10)."""

    n: int = 10
    temperature: float = 0.8
    top_p: float = 0.9
    max_new_tokens: int = 512
    seed: int = 0

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0 or not (0 < self.top_p <= 1):
            raise ValueError(f"invalid sampling: temperature={self.temperature}, top_p={self.top_p}")


@dataclass
class Candidate:
    text: str | None
    error: str | None = None
    finish_reason: str | None = None  # "stop", "length" (hit max_new_tokens), "content_filter", ...

    def as_dict(self) -> dict:
        return {"caption": self.text, "error": self.error, "finish_reason": self.finish_reason}


@dataclass
class CaptionRequest:
    """One image to caption; `seed` is derived from the run's seed and the image's pixels (see derive_seed)."""

    image: Image.Image
    seed: int
    key: str = ""  # a label for error messages (image id)
    extra: dict = field(default_factory=dict)


def derive_seed(base: int, *parts: str) -> int:
    """A 63-bit seed from the run's seed and content (image digests): the candidates of an image do not depend
    on which other images were in the run, their order, or where a resumed run restarted."""
    h = hashlib.sha256(":".join([str(base), *parts]).encode()).hexdigest()
    return int(h[:15], 16)


_THINK = re.compile(r"<think>.*?</think>", re.S)


def clean_generation(text: str | None, finish_reason: str | None = None) -> Candidate:
    """Strip reasoning blocks and whitespace; an empty or refused generation is a per-candidate error."""
    if finish_reason == "content_filter":
        return Candidate(
            None, error="generation refused by the server (content_filter)", finish_reason=finish_reason
        )
    if text is None:
        return Candidate(None, error="no text in the response", finish_reason=finish_reason)
    cleaned = _THINK.sub("", text)
    if "<think>" in cleaned:  # an unterminated reasoning block: the answer never came
        cleaned = cleaned.split("<think>", 1)[0]
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        return Candidate(None, error="empty generation", finish_reason=finish_reason)
    return Candidate(cleaned, finish_reason=finish_reason)


class Captioner:
    """Base class. `generate` returns, for each request, exactly `sampling.n` candidates (errors included)."""

    name: str = "base"

    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        raise NotImplementedError

    def identity(self) -> dict:
        """What produced the candidates (model id + revision, backend, dtype): recorded in run.json."""
        raise NotImplementedError

    def unload(self) -> None:
        """Free accelerator memory before the T2I phase."""
