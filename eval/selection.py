"""Describer selection by any metric of the registry (the describer itself only knows its selector protocol)."""

from __future__ import annotations

import math

from eval.metrics.clip import DEFAULT_ENCODER
from recon_score.errors import ModelNotAvailableError, ReconScoreError


class MetricSelector:
    """Scores each image's candidates with registry metric `name` (references from the input list/dataset)."""

    def __init__(
        self, name: str, *, device: str | None = None, preset: str = "paper", encoder: str = DEFAULT_ENCODER
    ):
        from eval.metrics import get_metric_info, metric_options

        self.info = get_metric_info(name)
        if not self.info.higher_is_better:
            raise ReconScoreError(f"metric {name!r} is lower-is-better; selection keeps the argmax")
        self.name = self.info.name
        from recon_score.presets import reader_for

        # --encoder and the preset reach the metric as in `evaluate`/`correlate` (CLIP-S's encoder, the smoke
        # preset's tiny released weights, its image reader)
        self.options = metric_options(encoder=encoder, long_text="truncate", preset=preset, device=device)
        self.image_reader = reader_for(preset)
        self._metric = None
        self._corpus: list[list[str]] | None = None  # the input set's references, for a corpus-level IDF
        self.corpus: dict | None = None  # what identifies them (run.json, the resume key)

    def use_corpus(self, references: list[list[str]]) -> dict | None:
        """The references of every image of the input set (before --limit): a metric whose values depend on a
        corpus (CIDEr's IDF, Vedantam et al. 2015) takes them from here, never from the images that happen to
        share a selection batch. Returns what identifies that corpus (for the resume key), None if unused."""
        if not hasattr(self.info.load(), "use_idf_corpus"):
            return None
        from recon_score.atomic_io import sha256_json

        self._corpus = [list(rs) for rs in references if rs]
        digest = sha256_json({"idf_corpus": sorted(sorted(rs) for rs in self._corpus)})
        self.corpus = {"documents": len(self._corpus), "sha256": digest}
        return self.corpus

    def _instance(self):
        if self._metric is None:
            from eval.metrics import build_metric

            self._metric = build_metric(self.name, **self.options.get(self.name, {}))
            if self._corpus is not None:
                self._metric.use_idf_corpus(self._corpus)
        return self._metric

    def model_needs(self) -> list:
        from recon_score.preflight import needs_of

        return needs_of(self._instance())

    def score_many(self, items):
        from eval.metrics import CaptionBatch

        cands, refs, images, owners = [], [], [], []
        out: list[list[dict]] = [[{} for _ in texts] for _, texts, _ in items]
        for i, (image, texts, references) in enumerate(items):
            if self.info.needs_references and not references:
                none = f"{self.name} needs reference captions; this image has none"
                out[i] = [{"score": None, "error": none} for _ in texts]
                continue
            for k, text in enumerate(texts):
                cands.append(text)
                refs.append(list(references or []))
                images.append(image)
                owners.append((i, k))
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
        corpus = {"idf_corpus_references": self.corpus} if self.corpus is not None else {}
        return {
            "metric": self.name,
            **(self._instance().config() if self._metric is not None else {}),
            **corpus,
        }

    def unload(self) -> None:
        if self._metric is not None:
            self._metric.close()
            self._metric = None


def build_selector(
    name: str,
    *,
    recon_preset: str,
    device: str,
    batch_size: int,
    cache_dir,
    use_cache: bool,
    weights_dir,
    overrides: dict | None = None,
    seeds: dict | None = None,
    trust_remote_code: bool = False,
):
    """The selection metric: ReconScore (the paper's; `overrides` are its selection renders' preset fields, `seeds`
    ReconScoreSelector's), or any metric of the eval metric registry, built with `recon_preset` (the smoke
    preset's tiny weights and image reader) and --encoder (`overrides["encoder"]`: CLIP-S's encoder)."""
    from eval.metrics import get_metric_info

    if get_metric_info(name).name != "recon_score":
        encoder = (overrides or {}).get("encoder") or DEFAULT_ENCODER
        return MetricSelector(name, device=device, preset=recon_preset, encoder=encoder)
    from describer.selection import ReconScoreSelector
    from recon_score.artifact_cache import ArtifactCache
    from recon_score.scorer import ReconScorer

    scorer = ReconScorer.from_preset(
        recon_preset,
        overrides=overrides,
        device=device,
        batch_size=batch_size,
        cache=ArtifactCache(cache_dir, enabled=use_cache),
        weights_dir=weights_dir,
        trust_remote_code=trust_remote_code,
        check_models=False,  # `preflight` checks them with the captioner's, so one error names every model
    )
    return ReconScoreSelector(scorer, **(seeds or {}))


def preflight(captioner, selector) -> None:
    """Every model of a describe run checked at once (recon_score.preflight), before any work; nothing is built."""
    from recon_score.preflight import needs_of, require_models

    captioner.preflight()  # a server that cannot answer fails now, in seconds
    require_models(needs_of(captioner, selector), command="describe")


def resolve_models(captioner, selector) -> None:
    """Every model resolved (the T2I model checked loadable, the encoder built): describe's `prepare`, only when
    the run has work, so a finished run's rerun builds none."""
    missing = []
    checks = [("captioner", captioner.identity)]
    scorer = getattr(selector, "scorer", None)
    if scorer is not None:
        checks += [
            ("T2I model", lambda: scorer.renderer.check_loadable() or scorer.renderer.resolved),
            ("encoder", lambda: scorer.encoder),
        ]
    for what, check in checks:
        try:
            check()
        except ModelNotAvailableError as err:
            missing.append(f"- {what}: {err}")
    if missing:
        raise ReconScoreError("models not available for `reconscore describe`:\n" + "\n".join(missing))
