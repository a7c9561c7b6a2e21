"""FLEUR and RefFLEUR (Lee et al., ACL 2024): an MLLM judge asked for a score in [0, 1], smoothed over the
probabilities of the digit tokens it printed, as the authors' `fleur.py` / `reffleur.py`. See docs/metrics.md for
the judge, its conversation template, image padding and dtype."""

from __future__ import annotations

import math
import re

import numpy as np
from PIL import Image

from eval.metrics.base import CaptionBatch, Metric, MetricOutput
from recon_score.errors import ReconScoreError

FLEUR_PROMPT = (
    "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. "
    "(Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at all."
    "\n1.0: The caption accurately and clearly describes the image.\n\nCaption: {candidate}\n\n"
    "Score(Choose a rating from 0.0 to 1.0):"
)
REFFLEUR_PROMPT = (
    "Your task is to evaluate and rate the candidate caption on a scale of 0.0 to 1.0 based on the given Grading "
    "Criteria. (Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the "
    "image at all.\n1.0: The caption accurately and clearly describes the image.\n\nReference Captions: "
    "{references}\n\nCandidate Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"
)
DEFAULT_JUDGE = "llava-hf/llava-1.5-13b-hf"  # the authors' LLaVA-1.5-13B in transformers' format
JUDGES = {"released": DEFAULT_JUDGE, "smoke": "smoke:qwen3-vl", "shapes": "shapes:qwen3-vl"}
MAX_NEW_TOKENS = 512  # the authors' setting; generation stops at the end-of-turn token
SMOKE_MAX_NEW_TOKENS = 16  # the tiny random judge never ends its turn: keep smoke runs short
AUTHORS_DTYPE = "float16"  # fleur.py: torch_dtype=torch.float16
ASPECT_RATIOS = ("pad", "none")  # the authors' default: pad
# LLaVA-1.5's image processor (CLIP ViT-L/14-336) mean, for judges whose processor is not here (servers)
LLAVA_IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)


