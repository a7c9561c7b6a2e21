"""CompoDiff as a retrieval method, as the authors' README ("Usage 2. Composed visual embeddings without mask for
CIR") and the RS-CIR benchmark paper (A.4); retrieval.compodiff holds the model, its loader and the sampler. See
docs/retrieval.md, "Learned methods"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from recon_score.errors import InputError
from retrieval.choices import check_choice
from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

RELEASE = (
    "the Hugging Face hub repo navervision/CompoDiff-Aesthetic (config.json + weights; code: "
    "github.com/navervision/CompoDiff, Apache-2.0)"
)


@dataclass(frozen=True)
class CompoDiffMethodConfig:
    steps: int = 10  # the RS-CIR benchmark paper (A.4); DDIM over int(linspace(-1, T, steps + 1)[:-1])
    source_weight: float = 0.4  # the RS-CIR benchmark paper (A.4): (1 - w) * sample + w * reference
    image_scale: float = 1.5  # the authors' README (cfg_image_scale)
    text_scale: float = 7.5  # the authors' README (cfg_text_scale)
    negative_prompt: str = "low quality"
    negative_mask: str = "text"  # "text": the authors' code; "own": the negative prompt's own attention mask
    template: str = "{text}"  # the composed prompt
    num_samples: int = 2  # draws averaged per query (README, demo)
    seed: int = 0  # torch.manual_seed per batch, as the authors' `random_seed`
    batch_size: int = 16
    text_encoder: str = "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k"  # hub id or local folder (CLIPTextModel)
    # the authors' from_pretrained(torch_dtype=float16).to(float32); "as-stored"
    clip_weights: str = "fp16-rounded"
    reference_resize: str = "squash-512"  # demo_search.py's image.resize((512, 512)); "none"

    def __post_init__(self):
        check_choice("clip_weights", self.clip_weights, ("fp16-rounded", "as-stored"))
        check_choice("reference_resize", self.reference_resize, ("squash-512", "none"))
        check_choice("negative_mask", self.negative_mask, ("text", "own"))
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2, got {self.steps}")
        if not 0.0 <= self.source_weight <= 1.0:
            raise ValueError(f"source_weight must be in [0, 1], got {self.source_weight}")
        if "{text}" not in self.template:
            raise ValueError(f"template must contain {{text}}, got {self.template!r}")


class CompoDiffMethod(Method):
    name, config_cls = "compodiff", CompoDiffMethodConfig

    def __init__(self, config: CompoDiffMethodConfig | None = None):
        super().__init__(config)
        self._loaded: dict[str, object] = {}

    def missing(self, r: Resources) -> list[str]:
        needs = r.checkpoint_needs(
            self.name,
            f"its released checkpoint ({RELEASE}), a folder given with --checkpoint compodiff=DIR",
            folder=True,
        )
        if r.encoder is None or not hasattr(r.encoder, "encode_images"):
            needs.append("an image encoder (CLIP ViT-L/14, the space CompoDiff samples in; run `retrieve`)")
        return needs + r.reference_needs()

    def fix_hint(self) -> str:
        return (
            f"Download {RELEASE} (e.g. `hf download navervision/CompoDiff-Aesthetic --local-dir DIR`) and pass "
            "--checkpoint compodiff=DIR with --encoder open_clip:ViT-L-14-quickgelu/openai; the text encoder "
            f"({CompoDiffMethodConfig.text_encoder}) comes from the HF cache or --set compodiff.text_encoder=DIR."
        )

    def _models(self, folder: Path):
        from recon_score.hub import resolve_model
        from retrieval.compodiff import load_compodiff

        key = f"{folder}|{self.config.text_encoder}|{self.config.clip_weights}"
        if key not in self._loaded:
            from transformers import CLIPTokenizer

            text = resolve_model(
                self.config.text_encoder, kind="CLIP text encoder", option="--set compodiff.text_encoder"
            )
            model = load_compodiff(folder)
            encoder = load_text_encoder(text.path, self.config.clip_weights)
            tokenizer = CLIPTokenizer.from_pretrained(str(text.path))
            if encoder.config.hidden_size != model.cfg.text_width:
                raise InputError(
                    f"compodiff: {folder} projects {model.cfg.text_width}-wide text states, but "
                    f"{self.config.text_encoder} gives {encoder.config.hidden_size}-wide ones"
                )
            self._loaded = {key: (model, encoder, tokenizer)}
        return self._loaded[key]

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        r, cfg = ctx.resources, self.config
        folder = Path(r.checkpoints[self.name])
        model, text_model, tokenizer = self._models(folder)
        if r.encoder.info.dim != model.cfg.embed_dim:
            raise InputError(
                f"compodiff: {folder} samples {model.cfg.embed_dim}-d image embeddings, but the encoder "
                f"{r.encoder.info.spec} gives {r.encoder.info.dim}-d ones; use CLIP ViT-L/14 (OpenAI)"
            )
        from recon_score.progress import Progress

        rows, texts = ctx.query_index.tolist(), ctx.texts()
        image_encoder, rounded = reference_encoder(r.encoder, cfg.clip_weights)
        out = []
        bar = Progress(len(rows), unit="query", desc="compodiff sampling", leave=False)
        for start in range(0, len(rows), cfg.batch_size):
            batch = rows[start : start + cfg.batch_size]
            images = [squash(r.load_reference(i), cfg.reference_resize) for i in batch]
            image = image_encoder.encode_images(images, normalize=False).float().cpu().unsqueeze(1)
            prompts = [cfg.template.format(text=t) for t in texts[start : start + cfg.batch_size]]
            cond, negative = self._text_states(text_model, tokenizer, prompts)
            sample = model.sample(
                image,
                cond,
                negative,
                steps=cfg.steps,
                scales=(cfg.image_scale, cfg.text_scale),
                num_samples=cfg.num_samples,
                seed=cfg.seed,
            )
            mixed = (1 - cfg.source_weight) * sample + cfg.source_weight * image[:, 0]
            out.append(F.normalize(mixed, dim=-1))
            bar.update(len(batch))
        bar.close()
        prepared = linear(torch.cat(out), ctx.database)
        prepared.notes.append(
            f"compodiff: {folder}, text encoder {cfg.text_encoder}; {cfg.steps} steps "
            f"({cfg.steps - 1} denoiser evaluations), source weight {cfg.source_weight}, guidance "
            f"({cfg.image_scale}, {cfg.text_scale}), negative prompt {cfg.negative_prompt!r} "
            f"(mask: {cfg.negative_mask}), {cfg.num_samples} samples, seed {cfg.seed} per batch of "
            f"{cfg.batch_size}; CLIP weights {cfg.clip_weights} (reference image tower: {rounded}), reference "
            f"resize {cfg.reference_resize}"
        )
        return prepared

    def _text_states(self, text_model, tokenizer, prompts: list[str]) -> tuple[Tensor, Tensor]:
        """Last hidden states (B, 77, W) of the prompts and of the negative prompt (padded to max_length)."""
        enc = lambda t: tokenizer(t, return_tensors="pt", padding="max_length", truncation=True)  # noqa: E731
        tokens = enc(prompts)
        negative = enc([self.config.negative_prompt] * len(prompts))
        mask = tokens["attention_mask"] if self.config.negative_mask == "text" else negative["attention_mask"]
        with torch.inference_mode():
            cond = text_model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
            neg = text_model(input_ids=negative["input_ids"], attention_mask=mask)
        return cond.last_hidden_state.float(), neg.last_hidden_state.float()


def load_text_encoder(path, clip_weights: str):
    """models.py `CLIPHF`: `CLIPTextModel.from_pretrained(..., torch_dtype=float16).to(float32)` ("fp16-rounded"),
    or the file's values ("as-stored")."""
    from transformers import CLIPTextModel

    dtype = torch.float16 if clip_weights == "fp16-rounded" else torch.float32
    return CLIPTextModel.from_pretrained(str(path), dtype=dtype).to(torch.float32).eval()


