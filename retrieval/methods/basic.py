"""BASIC (the i-CIR paper; the RS-CIR benchmark paper Sec. 3.3 and A.4), following billpsomas/icir's
utils_retrieval.py step by step, each component switchable for the RS-CIR benchmark paper's Table 6/7 ablation.
See docs/retrieval.md, "Methods and hyperparameters"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from retrieval.data import as_numpy
from retrieval.errors import MethodUnavailableError
from retrieval.methods.base import (
    Buffers,
    Method,
    MethodContext,
    Prepared,
    Resources,
    distinct_rows,
    dot_scores,
    sample_rows,
)

if TYPE_CHECKING:
    from torch import Tensor

CHUNK = 256  # queries expanded at once: their (CHUNK, N) similarities and top-k partition indices


@dataclass(frozen=True)
class BasicConfig:
    centering: bool = True
    image_mean: str = "auto"  # auto: Resources.image_mean if given, else the database mean | database | given
    projection: bool = True
    n_components: float = 250.0  # >= 1: number of components; < 1: fraction of the positive spectrum's energy
    alpha: float = 0.2  # weight of the negative corpus ("aa")
    query_expansion: bool = True
    qe_k: int = 25
    qe_beta: float = 0.1  # neighbour weights exp(beta * similarity)
    min_normalization: bool = True
    norm_sample: int = 2048  # reference-set size when no synthetic set is given
    harris: bool = True
    harris_lambda: float = 0.1
    contextualize: bool = True
    context_words: int = 100

    def __post_init__(self):
        if self.image_mean not in ("auto", "database", "given"):
            raise ValueError(f"basic.image_mean must be auto, database or given, got {self.image_mean!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"basic.alpha must be in [0, 1], got {self.alpha}")


def _f32(t: np.ndarray | Tensor) -> np.ndarray:
    return as_numpy(t).astype(np.float32, copy=False)


def contrastive_projection(
    pos: np.ndarray | Tensor, neg: np.ndarray | Tensor, *, alpha: float, n_components: float
) -> tuple[np.ndarray, int]:
    """(D, D) float32 projection onto the top eigenvectors of (1 − α) S₊ − α S₋ + 1e-5, and how many were kept.

    `pos` and `neg` are already centred (by the positive-corpus mean, as the authors do)."""
    pos, neg = as_numpy(pos).astype(np.float64), as_numpy(neg).astype(np.float64)
    if pos.shape[0] < 2 or neg.shape[0] < 2:
        raise ValueError("contrastive projection needs at least 2 texts in each corpus")
    s_pos = pos.T @ pos / (pos.shape[0] - 1)
    s_neg = neg.T @ neg / (neg.shape[0] - 1)
    c = (1.0 - alpha) * s_pos - alpha * s_neg + 1e-5
    evals, evecs = np.linalg.eigh(c)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    positive = evals[evals > 0]
    if n_components >= 1:
        k = min(int(n_components), positive.size)
    else:
        energy = np.cumsum(positive) / positive.sum()
        k = min(int(np.searchsorted(energy, n_components)) + 1, positive.size)
    v = evecs[:, :k]
    return (v @ v.T).astype(np.float32), k


def contextual_text_features(text: str, words: list[str], encode) -> np.ndarray:
    """(D,) mean of g("{w} {t}") and g("{t} {w}") over `words`, L2-normalised."""
    mean = _f32(encode([f"{w} {text}" for w in words] + [f"{text} {w}" for w in words])).mean(0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


class Basic(Method):
    """Scores in numpy (a bundle's evaluation loads no torch); tensors from `retrieve` are read as arrays."""

    name, config_cls, takes_numpy = "basic", BasicConfig, True

    def __init__(self, config: BasicConfig | None = None):
        super().__init__(config)
        self._projection: dict[tuple, tuple[np.ndarray, int]] = {}
        self._context: dict[str, np.ndarray] = {}

    def missing(self, r: Resources) -> list[str]:
        c, out = self.config, []
        bundle = r.origin == "bundle"
        pos = "corpus_pos in the bundle" if bundle else "--corpus-pos"
        pair = "corpus_pos, corpus_neg in the bundle" if bundle else "--corpus-pos, --corpus-neg"
        if c.projection and (r.corpus_pos is None or r.corpus_neg is None):
            out.append(f"positive and negative text corpora for the projection ({pair})")
        if c.centering and r.text_mean is None and r.corpus_pos is None:
            out.append(
                f"a text mean or a positive corpus for centring ({'text_mean or ' if bundle else ''}{pos})"
            )
        if c.centering and c.image_mean == "given" and r.image_mean is None:
            out.append("an image mean (image_mean in the bundle), because basic.image_mean=given")
        if c.min_normalization and r.norm_text is None and r.corpus_pos is None:
            out.append(f"a positive corpus (or norm_text) for min-normalisation ({pos})")
        if c.contextualize:
            lacking = [
                what
                for what, value in (
                    ("the text encoder", r.encode_texts),
                    ("the raw modifier texts", r.texts),
                    ("the positive corpus strings", r.corpus_pos_texts),
                )
                if value is None
            ]
            if lacking:
                out.append("for text contextualisation " + ", ".join(lacking))
        return out

    def fix_hint(self) -> str:
        return (
            "Give the i-CIR corpora (e.g. --corpus-pos icir_generic_subjects.csv --corpus-neg "
            "icir_generic_styles.csv), or switch the component off for an ablation (e.g. --set "
            "basic.contextualize=false, basic.projection=false)."
        )

    def bundle_hint(self) -> str:
        return (
            "Store the text-corpus embeddings in the bundle (corpus_pos, corpus_neg: float32 [C, D], e.g. i-CIR's "
            "generic subject and style corpora encoded with your text tower), or switch the components off for an "
            "ablation (--set projection=false --set centering=false --set min_normalization=false)."
        )

    # -- pieces ------------------------------------------------------------------------------------------------
    def _means(self, ctx: MethodContext, notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
        r, c, d = ctx.resources, self.config, ctx.database.shape[1]
        if not c.centering:
            return np.zeros(d, np.float32), np.zeros(d, np.float32)
        if c.image_mean == "database" or (c.image_mean == "auto" and r.image_mean is None):
            m_img = _f32(ctx.database).mean(0)
            notes.append("basic: image mean = the database mean (no external image mean given)")
        else:
            m_img = _f32(r.image_mean)
            notes.append(f"basic: image mean = {r.image_mean_source or 'the given image_mean'}")
        m_txt = _f32(r.text_mean) if r.text_mean is not None else _f32(r.corpus_pos).mean(0)
        return m_img, m_txt

    def _project(self, r: Resources, m_txt: np.ndarray, d: int, notes: list[str]) -> np.ndarray:
        c = self.config
        if not c.projection:
            return np.eye(d, dtype=np.float32)
        key = (id(r.corpus_pos), id(r.corpus_neg), id(r.text_mean), c.centering)
        if key not in self._projection:
            self._projection[key] = contrastive_projection(
                _f32(r.corpus_pos) - m_txt,
                _f32(r.corpus_neg) - m_txt,
                alpha=c.alpha,
                n_components=c.n_components,
            )
        proj, k = self._projection[key]
        notes.append(f"basic: projection onto {k} components")
        return proj

    def _text_features(self, ctx: MethodContext) -> np.ndarray:
        if not self.config.contextualize:
            return _f32(ctx.query_text)
        r = ctx.resources
        words = [w for w in r.corpus_pos_texts][: self.config.context_words]
        texts = ctx.texts()
        for t in dict.fromkeys(texts):
            if t not in self._context:
                self._context[t] = contextual_text_features(t, words, r.encode_texts)
        return np.stack([self._context[t] for t in texts]) if texts else _f32(ctx.query_text)

    def _expand(self, q_c: np.ndarray, db_c: np.ndarray, proj: np.ndarray) -> np.ndarray:
        """Each projected query averaged with its k nearest items (best first) and itself, then projected."""
        c = self.config
        k = min(c.qe_k, db_c.shape[0])
        out = []
        for start in range(0, q_c.shape[0], CHUNK):
            qc = q_c[start : start + CHUNK]
            sims = (qc @ proj) @ db_c.T
            top_i = np.argpartition(sims, -k, axis=1)[:, -k:] if k else np.zeros((len(qc), 0), np.int64)
            top_v = np.take_along_axis(sims, top_i, axis=1)
            best_first = np.argsort(-top_v, axis=1, kind="stable")
            top_i, top_v = (np.take_along_axis(a, best_first, axis=1) for a in (top_i, top_v))
            feats = np.concatenate([db_c[top_i], qc[:, None, :]], axis=1)
            vals = np.concatenate([top_v, np.ones((qc.shape[0], 1), np.float32)], axis=1)
            w = np.exp(np.float32(c.qe_beta) * vals)
            w = w / w.sum(axis=1, keepdims=True)
            out.append((feats * w[..., None]).sum(1) @ proj)
        return np.concatenate(out) if out else q_c @ proj

    def _minima(
        self, r: Resources, db: np.ndarray, m_img: np.ndarray, m_txt: np.ndarray, notes: list[str]
    ) -> tuple[float, float]:
        c = self.config
        if r.norm_image is not None:
            img_ref = _f32(r.norm_image)
            notes.append("basic: min-normalisation reference images = the given norm_image")
        else:
            img_ref = sample_rows(db, c.norm_sample)
            notes.append(f"basic: min-normalisation reference images = {img_ref.shape[0]} database items")
        if r.norm_text is not None:
            txt_ref = _f32(r.norm_text)
            notes.append("basic: min-normalisation reference texts = the given norm_text")
        else:
            txt_ref = sample_rows(_f32(r.corpus_pos), c.norm_sample)
            notes.append(
                f"basic: min-normalisation reference texts = {txt_ref.shape[0]} positive-corpus texts"
            )
        img_ref, txt_ref = img_ref - m_img, txt_ref - m_txt
        img_min = float((img_ref @ img_ref.T).min())
        txt_min = float((txt_ref @ img_ref.T).min())
        if img_min == 0.0:
            raise MethodUnavailableError(
                self.name,
                "min-normalisation divides by the minimum image-image similarity, which is 0 here",
                "Give a larger or more varied reference set, or pass --set basic.min_normalization=false.",
            )
        return img_min, txt_min

    # -- the method --------------------------------------------------------------------------------------------
    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        c, r, notes = self.config, ctx.resources, []
        database = _f32(ctx.database)
        m_img, m_txt = self._means(ctx, notes)
        proj = self._project(r, m_txt, database.shape[1], notes)
        db_c = database - m_img
        q_c = _f32(ctx.query_image) - m_img
        t_c = self._text_features(ctx) - m_txt
        q_p = self._expand(q_c, db_c, proj) if c.query_expansion else q_c @ proj
        minima = self._minima(r, database, m_img, m_txt, notes) if c.min_normalization else None
        copies = distinct_rows(db_c)  # copies of one item get one score
        image, text = (dot_scores(v, db_c, copies) for v in (q_p, t_c))

        buffers = Buffers()

        def score(rows: np.ndarray, out: np.ndarray) -> None:
            rows = as_numpy(rows)
            s_img, s_txt = buffers.like("image", out), buffers.like("text", out)
            image(rows, s_img)
            text(rows, s_txt)
            if minima is not None:
                img_min, txt_min = minima
                np.subtract(s_txt, txt_min, out=s_txt)
                np.divide(s_txt, abs(img_min), out=s_txt)
                np.subtract(s_img, img_min, out=s_img)
                np.divide(s_img, abs(img_min), out=s_img)
            s_txt.clip(min=0, out=s_txt)
            s_img.clip(min=0, out=s_img)
            np.multiply(s_txt, s_img, out=out)
            if c.harris:  # out -= λ (s_txt + s_img)², the sum squared in s_txt (no longer needed)
                np.add(s_txt, s_img, out=s_txt)
                np.square(s_txt, out=s_txt)
                np.multiply(s_txt, c.harris_lambda, out=s_txt)
                np.subtract(out, s_txt, out=out)

        return Prepared(score=score, width=database.shape[0], notes=notes)
