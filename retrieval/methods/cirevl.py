"""CIReVL (Karthik et al., ICLR 2024; the RS-CIR benchmark paper Sec. 3.3 and A.4): caption the reference image
(once per image), let an LLM rewrite the caption as the modifier asks, and search with the rewritten description.
The captioner and rewriter come from the run (the paper: BLIP-2 and LLaMA-2-7B-chat). See docs/retrieval.md."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

# The rewriter's instructions in CIReVL's layout (ExplainableML/Vision_by_Language src/prompts.py), in our own
# words: "patterncom" renders the RS-CIR benchmark paper A.4's description of its prompt ("covering the six
# attribute types to enforce faithful attribute changes while preserving scene semantics"; not printed there).
REWRITE_PROMPTS = {
    "patterncom": (
        "I have a remote sensing image, an aerial or satellite view of one scene class. Given an instruction that "
        "names a target attribute value, write a short description of the edited image. The image content begins "
        'with "Image Content:" and the instruction with "Instruction:". The instruction changes one attribute of '
        "the main object or scene, of one of six types: color, context (what surrounds it), density (how densely "
        "it is built or packed), existence (whether something is present), quantity (how many there are) or "
        "shape. Change only that attribute to the instructed value, keep the scene class and everything else, "
        'and add nothing imaginary. Reply with one line beginning with "Edited Description:".\n'
        "Image Content: {caption}\n"
        "Instruction: {text}\n"
        "Edited Description:"
    ),
    "generic": (
        "I have an image. Given an instruction to edit it, write a short description of the edited image. The "
        'image content begins with "Image Content:" and the instruction with "Instruction:". Describe only the '
        "edited image, keep it as short as possible and add nothing imaginary. Reply with one line beginning "
        'with "Edited Description:".\n'
        "Image Content: {caption}\n"
        "Instruction: {text}\n"
        "Edited Description:"
    ),
}
CAPTION_PROMPT = "Describe this image in one short sentence."
ANSWER_PREFIX = "Edited Description:"


def edited_description(answer: str) -> str:
    """The rewriter's answer without CIReVL's "Edited Description:" prefix (the model may repeat it)."""
    text = answer.strip()
    if text.lower().startswith(ANSWER_PREFIX.lower()):
        text = text[len(ANSWER_PREFIX) :].strip()
    return text.splitlines()[0].strip() if text else text


@dataclass(frozen=True)
class CIReVLConfig:
    caption_prompt: str = CAPTION_PROMPT
    rewrite_prompt: str = "patterncom"  # a name in REWRITE_PROMPTS, or a template with {caption} and {text}

    @property
    def rewrite_template(self) -> str:
        return REWRITE_PROMPTS.get(self.rewrite_prompt, self.rewrite_prompt)

    def __post_init__(self):
        if "{caption}" not in self.rewrite_template or "{text}" not in self.rewrite_template:
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
            "Run `reconscore retrieve` with --captioner and --rewriter (the RS-CIR benchmark paper used BLIP-2 and LLaMA-2-7B-chat); "
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
        rewritten = [edited_description(t) for t in rewritten]
        vectors = r.encode_texts(list(rewritten)) if rewritten else torch.zeros(0, ctx.database.shape[1])
        details = [f"{c} -> {t}" for c, t in zip(captions, rewritten)]
        return linear(vectors, ctx.database, details=details)
