"""Long-CLIP-S and RefLong-CLIP-S: the CLIPScore protocol (Hessel et al. 2021: w = 2.5, prefix "A photo depicts",
RefCLIP-S's harmonic mean) on Long-CLIP (Zhang et al., ECCV 2024), whose text tower reads 248 tokens instead of 77.

The control for the ReconScore paper's length argument: the same score on the same images with the 77-token
limit lifted. Each run records how many captions exceed 77 tokens (CLIP-S truncates them) and fit in 248
(`clip_s_truncates_only`). Weights: `longclip-B.pt` (default, ViT-B/16) or `longclip-L.pt` (ViT-L/14) from the HF
hub (BeichenZhang/LongCLIP-B, -L), the HF cache, RECONSCORE_WEIGHTS, or `open_clip:longclip-L@/path/file.pt`;
loaded into open_clip's CLIP with a 248-position text table (recon_score.encoders.open_clip.RELEASES), the weights
rounded to fp16 first as the authors' `build_model` does (`open_clip:longclip-B-fp32` keeps the file's values).
RefLong-CLIP-S clips the max reference cosine at 0 (`reference_floor="zero"`, the CLIPScore paper's Eq. 2; the
authors' clipscore.py and the PAC-S code do not: `"none"`).
"""

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
        return self._score_image(batch)


class RefLongCLIPScore(_LongClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score_with_references(batch, self._harmonic)
