"""CLIPScore and RefCLIPScore (Hessel et al., EMNLP 2021) with any image+text encoder of the registry, and the
77-token handling the CLIP-based metrics share. See docs/correlate.md for the formulas and `long_text`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput
from recon_score.errors import ReconScoreError, ReconScoreWarning

DEFAULT_ENCODER = "open_clip:ViT-B-32/openai"
DEFAULT_PREFIX = "A photo depicts"
CLIP_S_WEIGHT = 2.5
LONG_TEXT_MODES = ("truncate", "sliding-window")


def clip_score_aligned(image_emb, text_emb, *, w: float = CLIP_S_WEIGHT):
    """CLIP-S of aligned rows, w * max(cos, 0), shape (n,); w only stretches CLIP's narrow cosine range so
    numbers compare with the paper."""
    import torch.nn.functional as F

    return w * (F.normalize(image_emb, dim=-1) * F.normalize(text_emb, dim=-1)).sum(-1).clamp(min=0)


def max_reference_similarity(cand_emb, ref_emb, owner):
    """(n,) max cosine between candidate i and the references r with owner[r] == i; NaN for rows without any."""
    import torch
    import torch.nn.functional as F

    cand, ref = F.normalize(cand_emb, dim=-1), F.normalize(ref_emb, dim=-1)
    owner = torch.as_tensor(owner, dtype=torch.long)
    out = torch.full((cand.shape[0],), float("-inf"), dtype=cand.dtype)
    if len(owner):
        sims = (cand[owner] * ref).sum(-1)
        out = out.scatter_reduce(0, owner, sims, reduce="amax", include_self=True)
    return torch.where(torch.isinf(out), torch.full_like(out, float("nan")), out)


def ref_clip_score(clip_s, ref_sim):
    """Harmonic mean of CLIP-S and max(reference similarity, 0); 0 where both are 0 (Hessel et al., Eq. 2)."""
    import torch

    r = ref_sim.clamp(min=0)
    total = clip_s + r
    return torch.where(
        total > 0, 2 * clip_s * r / torch.where(total > 0, total, torch.ones_like(total)), total * 0
    )


# -- text side: prefix, token counting, the 77-token limit -----------------------------------------------------
@dataclass(frozen=True)
class TokenCounter:
    count: Callable[[str], int]  # tokens of a text, without start/end markers
    specials: int  # start/end markers added around every text
    context_length: int


def token_counter(encoder) -> TokenCounter | None:
    """How `encoder`'s tokenizer counts, or None if it exposes no tokenizer we know."""
    tok = getattr(encoder, "tokenizer", None)
    inner = getattr(tok, "tokenizer", None)  # open_clip's HFTokenizer wraps a transformers tokenizer
    if inner is not None and hasattr(inner, "model_max_length"):
        ctx = getattr(tok, "context_length", None) or inner.model_max_length
        tok = inner
    else:
        ctx = getattr(encoder, "context_length", None)
    if tok is None:
        return None
    if hasattr(tok, "model_max_length"):  # transformers
        ctx = ctx or tok.model_max_length
        if not ctx or ctx > 100_000:
            return None
        specials = len(tok("")["input_ids"])
        return TokenCounter(lambda t: len(tok(t, add_special_tokens=False)["input_ids"]), specials, int(ctx))
    if hasattr(tok, "encode") and ctx:  # open_clip SimpleTokenizer: <start> ... <end>
        return TokenCounter(lambda t: len(tok.encode(t)), 2, int(ctx))
    return None


def with_prefix(prefix: str, text: str) -> str:
    """`prefix + ' ' + text`, as the authors' code (a trailing space is added to the prefix if missing)."""
    if not prefix:
        return text
    return (prefix if prefix.endswith(" ") else prefix + " ") + text


