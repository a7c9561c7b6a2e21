"""CIReVL (Karthik et al., ICLR 2024; seed 000 Sec. 3.3 and A.4): caption the reference image, let an LLM rewrite
the caption as the modifier asks, and search with the rewritten description (text-to-image).

The captioner and the rewriter are callables handed in by the run (``Resources.captioner`` / ``rewriter``):
seed 000 uses BLIP-2 (blip2-opt-2.7b) and LLaMA-2-7B-chat; `reconscore retrieve` wires the describer's
captioner backends. Without them the method says what it needs; it never substitutes a stand-in. Captions are
computed once per reference image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

# The instruction handed to the rewriting model; {caption} and {text} are filled per query.
REWRITE_PROMPT = (
    "Image description: {caption}\n"
    "Requested change: {text}\n"
    "Write one short description of the image after the requested change. Keep everything the change does not "
    "touch. Answer with the description only."
)
CAPTION_PROMPT = "Describe this image in one short sentence."


@dataclass(frozen=True)
class CIReVLConfig:
    caption_prompt: str = CAPTION_PROMPT
    rewrite_prompt: str = REWRITE_PROMPT

    def __post_init__(self):
        if "{caption}" not in self.rewrite_prompt or "{text}" not in self.rewrite_prompt:
            raise ValueError(
                f"cirevl.rewrite_prompt must contain {{caption}} and {{text}}, got {self.rewrite_prompt!r}"
            )


class CIReVL(Method):
    name, config_cls = "cirevl", CIReVLConfig

    def __init__(self, config: CIReVLConfig | None = None):
        super().__init__(config)
        self._captions: dict[str, str] = {}

    def missing(self, r: Resources) -> list[str]:
        needs = (
            ("a captioner (--captioner BACKEND:MODEL)", r.captioner),
            ("an LLM rewriter (--rewriter MODEL)", r.rewriter),
            ("a text encoder at query time", r.encode_texts),
            ("the raw modifier texts", r.texts),
            ("the reference images", r.load_reference),
        )
        return [what for what, value in needs if value is None]

    def fix_hint(self) -> str:
        return (
            "Run `reconscore retrieve` with --captioner and --rewriter (seed 000 used BLIP-2 and LLaMA-2-7B-chat); "
            "a features bundle alone cannot run CIReVL."
        )

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        r = ctx.resources
        gidx = ctx.query_index.tolist()
        keys = [r.reference_keys[i] if r.reference_keys is not None else str(i) for i in gidx]
        todo = {k: i for k, i in zip(keys, gidx) if k not in self._captions}
        if todo:
            captions = r.captioner([r.load_reference(i) for i in todo.values()])
            if len(captions) != len(todo):
                raise ValueError(f"the captioner returned {len(captions)} captions for {len(todo)} images")
            self._captions.update(zip(todo, captions))
        captions = [self._captions[k] for k in keys]
        rewritten = r.rewriter(captions, ctx.texts())
        if len(rewritten) != len(captions):
            raise ValueError(f"the rewriter returned {len(rewritten)} texts for {len(captions)} queries")
        vectors = r.encode_texts(list(rewritten)) if rewritten else torch.zeros(0, ctx.database.shape[1])
        details = [f"{c} -> {t}" for c, t in zip(captions, rewritten)]
        return linear(vectors, ctx.database, details=details)
