"""PAC-S and RefPAC-S (Sarto et al., CVPR 2023): the CLIP-S protocol on the authors' positive-augmented
contrastive fine-tune of CLIP, w = 2. See docs/metrics.md for the weights, PAC-S++ and the reference floor."""

from __future__ import annotations

from eval.metrics.base import CaptionBatch, MetricOutput
from eval.metrics.clip import DEFAULT_PREFIX, _ClipMetric
from recon_score.errors import ReconScoreError

PACS_ENCODER = "open_clip:pacs-ViT-B-32"
PACS_WEIGHT = 2.0
# the released checkpoint; tiny random; full-size random (benchmarks)
WEIGHTS = ("released", "smoke", "shapes")
# the max reference cosine as is (the authors' code) / clipped at 0 (Eq. 2)
REFERENCE_FLOORS = ("none", "zero")


def release_spec(encoder: str, weights: str) -> str:
    """`encoder` as is for the released weights; else the synthetic model of its architecture that `weights`
    asks for (`smoke:open-clip/NAME`, `shapes:open-clip/NAME`)."""
    if weights not in WEIGHTS:
        raise ReconScoreError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if weights == "released":
        return encoder
    from recon_score.encoders.open_clip import RELEASES

    name = encoder.removeprefix("open_clip:").split("@", 1)[0]
    if name not in RELEASES:
        raise ReconScoreError(
            f"weights={weights!r} needs a released CLIP fine-tune as encoder, not {encoder!r}"
        )
    return f"{weights}:open-clip/{name}"


def ref_pac_score(pac, ref_sim, *, floor: str = "none"):
    """Harmonic mean of PAC-S and the max reference cosine (the authors' `2*p*r/(p+r)`), that cosine clipped at 0
    first when `floor` is "zero" (the CLIPScore paper's Eq. 2; validated by the metric); 0 where p + r = 0."""
    import torch

    ref_sim = ref_sim.clamp(min=0) if floor == "zero" else ref_sim
    total = pac + ref_sim
    safe = torch.where(total == 0, torch.ones_like(total), total)
    return torch.where(total == 0, total * 0, 2 * pac * ref_sim / safe)


class _ReleasedClipMetric(_ClipMetric):
    token_limit = 77  # text tokens the encoder reads (start/end markers included)
    default_encoder = PACS_ENCODER
    default_w = PACS_WEIGHT
    default_floor = "none"

    def __init__(
        self,
        *,
        encoder: str | None = None,
        weights: str = "released",
        prefix: str = DEFAULT_PREFIX,
        long_text: str = "truncate",
        w: float | None = None,
        reference_floor: str | None = None,
        device: str | None = None,
        batch_size: int | None = None,
    ):
        floor = self.default_floor if reference_floor is None else reference_floor
        if floor not in REFERENCE_FLOORS:
            raise ReconScoreError(
                f"reference_floor must be one of {', '.join(REFERENCE_FLOORS)}, got {floor!r}"
            )
        super().__init__(
            encoder=release_spec(encoder or self.default_encoder, weights),
            prefix=prefix,
            long_text=long_text,
            w=self.default_w if w is None else w,
            device=device,
            batch_size=batch_size,
        )
        self.weights, self.reference_floor = weights, floor

    def config(self) -> dict:
        out = {**super().config(), "weights": self.weights}
        return out | ({"reference_floor": self.reference_floor} if self.info.needs_references else {})

    def _harmonic(self, image_s, ref_sim):
        return ref_pac_score(image_s, ref_sim, floor=self.reference_floor)


class PACScore(_ReleasedClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch)


class RefPACScore(_ReleasedClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch, self._harmonic)
