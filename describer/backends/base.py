"""The contract every engine (transformers, vLLM, OpenAI-compatible) fulfils: N sampled captions per image
(`generate`), one text completion per prompt (`complete`) and a greedy judge answer with digit log-probabilities
(`judge`), errors per candidate."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from PIL import Image

from recon_score.errors import InputError, ReconScoreError
from recon_score.prompts import clean_caption
from recon_score.seeds import derive_seed


@dataclass(frozen=True)
class Sampling:
    """The one resolved sampling configuration every backend applies in full; defaults are the ReconScore paper's
    (docs/describer.md, "Sampling"). `top_k = 0` and `repetition_penalty = 1.0` mean off."""

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
    """One image to caption: `image` is the project's read (the one the scores use); `path`, when the image is a
    file, lets the `qwen-vl-utils` image input open the file itself, as the authors' `RemoteDescriber.py` does."""

    image: Image.Image
    seed: int  # derived from the run's seed and the image's pixels
    key: str = ""  # a label for error messages (image id)
    path: str | None = None


_THINK = re.compile(r"<think>.*?</think>\s*", re.S)


def clean_generation(
    text: str | None, finish_reason: str | None = None, *, collapse_whitespace: bool = False
) -> Candidate:
    """The caption as the VLM wrote it (as the authors' `RemoteDescriber.py` keeps it), less a `<think>` block; an
    empty or refused generation is an error. `collapse_whitespace` is the named variant (docs/describer.md)."""
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
    try:
        return Candidate(
            clean_caption(cleaned, collapse_whitespace=collapse_whitespace), finish_reason=finish_reason
        )
    except InputError as err:  # invisible characters only: this candidate's error, never the batch's
        return Candidate(None, error=f"unusable generation: {err}", finish_reason=finish_reason)


def completion(text: str | None, finish_reason: str | None = None) -> Candidate:
    """A completion (rewrite, paraphrase, perturbation) is one caption cell of a table: its whitespace runs
    (newlines included) are joined, unlike the describer's captions, which stay as generated."""
    return clean_generation(text, finish_reason, collapse_whitespace=True)


def prompt_seed(base: int, prompt: str) -> int:
    """A completion's seed, from the run's seed and the prompt text: independent of neighbours and restarts."""
    return derive_seed(base, hashlib.sha256(prompt.encode()).hexdigest())


DIGITS = tuple(range(10))
TOP_LOGPROBS = 20  # the most OpenAI's API returns per position


@dataclass
class JudgeStep:
    """One generated token: which digit it is (None if not a single digit) and the digits' log-probabilities at
    its position (a digit missing from a server's top k is absent)."""

    token: str
    digit: int | None
    digit_logprobs: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeRequest:
    """One judgment to make (FLEUR): greedy decoding of `prompt` about `image` in `conversation`'s format.
    `digits_only` restricts the answer to the form "0.dd" (a tiny random judge's answer would hold no number);
    the log-probabilities stay the model's own."""

    image: Image.Image
    prompt: str
    max_new_tokens: int
    conversation: str = "chat-template"
    digits_only: bool = False

    def __post_init__(self) -> None:
        check_conversation(self.conversation)


@dataclass
class JudgeAnswer:
    text: str
    steps: list[JudgeStep]


def digit_of(token: str) -> int | None:
    return int(token) if len(token) == 1 and token.isdigit() else None


def digit_token_ids(tokenizer) -> dict[int, int]:
    """Digit -> its token id, as FLEUR's `tokenizer.encode(str(s))[-1]`; each digit must be one token."""
    ids = {d: tokenizer.encode(str(d), add_special_tokens=False)[-1] for d in DIGITS}
    bad = [d for d, i in ids.items() if tokenizer.decode([i]).strip() != str(d)]
    if bad:
        raise ReconScoreError(
            f"the judge's tokenizer has no single token for digit(s) {bad}; score smoothing needs one per digit"
        )
    return ids


# How a judge's instruction becomes the model's text. "chat-template": one user message (image + text) through
# the checkpoint's chat template. "llava_v1": LLaVA's `conv_templates["llava_v1"]` (SeparatorStyle.TWO), as the
# FLEUR paper's code renders it: system line, "USER: <image>\n" + instruction, " ASSISTANT:".
CONVERSATIONS = ("chat-template", "llava_v1")
LLAVA_V1_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
IMAGE_PLACEHOLDER = "<image>"


