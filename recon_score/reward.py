"""ReconScore as an online reward: a callable with the signature TRL's GRPOTrainer and RLOOTrainer call.

See docs/training.md, "A reward for GRPO / RLOO" (seeds, min_spread, inputs, failures, normalisation).
"""

from __future__ import annotations

import inspect
import logging
import math
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from recon_score.errors import InputError
from recon_score.presets import ReconPreset
from recon_score.scorer import ReconScorer
from recon_score.seeds import derive_seed, derive_seeds

log = logging.getLogger(__name__)

NORMALIZE = (None, "length")
SEED_SCHEDULES = ("fixed", "step")


def completion_text(completion) -> str | None:
    """The text of one completion: a string, or the last assistant message of a conversational completion
    (its content a string or a list of typed parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list):
        for msg in reversed(completion):
            if isinstance(msg, dict) and msg.get("role", "assistant") == "assistant":
                content = msg.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "".join(
                        p.get("text") or ""
                        for p in content
                        if isinstance(p, dict) and p.get("type") == "text"
                    )
    return None


class ReconScoreReward:
    """`reward(prompts, completions, **columns) -> list[float | None]`: the ReconScore of each completion
    against its row's image."""

    def __init__(
        self,
        scorer: ReconScorer,
        *,
        seeds: Sequence[int] | None = None,
        image_column: str = "image",
        normalize: str | None = None,
        seed_schedule: str = "fixed",
        min_spread: float = 0.0,
        group_size: int | None = None,
    ):
        if normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
        if seed_schedule not in SEED_SCHEDULES:
            raise ValueError(f"seed_schedule must be one of {SEED_SCHEDULES}, got {seed_schedule!r}")
        if not (isinstance(min_spread, (int, float)) and math.isfinite(min_spread) and min_spread >= 0):
            raise ValueError(f"min_spread must be a finite number >= 0, got {min_spread!r}")
        if min_spread > 0 and (not isinstance(group_size, int) or group_size < 2):
            raise ValueError(f"min_spread needs group_size (TRL's num_generations, >= 2), got {group_size!r}")
        self.scorer = scorer
        self.seeds = list(seeds) if seeds else derive_seeds(0, 1, exclude={scorer.preset.seed})
        self.image_column = image_column
        self.normalize = normalize
        self.seed_schedule, self.min_spread, self.group_size = seed_schedule, float(min_spread), group_size
        self.__name__ = "recon_score" if normalize is None else f"recon_score_{normalize}"  # TRL's log key
        self.failures: list[str] = []  # the reason of every None returned so far
        self.calls = 0
        self.seed_history: list[dict] = []  # per call: {"call", "step", "seeds"}
        self.flat_groups = 0  # groups whose advantages min_spread set to 0

    @classmethod
    def from_preset(cls, preset: str | ReconPreset = "paper", **kwargs) -> ReconScoreReward:
        """A reward on its own `ReconScorer.from_preset(preset, ...)`: the keyword arguments `__init__` takes
        (seeds, normalize, seed_schedule, ...) configure the reward, every other one the scorer (device: where
        the T2I model and encoder run; batch_size, cache, overrides, weights_dir), with the scorer's defaults."""
        own = set(inspect.signature(cls).parameters) - {"scorer"}
        reward = {k: kwargs.pop(k) for k in list(kwargs) if k in own}
        return cls(ReconScorer.from_preset(preset, **kwargs), **reward)

    def __call__(self, prompts=None, completions=None, **columns) -> list[float | None]:
        completions = list(completions or [])
        n = len(completions)
        if prompts is not None and len(prompts) != n:
            raise ValueError(
                f"reward: {len(prompts)} prompts but {n} completions (one prompt per completion)"
            )
        column, images = self._images(columns, n)
        seeds = self._call_seeds(columns, n)
        pairs, errors = [], {}
        for i, (img, comp) in enumerate(zip(images, completions)):
            text = completion_text(comp)
            img, why = self._load(img, i, column)
            if why is not None:
                errors[i] = why
            elif text is None:  # an int, None, bytes, ...: say what it is, never "empty"
                kind = type(comp).__name__
                what = "None" if comp is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
                errors[i] = (
                    f"completion {i} is {what}, not text (a string, or assistant messages with text content)"
                )
            elif not text.strip():
                errors[i] = "empty completion"
            pairs.append((img if img is not None else InputError("no image"), text or ""))
        todo = [i for i in range(len(pairs)) if i not in errors]
        scores: list[float | None] = [None] * len(pairs)
        if todo:
            results = self.scorer.score_seeds([pairs[i] for i in todo], seeds)
            for i, r in zip(todo, results):
                if r.error or r.recon_score is None or not math.isfinite(r.recon_score):
                    errors[i] = r.error or "no score"
                else:
                    scores[i] = float(r.recon_score)
        for i in sorted(errors):
            self.failures.append(errors[i])
            log.warning("recon_score reward: completion %d has no reward (None): %s", i, errors[i])
        if self.normalize == "length":
            scores = length_residuals(scores, [completion_text(c) or "" for c in completions])
        return self._flatten_narrow_groups(scores, columns)

    def _images(self, columns: dict, n: int) -> tuple[str, list]:
        """(column read, one image per completion): the `image` column, or the first of each row's `images`."""
        if self.image_column in columns and columns[self.image_column] is not None:
            name, images = self.image_column, list(columns[self.image_column])
        elif "images" in columns and columns["images"] is not None:
            name = "images"
            images = [
                (imgs[0] if imgs else None) if isinstance(imgs, (list, tuple)) else imgs
                for imgs in columns["images"]
            ]
        else:
            return self.image_column, [None] * n
        if len(images) != n:
            raise ValueError(
                f"reward: {len(images)} entries in column {name!r} but {n} completions (one each)"
            )
        return name, images

    def _load(self, img, i: int, column: str) -> tuple[Image.Image | None, str | None]:
        """(image, None) or (None, why this row has no image), naming the column it was read from."""
        from recon_score.images import is_array_image, load_image, to_pil_image

        reader = self.scorer.preset.image_reader
        try:
            if img is None:
                return None, f"no image for completion {i} in column {column!r}"
            if isinstance(img, Image.Image):
                img.load()  # a lazily opened file: a truncated one fails here, not in the middle of the batch
                return img, None
            if isinstance(img, (str, Path)):
                return load_image(img, reader=reader), None
            if is_array_image(img):
                return to_pil_image(img, name=f"image {i}"), None
            if isinstance(img, dict) and ("bytes" in img or "path" in img):
                return _load_hf_image(img, i, reader), None
            return (
                None,
                f"image {i}: a {type(img).__name__} is not an image (a PIL image, path, array or HF dict)",
            )
        except InputError as err:
            return None, str(err)
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            return None, f"image {i} cannot be decoded ({type(err).__name__}: {err})"

    def _call_seeds(self, columns: dict, n: int) -> list[int]:
        """This call's render seeds: the fixed ones, or (seed_schedule="step") the step's, recorded."""
        self.calls += 1
        state = columns.get("trainer_state")
        step = getattr(state, "global_step", None)
        step = int(step) if isinstance(step, int) else self.calls - 1
        seeds = (
            self.seeds
            if self.seed_schedule == "fixed"
            else step_seeds(self.seeds[0], step, len(self.seeds), exclude={self.scorer.preset.seed})
        )
        self.seed_history.append({"call": self.calls, "step": step, "seeds": list(seeds)})
        log_extra = columns.get("log_extra")
        if callable(log_extra):
            log_extra("recon_score_seeds", [" ".join(map(str, seeds))] * n)
        return seeds

    def _flatten_narrow_groups(self, scores: list[float | None], columns: dict) -> list[float | None]:
        """min_spread: each group of `group_size` consecutive rewards spanning less than min_spread points is
        replaced by its mean (zero advantage after TRL's per-group normalisation)."""
        if self.min_spread <= 0:
            return scores
        g = self.group_size
        if len(scores) % g:
            raise ValueError(
                f"reward: {len(scores)} completions are not whole groups of group_size={g} "
                "(TRL's num_generations; make the per-device batch a multiple of it)"
            )
        out, flat = list(scores), 0
        for start in range(0, len(scores), g):
            vals = [v for v in scores[start : start + g] if v is not None]
            if len(vals) >= 2 and max(vals) - min(vals) < self.min_spread:
                mean = statistics.fmean(vals)
                out[start : start + g] = [None if v is None else mean for v in scores[start : start + g]]
                flat += 1
        self.flat_groups += flat
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric("recon_score/flat_groups", float(flat))
        return out