def word_windows(word_tokens: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """[start, end) word spans, each within `budget` tokens (a single longer word gets its own span), covering all
    words; each span starts about half a window after the previous one."""
    n = len(word_tokens)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        end, total = start, 0
        while end < n and (end == start or total + word_tokens[end] <= budget):
            total += word_tokens[end]
            end += 1
        spans.append((start, end))
        if end >= n:
            break
        nxt, acc = start, 0
        while nxt < end - 1 and acc + word_tokens[nxt] <= total / 2:
            acc += word_tokens[nxt]
            nxt += 1
        start = max(nxt, start + 1)
    return spans


@dataclass
class TextEmbeddings:
    emb: object  # torch.Tensor (n, d), unit rows
    n_tokens: np.ndarray  # (n,) tokens with prefix and markers; -1 when the tokenizer is unknown
    truncated: np.ndarray  # (n,) bool
    windows: np.ndarray  # (n,) int


def embed_texts(
    encoder, texts: Sequence[str], *, prefix: str, long_text: str, store: dict | None = None
) -> TextEmbeddings:
    """Embed `prefix + text` for each text, handling texts over the context length per `long_text`. `store`
    (encoded text -> its embedding row, one per encoder) is read and filled: a text it holds is not encoded."""
    import torch
    import torch.nn.functional as F

    if long_text not in LONG_TEXT_MODES:
        raise ReconScoreError(f"long_text must be one of {', '.join(LONG_TEXT_MODES)}, got {long_text!r}")
    full = [with_prefix(prefix, t) for t in texts]
    counter = token_counter(encoder)
    n = len(texts)
    if counter is None:
        if long_text == "sliding-window":
            raise ReconScoreError(
                f"encoder {encoder.info.spec!r} exposes no tokenizer reconscore can count with, so the "
                "sliding-window mode cannot split long texts; use long_text='truncate'"
            )
        n_tokens = np.full(n, -1)
    else:
        n_tokens = np.array([counter.count(f) + counter.specials for f in full], dtype=int)
    over = n_tokens > (counter.context_length if counter else np.iinfo(int).max)
    pieces: list[list[str]] = [[f] for f in full]
    if long_text == "sliding-window" and over.any():
        budget = counter.context_length - counter.specials - (counter.count(prefix) if prefix else 0)
        if budget < 1:
            raise ReconScoreError(
                f"the prefix {prefix!r} alone fills the {counter.context_length}-token context"
            )
        for i in np.flatnonzero(over):
            words = texts[i].split()
            spans = word_windows([counter.count(w) for w in words], budget)
            pieces[i] = [with_prefix(prefix, " ".join(words[a:b])) for a, b in spans]
    store = {} if store is None else store
    todo = list(dict.fromkeys(p for ps in pieces for p in ps if p not in store))
    if todo:
        store.update(zip(todo, encoder.encode_texts(todo)))
    rows = [torch.stack([store[p] for p in ps]).mean(0) for ps in pieces]
    emb = F.normalize(torch.stack(rows), dim=-1) if rows else torch.zeros(0, encoder.info.dim or 0)
    windows = np.array([len(ps) for ps in pieces], dtype=int)
    truncated = over & (long_text == "truncate")
    return TextEmbeddings(emb=emb, n_tokens=n_tokens, truncated=truncated, windows=windows)


class _ClipMetric(Metric):
    def __init__(
        self,
        *,
        encoder: str = DEFAULT_ENCODER,
        prefix: str = DEFAULT_PREFIX,
        long_text: str = "truncate",
        w: float = CLIP_S_WEIGHT,
        device: str | None = None,
        batch_size: int | None = None,
    ):
        if long_text not in LONG_TEXT_MODES:
            raise ReconScoreError(f"long_text must be one of {', '.join(LONG_TEXT_MODES)}, got {long_text!r}")
        self.spec, self.prefix, self.long_text, self.w = encoder, prefix, long_text, float(w)
        self.device, self.batch_size = device, batch_size
        self._encoder = None

    def model_needs(self) -> list:
        """Its encoder, for recon_score.preflight (checked before any model loads)."""
        from recon_score.preflight import ModelNeed

        return [ModelNeed(f"encoder ({self.info.name})", self.spec, "--encoder", encoder=True)]

    @property
    def encoder(self):
        if self._encoder is None:
            from recon_score.encoders import build_encoder

            enc = build_encoder(self.spec, device=self.device, batch_size=self.batch_size)
            if not (enc.has_images and enc.has_texts and enc.kind == "embedding"):
                raise ReconScoreError(
                    f"{self.info.name} needs an image+text embedding encoder; {self.spec!r} has "
                    f"modalities {enc.info.modalities} ({enc.kind})"
                )
            self._encoder = enc
        return self._encoder

    def _key(self, what: str) -> tuple:
        return ("clip", what, self.spec, self.device, self.prefix, self.long_text)

    def _images(self, batch: CaptionBatch):
        """(n, d) image embeddings (NaN rows where the image failed) and the per-row errors. Each distinct image
        of the run (CaptionBatch.image_keys) is encoded once; a file already encoded is not even read again."""

        def run():
            import torch

            keys = batch.image_keys()
            store = batch.run_table(("clip", "image embeddings", self.spec, self.device))
            todo = list(dict.fromkeys(k for k in keys if k is not None and k not in store))
            loaded = batch.loaded_images() if todo or None in keys else None
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            fresh = [k for k in todo if not isinstance(loaded[first[k]], Exception)]
            store.update((k, loaded[first[k]]) for k in todo if k not in fresh)  # the error, said again later
            if fresh:
                store.update(zip(fresh, self.encoder.encode_images([loaded[first[k]] for k in fresh])))
            values = [loaded[i] if k is None else store[k] for i, k in enumerate(keys)]
            errors = [str(v) if isinstance(v, Exception) else None for v in values]
            good = [v for v in values if not isinstance(v, Exception)]
            dim = good[0].shape[0] if good else (self.encoder.info.dim or 1)
            emb = torch.full((len(values), dim), float("nan"))
            for i, v in enumerate(values):
                if not isinstance(v, Exception):
                    emb[i] = v
            return emb, errors

        return batch.memo(self._key("images"), run)

    def _candidates(self, batch: CaptionBatch) -> TextEmbeddings:
        texts = [c or "" for c in batch.candidates]
        return batch.memo(self._key("candidates"), lambda: self._embed(batch, texts))

    def _embed(self, batch: CaptionBatch, texts: list[str]) -> TextEmbeddings:
        """`embed_texts` through the run's store of this encoder's text embeddings (shared by every batch)."""
        store = batch.run_table(("clip", "text embeddings", self.spec, self.device))
        return embed_texts(self.encoder, texts, prefix=self.prefix, long_text=self.long_text, store=store)

    def _clip_s(self, batch: CaptionBatch):
        import torch

        img, errors = self._images(batch)
        txt = self._candidates(batch)
        values = clip_score_aligned(img, txt.emb, w=self.w)
        missing = torch.tensor([c is None for c in batch.candidates], dtype=torch.bool)
        values = torch.where(missing, torch.full_like(values, float("nan")), values)
        return values, errors, txt

    def _reference_similarity(self, batch: CaptionBatch, txt: TextEmbeddings):
        """Max cosine of each candidate with its own references (prefixed), NaN where a row has none; and how many
        rows have none."""
        refs = batch.references or [[] for _ in batch.candidates]
        flat = [r for rs in refs for r in rs]
        owner = [i for i, rs in enumerate(refs) for _ in rs]
        ref_txt = batch.memo(self._key("references"), lambda: self._embed(batch, flat))
        return max_reference_similarity(txt.emb, ref_txt.emb, owner), sum(1 for rs in refs if not rs)

    def _score(self, batch: CaptionBatch, combine=None) -> MetricOutput:
        """The image score (CLIP-S and its re-weighted, re-trained variants) with the run's facts; with `combine`,
        `combine(image score, max reference similarity)` per row (RefCLIP-S's harmonic mean and its variants),
        NaN propagating from rows without image or references."""
        values, errors, txt = self._clip_s(batch)
        if combine is not None:
            ref_sim, without = self._reference_similarity(batch, txt)
            values = combine(values, ref_sim)
        extra: dict = {}
        info = self._report(batch, txt, errors, extra)
        if combine is not None:
            info["rows_without_references"] = without
        return MetricOutput(values.double().numpy(), extra=extra, info=info)

    def _report(self, batch: CaptionBatch, txt: TextEmbeddings, errors, extra: dict) -> dict:
        name = self.info.name
        counter = token_counter(self.encoder)
        over = int((txt.n_tokens > (counter.context_length if counter else np.iinfo(int).max)).sum())
        if self.long_text == "truncate":
            extra[f"{name}_truncated"] = txt.truncated.tolist()
            if over:
                first = int(np.flatnonzero(txt.truncated)[0])
                warnings.warn(
                    ReconScoreWarning(
                        f"{name}: {over} of {len(batch)} captions exceed the encoder's "
                        f"{counter.context_length}-token context (with the prefix) and were truncated (first: row "
                        f"{first}, {int(txt.n_tokens[first])} tokens); long_text='sliding-window' "
                        "(--long-text sliding-window) averages over windows instead"
                    ),
                    stacklevel=3,
                )
        else:
            extra[f"{name}_windows"] = txt.windows.tolist()
        if any(errors):
            extra[f"{name}_error"] = errors
        return {
            "long_text": self.long_text,
            "context_length": counter.context_length if counter else None,
            "rows_over_context": over,
            "image_errors": sum(e is not None for e in errors),
        }

    def config(self) -> dict:
        out = {"encoder": self.spec, "prefix": self.prefix, "w": self.w, "long_text": self.long_text}
        if self._encoder is not None:
            info = self._encoder.info
            out.update(encoder_source=info.source, encoder_dim=info.dim, device=str(self._encoder.device))
            out.update({f"encoder_{k}": v for k, v in info.extra.items()})  # e.g. encoder_activation
        return out


class CLIPScore(_ClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch)


class RefCLIPScore(_ClipMetric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        return self._score(batch, ref_clip_score)