def llava_v1_prompt(instruction: str) -> str:
    """The llava_v1 conversation holding one image and `instruction`, with LLaVA's `<image>` placeholder."""
    return f"{LLAVA_V1_SYSTEM} USER: {IMAGE_PLACEHOLDER}\n{instruction} ASSISTANT:"


def image_placeholder(processor) -> str:
    """The text a processor expands into an image's tokens (LLaVA: `<image>`; Qwen-VL: the image pad between its
    vision start and end tokens)."""
    image = getattr(processor, "image_token", None) or IMAGE_PLACEHOLDER
    return getattr(processor, "vision_start_token", "") + image + getattr(processor, "vision_end_token", "")


def check_conversation(conversation: str) -> None:
    if conversation not in CONVERSATIONS:
        raise ReconScoreError(
            f"unknown conversation {conversation!r}; choose one of {', '.join(CONVERSATIONS)}"
        )


class Backend:
    """One inference engine: `generate` returns exactly `sampling.n` candidates per request (errors included).
    `image_input` and `collapse_whitespace` (how pixels and captions are made) are set by build_captioner."""

    name: str = "base"
    image_input: str = "direct"
    collapse_whitespace: bool = False

    def candidate(self, text: str | None, finish_reason: str | None = None) -> Candidate:
        """One generated text as a candidate, by this captioner's text rule."""
        return clean_generation(text, finish_reason, collapse_whitespace=self.collapse_whitespace)

    def vlm_images(self, requests: list[CaptionRequest], prompt: str) -> list[Image.Image]:
        """The pixels handed to the VLM for each request (describer.backends.vision.vlm_images)."""
        from describer.backends.vision import vlm_images

        return vlm_images(requests, self.image_input, prompt)

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

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        """One completion per text prompt (one line each), seeded per prompt (prompt_seed)."""
        raise ReconScoreError(f"backend {self.name!r} cannot complete text prompts")

    def judge(self, req: JudgeRequest) -> JudgeAnswer:
        """The greedy answer to the request's (image, prompt), with the digits' log-probabilities at every
        generated token."""
        raise ReconScoreError(
            f"backend {self.name!r} cannot return token log-probabilities (transformers, vllm, openai can)"
        )

    def image_mean(self) -> tuple | None:
        """The mean colour of the VLM's image processor (None when the processor is a server's)."""
        return None

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


class LocalBackend(Backend):
    """An engine that loads a checkpoint here (transformers, vLLM): `model_name` and `revision` name it;
    `text_only` loads a causal language model (for `complete`) instead of a VLM."""

    model_name: str
    revision: str | None
    text_only: bool = False
    _resolved = None
    _model = None  # the loaded engine (None: not loaded, or unloaded)
    _processor = None  # a VLM's processor; a text-only transformers model's tokenizer

    @property
    def resolved(self):
        """The checkpoint's local path, id and revision (recon_score.hub), resolved once."""
        if self._resolved is None:
            from recon_score.hub import resolve_model

            kind, option = self._model_kind()
            self._resolved = resolve_model(self.model_name, revision=self.revision, kind=kind, option=option)
        return self._resolved

    def _model_kind(self) -> tuple[str, str]:
        return (
            ("causal language model", "--model")
            if self.text_only
            else ("vision-language model", "--captioner")
        )

    def _chat_text(self, prompt: str) -> str:
        """One user message (the image, then `prompt`) through the checkpoint's chat template."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return self._processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _judge_text(self, prompt: str, conversation: str) -> str:
        """The judge's full prompt text as the model receives it (before the image tokens are expanded)."""
        if conversation == "llava_v1":
            return llava_v1_prompt(prompt).replace(IMAGE_PLACEHOLDER, image_placeholder(self._processor))
        return self._chat_text(prompt)

    def image_mean(self) -> tuple | None:
        if self._processor is None:
            self._load()
        return getattr(getattr(self._processor, "image_processor", None), "image_mean", None)

    def _load(self) -> None:
        raise NotImplementedError

    def _ensure_loaded(self) -> None:
        if self._model is None:
            self._load()

    def unload(self) -> None:
        import torch

        self._model = self._processor = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def model_needs(self) -> list:
        from recon_score.preflight import ModelNeed

        role = "LLM" if self.text_only else "VLM (captioner)"
        return [ModelNeed(role, self.model_name, self._model_kind()[1], revision=self.revision)]