def step_seeds(base: int, step: int, k: int, *, exclude: set[int]) -> list[int]:
    """K distinct 31-bit seeds for one training step, hashed from (base, step, i); values in `exclude` (the
    held-out evaluation seed) are skipped."""
    out, i = [], 0
    while len(out) < k:
        seed = derive_seed("reconscore-reward-step", base, step, i, bits=31)
        i += 1
        if seed not in exclude and seed not in out:
            out.append(seed)
    return out


def _load_hf_image(value: dict, i: int, reader: str) -> Image.Image:
    """An undecoded `datasets` Image value: its bytes (read through the project's image reader, from a
    temporary file named like the original) or, without bytes, its path."""
    from recon_score.images import load_image

    data, path = value.get("bytes"), value.get("path")
    if data is None:
        if not isinstance(path, (str, Path)) or not str(path):
            raise InputError(f"image {i}: an image dict with neither bytes nor a path")
        return load_image(path, reader=reader)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputError(f"image {i}: the image dict's 'bytes' is a {type(data).__name__}, not bytes")
    suffix = Path(str(path)).suffix if isinstance(path, (str, Path)) else ""
    with tempfile.TemporaryDirectory(prefix="reconscore-reward-") as tmp:
        file = Path(tmp) / f"image{suffix if len(suffix) <= 8 else ''}"
        file.write_bytes(bytes(data))
        return load_image(file, name=f"image {i} ({path or 'bytes'})", reader=reader)


def length_residuals(scores: Sequence[float | None], texts: Sequence[str]) -> list[float | None]:
    """Residuals of score ~ a + b * log(words) over the scored entries (None stays None); the mean is
    subtracted instead when there are fewer than three or every length is the same."""
    idx = [i for i, s in enumerate(scores) if s is not None]
    out: list[float | None] = [None] * len(scores)
    if not idx:
        return out
    y = np.array([scores[i] for i in idx], dtype=np.float64)
    x = np.log(np.array([max(1, len(texts[i].split())) for i in idx], dtype=np.float64))
    if len(idx) < 3 or np.ptp(x) == 0:
        fitted = np.full_like(y, y.mean())
    else:
        b, a = np.polyfit(x, y, 1)
        fitted = a + b * x
    for i, r in zip(idx, (y - fitted).tolist()):
        out[i] = r
    return out
