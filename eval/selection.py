"""Describer selection by any metric of the registry (the describer itself only knows its selector protocol)."""

from __future__ import annotations

import math

from recon_score.errors import ReconScoreError


class MetricSelector:
    """Scores each image's candidates with registry metric `name` (references from the input list/dataset)."""

    def __init__(
        self,
        name: str,
        *,
        device: str | None = None,
        encoder: str = "open_clip:ViT-B-32/openai",
        preset: str = "paper",
        long_text: str = "truncate",
    ):
        from eval.metrics import get_metric_info, metric_options

        self.info = get_metric_info(name)
        if not self.info.higher_is_better:
            raise ReconScoreError(f"metric {name!r} is lower-is-better; selection keeps the argmax")
        self.name = self.info.name  # today's name, also for an old alias
        self.options = metric_options(encoder=encoder, long_text=long_text, preset=preset, device=device)
        self._metric = None

    def _instance(self):
        if self._metric is None:
            from eval.metrics import build_metric

            self._metric = build_metric(self.name, **self.options.get(self.name, {}))
        return self._metric

    def model_needs(self) -> list:
        from recon_score.preflight import needs_of

        return needs_of(self._instance())

    def score_many(self, items):
        from eval.metrics import CaptionBatch

        cands, refs, images, owners = [], [], [], []
        for i, (image, texts, references) in enumerate(items):
            if self.info.needs_references and not references:
                continue
            for k, text in enumerate(texts):
                cands.append(text)
                refs.append(list(references or []))
                images.append(image)
                owners.append((i, k))
        out: list[list[dict]] = [
            [
                {"score": None, "error": f"{self.name} needs reference captions; this image has none"}
                if self.info.needs_references and not refs_
                else {}
                for _ in texts
            ]
            for _, texts, refs_ in items
        ]
        if not cands:
            return out
        batch = CaptionBatch(cands, refs, images if self.info.needs_images else None)
        values = self._instance().score(batch).values
        for (i, k), v in zip(owners, values):
            ok = v is not None and not math.isnan(v)
            out[i][k] = {
                "score": float(v) if ok else None,
                "error": None if ok else f"{self.name} gave no value",
            }
        return out

    def config(self) -> dict:
        return {"metric": self.name, **(self._instance().config() if self._metric is not None else {})}

    def unload(self) -> None:
        if self._metric is not None:
            self._metric.close()
            self._metric = None


def metric_selector(name: str, *, device: str | None = None) -> MetricSelector:
    return MetricSelector(name, device=device)
