"""Unimodal and score-fusion baselines (the RS-CIR benchmark paper, Sec. 3.2): text-only s_g = g(t)·f(x), image-only
s_f = f(y)·f(x), text + image s_f + s_g, text × image s_f · s_g."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.methods.base import (
    Buffers,
    Method,
    MethodContext,
    Prepared,
    distinct_rows,
    dot_scores,
    linear,
    torch_view,
)


@dataclass(frozen=True)
class NoConfig:
    """This method has no hyperparameters."""


@dataclass(frozen=True)
class ProductConfig:
    # true: i-CIR's calculate_rankings clamps both at 0 (its protocol sets it); rscir and FreeDom multiply the raw
    # cosines (the RS-CIR benchmark paper's s_m = s_f × s_g)
    rectify: bool = False


class TextOnly(Method):
    name, config_cls, takes_numpy = "text", NoConfig, True

    def prepare(self, ctx: MethodContext) -> Prepared:
        return linear(ctx.query_text, ctx.database)


class ImageOnly(Method):
    name, config_cls, takes_numpy = "image", NoConfig, True

    def prepare(self, ctx: MethodContext) -> Prepared:
        return linear(ctx.query_image, ctx.database)


class Sum(Method):
    """Text + image: (f(y) + g(t))·f(x) equals s_f + s_g, so the method is linear (FAISS-servable)."""

    name, config_cls, takes_numpy = "sum", NoConfig, True

    def prepare(self, ctx: MethodContext) -> Prepared:
        return linear(ctx.query_image + ctx.query_text, ctx.database)


class Product(Method):
    name, config_cls, takes_numpy = "product", ProductConfig, True

    def prepare(self, ctx: MethodContext) -> Prepared:
        rectify = self.config.rectify
        on_numpy = isinstance(ctx.database, np.ndarray)
        rows = distinct_rows(ctx.database) if on_numpy else None
        image, text = (dot_scores(q, ctx.database, rows) for q in (ctx.query_image, ctx.query_text))
        buffers = Buffers()

        def score(rows: np.ndarray, out: np.ndarray) -> None:
            s_img, s_txt = out, buffers.like("text", out)
            image(rows, s_img)
            text(rows, s_txt)
            if rectify:
                for s in (s_img, s_txt):  # in the arrays' own library: torch's clip keeps -0.0, numpy's not
                    if on_numpy:
                        s.clip(min=0, out=s)
                    else:
                        torch_view(s).clip_(min=0)
            np.multiply(s_img, s_txt, out=out)

        return Prepared(score=score, width=ctx.database.shape[0])
