"""SEARLE's optimisation-based textual inversion (OTI; Baldrati et al., ICCV 2023) following miccunifi/SEARLE
``src/oti_inversion.py``, as the RS-CIR benchmark paper evaluates SEARLE (A.4), on the registry's CLIP in fp32 with
a seeded generator (a rerun is identical). See docs/retrieval.md, "Learned methods"."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from retrieval.methods.base import Method, MethodContext, Prepared, Resources
from retrieval.methods.learned import pseudo_token_query

PALAVRA_TEMPLATES = (
    "This is a photo of a {}",
    "This photo contains a {}",
    "A photo of a {}",
    "This is an illustration of a {}",
    "This illustration contains a {}",
    "An illustrations of a {}",
    "This is a sketch of a {}",
    "This sketch contains a {}",
    "A sketch of a {}",
    "This is a diagram of a {}",
    "This diagram contains a {}",
    "A diagram of a {}",
    "A {}",
    "We see a {}",
    "{}",
    "We see a {} in this photo",
    "We see a {} in this image",
    "We see a {} in this illustration",
    "We see a {} photo",
    "We see a {} image",
    "We see a {} illustration",
    "{} photo",
    "{} image",
    "{} illustration",
)


@dataclass(frozen=True)
class OTIConfig:
    template: str = "{text} $"  # the RS-CIR benchmark paper A.4 "{attribute_value} {$}"
    placeholder: str = "$"
    steps: int = 200  # the RS-CIR benchmark paper (the authors' default: 350)
    lr: float = 0.002  # the RS-CIR benchmark paper (the authors' default: 0.02)
    weight_decay: float = 0.01
    lambda_gpt: float = 0.25  # the RS-CIR benchmark paper (the authors' default: 0.5)
    lambda_cos: float = 1.0
    ema_decay: float = 0.99
    top_k: int = 15  # concepts per image whose phrases regularise its token
    batch_size: int = 32  # reference images optimised together
    seed: int = 42

    def __post_init__(self):
        if "{text}" not in self.template or self.placeholder not in self.template.replace("{text}", ""):
            raise ValueError(f"template {self.template!r} must contain {{text}} and {self.placeholder!r}")
        if self.steps < 1 or self.lr <= 0 or self.top_k < 1 or self.batch_size < 1:
            raise ValueError("searle-oti needs steps >= 1, lr > 0, top_k >= 1, batch_size >= 1")
        if self.lambda_gpt < 0 or self.lambda_cos < 0 or self.lambda_gpt + self.lambda_cos == 0:
            raise ValueError("searle-oti lambda_cos and lambda_gpt must be >= 0, not both 0")


@dataclass
class Inversion:
    tokens: Tensor  # (B, width) EMA pseudo-tokens
    losses: list[float]  # the mean loss of every step


def image_phrases(
    image: Tensor, vocabulary: Tensor, words: list[str], phrases: dict[str, list[str]], top_k: int
) -> list[list[tuple[str, str]]]:
    """Per image, the (concept, phrase) pairs of its `top_k` most similar concepts that have a phrase naming
    them (the authors drop concepts whose phrases do not contain the concept)."""
    sims = F.normalize(image.float(), dim=-1) @ vocabulary.float().T
    top = torch.topk(sims, min(top_k, vocabulary.shape[0]), dim=1).indices.tolist()
    out = []
    for row in top:
        pairs = []
        for w in row:
            concept = words[w]
            pairs += [(concept, p) for p in phrases.get(concept, ()) if concept in p]
        out.append(pairs)
    return out


def invert(encoder, image: Tensor, pairs: list[list[tuple[str, str]]], cfg: OTIConfig) -> Inversion:
    """OTI for one batch of reference images: `image` (B, d) is the raw image-tower output, `pairs` the
    (concept, phrase) choices of each image (may be empty: that image gets no GPT loss)."""
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    b, width = image.shape[0], encoder.pseudo_token_width
    token = torch.nn.Parameter(torch.randn(b, width, generator=gen) * 0.02)
    ema = token.detach().clone()
    optimizer = torch.optim.AdamW([token], lr=cfg.lr, weight_decay=cfg.weight_decay)
    target = F.normalize(image.float().to(encoder.device), dim=-1)
    use_gpt = cfg.lambda_gpt > 0
    with_phrase = [i for i, p in enumerate(pairs) if p] if use_gpt else []
    phrase_cache: dict[str, Tensor] = {}
    losses = []
    with torch.enable_grad():
        for _ in range(cfg.steps):
            optimizer.zero_grad()
            texts = [rng.choice(PALAVRA_TEMPLATES).format(f" {cfg.placeholder} ") for _ in range(b)]
            feats = F.normalize(
                encoder.pseudo_token_features(texts, token, placeholder=cfg.placeholder).float(), dim=-1
            )
            cosine = (1 - (feats * target).sum(-1)).mean()
            gpt = torch.zeros((), device=cosine.device)
            if with_phrase:
                chosen = [rng.choice(pairs[i]) for i in with_phrase]
                originals = [p for _, p in chosen]
                todo = [p for p in dict.fromkeys(originals) if p not in phrase_cache]
                if todo:
                    phrase_cache.update(zip(todo, encoder.encode_texts(todo)))
                plain = torch.stack([phrase_cache[p] for p in originals]).to(cosine.device)
                swapped = [p.replace(c, f" {cfg.placeholder} ", 1) for c, p in chosen]
                inv = F.normalize(
                    encoder.pseudo_token_features(
                        swapped, token[with_phrase], placeholder=cfg.placeholder
                    ).float(),
                    dim=-1,
                )
                gpt = (1 - (inv * plain).sum(-1)).mean()
            lam_gpt = cfg.lambda_gpt if with_phrase else 0.0
            loss = (cfg.lambda_cos * cosine + lam_gpt * gpt) / (cfg.lambda_cos + lam_gpt)
            loss.backward()
            optimizer.step()
            ema = cfg.ema_decay * ema + (1 - cfg.ema_decay) * token.detach()
            losses.append(float(loss.detach()))
    return Inversion(tokens=ema, losses=losses)


class SearleOTI(Method):
    name, config_cls = "searle-oti", OTIConfig

    def missing(self, r: Resources) -> list[str]:
        needs = r.pseudo_token_needs()
        if self.config.lambda_gpt > 0:
            if r.vocabulary is None or r.vocabulary_texts is None:
                needs.append(
                    "a concept vocabulary (--vocabulary FILE; the RS-CIR benchmark paper: HybridText-23k)"
                )
            if r.concept_phrases is None:
                needs.append(
                    "LLM phrases per concept for the GPT loss (--phrases FILE of concept,phrase rows), or "
                    "--set searle-oti.lambda_gpt=0"
                )
        return needs

    def fix_hint(self) -> str:
        return "Run `reconscore retrieve --encoder SPEC --vocabulary FILE --phrases FILE` (see docs/retrieval.md)."

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        r, c = ctx.resources, self.config
        encoder = r.encoder
        final_losses, no_phrase = [], 0

        def tokens(images: list) -> Tensor:
            nonlocal no_phrase
            with torch.inference_mode():
                raw = encoder.encode_images(images, normalize=False)
            raw = raw.clone()
            pairs = (
                image_phrases(raw, r.vocabulary, list(r.vocabulary_texts), r.concept_phrases, c.top_k)
                if c.lambda_gpt > 0
                else [[] for _ in images]
            )
            no_phrase += sum(1 for p in pairs if not p) if c.lambda_gpt > 0 else 0
            result = invert(encoder, raw, pairs, c)
            final_losses.append(result.losses[-1])
            return result.tokens.cpu()

        prepared, n_images = pseudo_token_query(self.name, ctx, c, tokens)
        prepared.notes.append(
            f"searle-oti: {n_images} reference images inverted, {c.steps} steps, lr {c.lr}, "
            f"lambda_gpt {c.lambda_gpt}; mean final loss {sum(final_losses) / max(len(final_losses), 1):.4f}"
        )
        if no_phrase:
            prepared.notes.append(
                f"searle-oti: {no_phrase} images had no phrase among their {c.top_k} concepts (cosine loss only)"
            )
        return prepared
