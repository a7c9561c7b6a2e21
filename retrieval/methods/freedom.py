"""FreeDom (Efthymiadis et al., 2025; the RS-CIR benchmark paper Sec. 3.3 and A.4), following NikosEfth/freedom's
``calculate_rankings``: proxy images -> vocabulary words -> frequency-weighted composed texts. See
docs/retrieval.md, "Methods and hyperparameters"."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from retrieval.choices import check_choice
from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

CHUNK = 512
SELF_PROXY = ("query", "batch")
CHUNK_ENTRIES = 1 << 25  # bounds the (B, k, V) proxy-to-word similarity block (a 23k vocabulary: B = 72)


@dataclass(frozen=True)
class FreedomConfig:
    k: int = 20  # proxy images ("kappa")
    n: int = 7  # words per proxy ("ni")
    m: int = 7  # most frequent words kept ("miu")
    # NikosEfth/freedom text_to_multi; the RS-CIR benchmark paper A.4: "{text} {word}"
    template: str = "{word} {text}"
    self_threshold: float = 0.98  # below this best database similarity the query image joins its proxies
    self_proxy: str = "query"  # query: decided per query | batch: the authors' one decision per query set

    def __post_init__(self):
        if min(self.k, self.n, self.m) < 1:
            raise ValueError(f"freedom k, n, m must be >= 1, got {self.k}, {self.n}, {self.m}")
        if "{text}" not in self.template or "{word}" not in self.template:
            raise ValueError(f"freedom template must contain {{text}} and {{word}}, got {self.template!r}")
        check_choice("freedom self_proxy", self.self_proxy, SELF_PROXY)


def proxy_features(
    q_img: Tensor, database: Tensor, *, k: int, self_threshold: float, add_self: Tensor | None = None
) -> Tensor:
    """(B, k, D): the k nearest database items of each query; the query itself first (and the last neighbour
    dropped) when its best database similarity is below `self_threshold`, or where `add_self` (B,) says so."""
    sims = q_img @ database.T
    k_eff = min(k, database.shape[0])
    top_v, top_i = torch.topk(sims, k_eff, dim=1)
    neighbours = database[top_i]
    if add_self is None:
        add_self = top_v[:, 0] < self_threshold
    if add_self.any():
        with_self = torch.cat([q_img.unsqueeze(1), neighbours[:, : k_eff - 1]], dim=1)
        neighbours = torch.where(add_self[:, None, None], with_self, neighbours)
    return neighbours


def frequent_words(word_idx: Tensor, vocab_size: int, m: int) -> tuple[Tensor, Tensor]:
    """(B, m) most frequent word indices per row of `word_idx` (B, L), ties in first-appearance order, and their
    weights count / max count (0 where a row has fewer than m distinct words)."""
    b, length = word_idx.shape
    counts = torch.zeros(b, vocab_size, dtype=torch.long).scatter_add_(1, word_idx, torch.ones_like(word_idx))
    position = torch.arange(length).expand(b, length)
    first = torch.full((b, vocab_size), length, dtype=torch.long).scatter_reduce_(
        1, word_idx, position, reduce="amin", include_self=True
    )
    key = counts * (length + 1) + (length - first)  # more frequent first, then earlier first
    m_eff = min(m, vocab_size)
    top_idx = torch.topk(key, m_eff, dim=1).indices
    top_counts = counts.gather(1, top_idx).float()
    weights = top_counts / top_counts.max(dim=1, keepdim=True).values.clamp(min=1e-4)
    return top_idx, torch.where(top_counts > 0, weights, torch.zeros_like(weights))


class Freedom(Method):
    name, config_cls = "freedom", FreedomConfig

    def __init__(self, config: FreedomConfig | None = None):
        super().__init__(config)
        self._text_cache: dict[str, Tensor] = {}

    def missing(self, r: Resources) -> list[str]:
        out = []
        if r.encode_texts is None:
            out.append("a text encoder at query time (it encodes the '{word} {text}' compositions)")
        if r.texts is None:
            out.append("the raw modifier texts")
        if r.vocabulary is None or r.vocabulary_texts is None:
            out.append("a vocabulary (--vocabulary FILE, e.g. openimages_boxable_classes.csv)")
        return out

    def fix_hint(self) -> str:
        return (
            "Run `reconscore retrieve --encoder SPEC --vocabulary FILE`; a features bundle alone cannot run "
            "FreeDom, because it encodes new texts per query."
        )

    def _encode(self, texts: list[str], encode) -> Tensor:
        todo = [t for t in dict.fromkeys(texts) if t not in self._text_cache]
        if todo:
            for t, f in zip(todo, encode(todo)):
                self._text_cache[t] = f
        return torch.stack([self._text_cache[t] for t in texts])

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        c, r = self.config, ctx.resources
        vocab, words = r.vocabulary, list(r.vocabulary_texts)
        texts = ctx.texts()
        vectors, details = [], []
        step = max(1, min(CHUNK, CHUNK_ENTRIES // (c.k * vocab.shape[0])))
        batch_self = None
        if c.self_proxy == "batch" and ctx.query_image.shape[0]:
            best = torch.cat(
                [
                    (ctx.query_image[i : i + CHUNK] @ ctx.database.T).max(dim=1).values
                    for i in range(0, ctx.query_image.shape[0], CHUNK)
                ]
            )
            batch_self = bool(best.min() < c.self_threshold)
        for start in range(0, ctx.query_image.shape[0], step):
            q = ctx.query_image[start : start + step]
            add_self = None if batch_self is None else torch.full((q.shape[0],), batch_self)
            proxies = proxy_features(
                q, ctx.database, k=c.k, self_threshold=c.self_threshold, add_self=add_self
            )
            word_sims = proxies @ vocab.T  # (B, k, V)
            top_words = torch.topk(word_sims, min(c.n, vocab.shape[0]), dim=2).indices
            idx, weights = frequent_words(top_words.flatten(1), vocab.shape[0], c.m)
            chunk_texts = texts[start : start + step]
            composed = [
                c.template.format(text=t, word=words[w])
                for t, row in zip(chunk_texts, idx.tolist())
                for w in row
            ]
            feats = self._encode(composed, r.encode_texts).view(idx.shape[0], idx.shape[1], -1)
            vectors.append((feats * weights.unsqueeze(-1)).sum(1))
            for row, wrow in zip(idx.tolist(), weights.tolist()):
                details.append(", ".join(f"{words[i]} ({w:.2f})" for i, w in zip(row, wrow) if w > 0))
        query_vectors = torch.cat(vectors) if vectors else ctx.query_text[:0]
        return linear(query_vectors, ctx.database, details=details)