def squash(image, mode: str):
    """demo_search.py: `image.resize((512, 512))` (PIL's default filter) before CLIPImageProcessor."""
    return image.resize((512, 512)) if mode == "squash-512" else image


def reference_encoder(encoder, clip_weights: str):
    """(encoder for the reference images, what was done): with "fp16-rounded", a copy of an open_clip encoder
    whose weights are rounded as `from_pretrained(torch_dtype=float16).to(float32)` rounds the authors' vision
    tower (the database keeps the run's encoder); other encoders are used as they are."""
    import copy

    from recon_score.encoders.open_clip import OpenCLIPEncoder, round_to_fp16

    if clip_weights != "fp16-rounded":
        return encoder, "as stored"
    if not isinstance(encoder, OpenCLIPEncoder):
        return encoder, f"as stored ({type(encoder).__name__} is not rounded)"
    rounded = copy.copy(encoder)
    rounded.model = copy.deepcopy(encoder.model)
    round_to_fp16(rounded.model, everything=True)
    return rounded, "fp16-rounded copy"


def compodiff_status() -> tuple[bool, list[str]]:
    """(are the release and its text encoder here, lines for `models check compodiff`); downloads nothing."""
    from recon_score.hub import locate

    lines = [f"source: {RELEASE} (Gu et al., TMLR 2024)"]
    ok = True
    for what, name in (
        ("release", "navervision/CompoDiff-Aesthetic"),
        ("text encoder", CompoDiffMethodConfig.text_encoder),
    ):
        info = locate(name)
        ok &= info.available
        where = info.location or info.detail or "not found"
        lines.append(f"{what}: {name}: {'here, ' + where if info.available else 'NOT here (' + where + ')'}")
    lines.append(
        "weights: given per run, --checkpoint compodiff=DIR (a folder), --set compodiff.text_encoder=DIR; "
        "the run's --encoder must be CLIP ViT-L/14 (OpenAI)"
    )
    return ok, lines