def expand_to_square(image: Image.Image, image_mean) -> Image.Image:
    """LLaVA's `expand2square` with `tuple(int(x * 255) for x in image_processor.image_mean)` as the colour: the
    image centred on a square of its longer side (offset rounded down), as `process_images` does under `pad`."""
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    fill = tuple(int(x * 255) for x in image_mean)
    square = Image.new(image.mode, (side, side), fill)
    square.paste(image, ((side - width) // 2, (side - height) // 2))
    return square


class FleurError(ValueError):
    """Why a judge's answer yields no FLEUR score (kept per row)."""


def printed_score(text: str) -> float:
    """The number the judge printed, parsed as the authors do (digits and dots kept, dots stripped at the ends)."""
    kept = re.sub(r"^\.+", "", re.sub(r"[^\d.]", "", text))
    kept = re.sub(r"\.+$", "", kept)
    try:
        value = float(kept)
    except ValueError:
        raise FleurError(f"no number in the judge's answer {text[:80]!r}") from None
    if not 0 <= value <= 1:
        raise FleurError(f"the judge's score {value} is outside [0, 1]")
    return value


def _position(steps, digit: int, *, repeated: str) -> int:
    hits = [i for i, s in enumerate(steps) if s.digit == digit]
    if not hits:
        raise FleurError(f"digit {digit} of the printed score is not a generated token")
    return hits[1] if len(hits) > 1 and repeated == "second" else hits[0]


def _prob(step, digit: int) -> float:
    lp = step.digit_logprobs.get(digit)
    return 0.0 if lp is None else math.exp(lp)


def _expected(step, scale: float) -> float:
    return sum(_prob(step, k) * k * scale for k in range(10))


def fleur_score(text: str, steps) -> float:
    """FLEUR's smoothed score from the answer text and its generated tokens (describer.backends.base.JudgeStep)."""
    value = printed_score(text)
    if value < 1.0:
        s = str(value)
        dot = s.index(".")
        d1 = int(s[dot + 1])
        # a first decimal 0 is read at its second occurrence (the first is the "0" of "0."), as the authors do
        score = _expected(steps[_position(steps, d1, repeated="second" if d1 == 0 else "first")], 0.1)
        if len(s) > 3:  # a second decimal place
            d2 = int(s[dot + 2])
            score += _expected(steps[_position(steps, d2, repeated="second")], 0.01)
        return score
    step = steps[_position(steps, 1, repeated="first")]
    return 0.9 * _prob(step, 0) + _prob(step, 1)


class _Fleur(Metric):
    prompt = FLEUR_PROMPT

    def __init__(
        self,
        *,
        model: str | None = None,
        weights: str = "released",
        backend: str = "transformers",
        base_url: str | None = None,
        device: str | None = None,
        dtype: str = "bfloat16",
        max_new_tokens: int | None = None,
        conversation: str = "llava_v1",
        image_aspect_ratio: str = "pad",
        captioner=None,
    ):
        """`captioner`: a ready describer backend (its model stays loaded); otherwise built from the rest."""
        from describer.backends.base import check_conversation

        if weights not in JUDGES:
            raise ReconScoreError(f"weights must be one of {', '.join(JUDGES)}, got {weights!r}")
        if image_aspect_ratio not in ASPECT_RATIOS:
            raise ReconScoreError(f"image_aspect_ratio must be one of {', '.join(ASPECT_RATIOS)}")
        check_conversation(conversation)
        self.conversation, self.image_aspect_ratio = conversation, image_aspect_ratio
        self.model = model or JUDGES[weights]
        self.backend, self.base_url, self.device, self.dtype = backend, base_url, device, dtype
        default = SMOKE_MAX_NEW_TOKENS if weights == "smoke" else MAX_NEW_TOKENS
        self.max_new_tokens, self.weights = max_new_tokens or default, weights
        self._captioner = captioner

    @property
    def captioner(self):
        if self._captioner is None:
            from describer.backends import build_captioner
            from recon_score.runtime import resolve_device

            self._captioner = build_captioner(
                self.backend,
                self.model,
                device=resolve_device(self.device),
                dtype=self.dtype,
                base_url=self.base_url,
            )
            self._captioner.preflight()
        return self._captioner

    def _prompt(self, candidate: str, references: list[str]) -> str:
        return self.prompt.format(candidate=" ".join(candidate.split()))

    def judge_image(self, image: Image.Image) -> Image.Image:
        """The pixels the judge's processor receives (padded to a square under `pad`)."""
        if self.image_aspect_ratio == "none":
            return image
        return expand_to_square(image, self.captioner.image_mean() or LLAVA_IMAGE_MEAN)

    def score(self, batch: CaptionBatch) -> MetricOutput:
        loaded = batch.loaded_images()
        refs = batch.references or [[] for _ in batch.candidates]
        values = np.full(len(batch), np.nan)
        errors: list[str | None] = [None] * len(batch)
        printed: list[float | None] = [None] * len(batch)
        done: dict[tuple, tuple] = {}
        for i, (img, cap) in enumerate(zip(loaded, batch.candidates)):
            if cap is None or isinstance(img, Exception):
                errors[i] = "no caption" if cap is None else str(img)
                continue
            if self.info.needs_references and not refs[i]:
                errors[i] = "no references"
                continue
            key = (id(img), cap, tuple(refs[i]))
            if key not in done:
                done[key] = self._one(img, self._prompt(cap, refs[i]))
            values[i], printed[i], errors[i] = done[key]
        name = self.info.name
        extra = {f"{name}_printed": printed}
        if any(errors):
            extra[f"{name}_error"] = errors
        info = {"distinct_pairs": len(done), "failed_rows": sum(e is not None for e in errors)}
        return MetricOutput(values, extra=extra, info=info)

    def _one(self, image, prompt: str) -> tuple[float, float | None, str | None]:
        from describer.backends.base import JudgeRequest

        try:
            answer = self.captioner.judge(
                JudgeRequest(
                    self.judge_image(image),
                    prompt,
                    self.max_new_tokens,
                    self.conversation,
                    digits_only=self.weights == "smoke",  # a tiny random judge prints no number otherwise
                )
            )
        except (RuntimeError, ValueError) as err:  # a generation failure is the row's, not the run's
            return math.nan, None, f"judge failed: {err}"[:300]
        try:
            return fleur_score(answer.text, answer.steps), printed_score(answer.text), None
        except FleurError as err:
            return math.nan, None, str(err)

    def config(self) -> dict:
        out = {"model": self.model, "backend": self.backend, "weights": self.weights}
        out.update(max_new_tokens=self.max_new_tokens, prompt=self.prompt, conversation=self.conversation)
        out.update(image_aspect_ratio=self.image_aspect_ratio, dtype=self.dtype, authors_dtype=AUTHORS_DTYPE)
        if self.weights == "smoke":
            out["answer"] = "digits only (0.dd): the tiny random judge's own probabilities at those tokens"
        if self._captioner is not None:
            out["judge"] = self._captioner.identity()
        return out

    def close(self) -> None:
        if self._captioner is not None:
            self._captioner.unload()


class Fleur(_Fleur):
    prompt = FLEUR_PROMPT


class RefFleur(_Fleur):
    prompt = REFFLEUR_PROMPT

    def _prompt(self, candidate: str, references: list[str]) -> str:
        return self.prompt.format(candidate=" ".join(candidate.split()), references="\n".join(references))
