"""Long-CLIP-S and RefLong-CLIP-S: the CLIPScore protocol (Hessel et al. 2021) on Long-CLIP (Zhang et al., ECCV
2024), whose text tower reads 248 tokens instead of 77: the control for the ReconScore paper's length argument.
See docs/metrics.md for the weights and the reference floor."""

from __future__ import annotations

import numpy as np

from eval.metrics.base import CaptionBatch, MetricOutput
from eval.metrics.clip import CLIP_S_WEIGHT
from eval.metrics.pacs import _ReleasedClipMetric

LONGCLIP_ENCODER = "open_clip:longclip-B"
CLIP_CONTEXT = 77


class _LongClipMetric(_ReleasedClipMetric):
    token_limit = 248  # text tokens the encoder reads (start/end markers included)
    default_encoder = LONGCLIP_ENCODER
    default_w = CLIP_S_WEIGHT
    default_floor = "zero"  # RefCLIP-S as the CLIPScore paper's Eq. 2 (its clipscore.py does not clip)

    def _report(self, batch, txt, errors, extra) -> dict:
        facts = super()._report(batch, txt, errors, extra)
        ctx = facts.get("context_length") or 0
        over_clip = (txt.n_tokens > CLIP_CONTEXT) & (txt.n_tokens <= ctx)
        facts["clip_s_truncates_only"] = int(np.sum(over_clip))
        return facts


class LongCLIPScore(_LongClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch)


class RefLongCLIPScore(_LongClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch, self._harmonic)
