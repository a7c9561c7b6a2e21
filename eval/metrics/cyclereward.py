"""CycleReward (Bahng, Chan, Durand & Isola, ICCV 2025): a BLIP image-text reward model trained on cycle-consistency
preferences, ported onto transformers' BLIP modules with the release's state-dict keys loaded strictly. See
docs/metrics.md, "What each one computes", for why a port and not the `cyclereward` package."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput, image_caption_pairs
from recon_score.errors import ModelNotAvailableError, ReconScoreError

MODEL_TYPES = ("CycleReward-Combo", "CycleReward-I2T", "CycleReward-T2I")
RELEASE_URL = "https://github.com/hjbahng/cyclereward/releases/download/v1.0.0"
TOKENIZER = "google-bert/bert-base-uncased"
MAX_LENGTH = 128
IMAGE_SIZE = 224
BLIP_MED_CONFIG = {  # BLIP's configs/med_config.json, which the release's med_config.json is
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "max_position_embeddings": 512,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "vocab_size": 30524,
    "pad_token_id": 0,
}
WEIGHTS = ("released", "smoke", "shapes")


@dataclass(frozen=True)
class CycleRewardSize:
    vision_width: int = 1024  # BLIP ViT-L/16
    vision_depth: int = 24
    vision_heads: int = 16
    med: dict = field(default_factory=lambda: dict(BLIP_MED_CONFIG))


SMOKE_SIZE = CycleRewardSize(
    64,
    2,
    4,
    {**BLIP_MED_CONFIG, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    | {"intermediate_size": 128},
)

# the package's key -> this module's key (BLIP's timm-style ViT names -> transformers' Blip names)
_VISION = [
    (r"cls_token$", "embeddings.class_embedding"),
    (r"pos_embed$", "embeddings.position_embedding"),
    (r"patch_embed\.proj\.", "embeddings.patch_embedding."),
    (r"blocks\.(\d+)\.norm1\.", r"encoder.layers.\1.layer_norm1."),
    (r"blocks\.(\d+)\.norm2\.", r"encoder.layers.\1.layer_norm2."),
    (r"blocks\.(\d+)\.attn\.qkv\.", r"encoder.layers.\1.self_attn.qkv."),
    (r"blocks\.(\d+)\.attn\.proj\.", r"encoder.layers.\1.self_attn.projection."),
    (r"blocks\.(\d+)\.mlp\.", r"encoder.layers.\1.mlp."),
    (r"norm\.", "post_layernorm."),
]
_POSITION_IDS = "blip.text_encoder.embeddings.position_ids"  # a persistent arange buffer in BLIP's med.py


def package_key_to_port(key: str) -> str:
    """One key of the package's `CycleReward.state_dict()` -> this module's name for the same tensor."""
    if key.startswith("blip.visual_encoder."):
        rest = key[len("blip.visual_encoder.") :]
        for pattern, repl in _VISION:
            if re.match(pattern, rest):
                return "visual." + re.sub(pattern, repl, rest, count=1)
        return "unmapped." + key
    for old, new in (
        ("blip.text_encoder.", "text."),
        ("blip.vision_proj.", "vision_proj."),
        ("blip.text_proj.", "text_proj."),
    ):
        if key.startswith(old):
            return new + key[len(old) :]
    return key if key.startswith("mlp.") else "unmapped." + key


def convert_checkpoint(state: dict) -> dict:
    """The release's state dict in this module's names; the derived position-id buffer is checked and dropped."""
    import torch

    out = {}
    for key, value in state.items():
        if key == _POSITION_IDS:
            if not torch.equal(value.flatten().long(), torch.arange(value.numel())):
                raise ReconScoreError(f"{key} is not 0..{value.numel() - 1}: not a CycleReward checkpoint")
            continue
        out[package_key_to_port(key)] = value
    return out


def build_model(size: CycleRewardSize, *, meta: bool = False):
    """BLIP ViT + BLIP BERT (cross-attention) + the reward MLP, as transformers modules; on the meta device if
    `meta` (weights to be loaded or materialised)."""
    import torch
    from transformers import BlipTextConfig, BlipVisionConfig, BlipVisionModel
    from transformers.models.blip.modeling_blip_text import BlipTextModel

    med = size.med
    vision = BlipVisionConfig(
        hidden_size=size.vision_width,
        intermediate_size=4 * size.vision_width,
        num_hidden_layers=size.vision_depth,
        num_attention_heads=size.vision_heads,
        image_size=IMAGE_SIZE,
        patch_size=16,
        layer_norm_eps=1e-6,  # BLIP's ViT: partial(nn.LayerNorm, eps=1e-6)
        hidden_act="gelu",
    )
    # med_config.json's keys are BlipTextConfig's own names
    text = BlipTextConfig(**med, encoder_hidden_size=size.vision_width, bos_token_id=None, sep_token_id=None)

    class CycleRewardModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = BlipVisionModel(vision)
            self.text = BlipTextModel(text, add_pooling_layer=False)
            self.vision_proj = torch.nn.Linear(size.vision_width, 256)  # unused by the score; in the release
            self.text_proj = torch.nn.Linear(med["hidden_size"], 256)
            self.mlp = RewardHead(med["hidden_size"])

        def forward(self, pixel_values, input_ids, attention_mask):
            image = self.visual(pixel_values=pixel_values).last_hidden_state
            ones = torch.ones(image.shape[:-1], dtype=torch.long, device=image.device)
            hidden = self.text(
                input_ids=input_ids,
                attention_mask=attention_mask,
                encoder_hidden_states=image,
                encoder_attention_mask=ones,
                is_decoder=False,
            ).last_hidden_state
            return self.mlp(hidden[:, 0, :].float())[:, 0]

    class RewardHead(torch.nn.Module):
        def __init__(self, width: int):
            super().__init__()
            dims = [width, 1024, 128, 64, 16, 1]
            layers: list = []
            for a, b in itertools.pairwise(dims):
                layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
            self.layers = torch.nn.Sequential(*layers[:-1])

        def forward(self, x):
            return self.layers(x)

    if meta:
        with torch.device("meta"):
            return CycleRewardModel()
    return CycleRewardModel()


def restore_buffers(model, device) -> None:
    """The text position ids are a non-persistent buffer: recreate it after a meta-device build."""
    import torch

    emb = model.text.embeddings
    emb.position_ids = torch.arange(emb.position_embeddings.num_embeddings, device=device).expand((1, -1))


def preprocess():
    """The authors' `_transform(224)`: bicubic shortest-side resize, centre crop, CLIP mean/std."""
    from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Normalize, Resize, ToTensor

    return Compose(
        [
            Resize(IMAGE_SIZE, interpolation=InterpolationMode.BICUBIC),
            CenterCrop(IMAGE_SIZE),
            lambda im: im.convert("RGB"),
            ToTensor(),
            Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
        ]
    )


def blip_tokenizer(path: str | Path):
    """BERT's tokenizer with BLIP's two added tokens ([DEC] as BOS, [ENC]): 30524 ids for bert-base-uncased."""
    from transformers import BertTokenizer

    tok = BertTokenizer.from_pretrained(str(path))
    tok.add_special_tokens({"bos_token": "[DEC]"})
    tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tok


def smoke_tokenizer(folder: Path, vocab_size: int):
    """An offline WordPiece vocabulary (specials, characters, ##characters) padded to `vocab_size` - 2."""
    import string

    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    vocab += [f"[unused{i}]" for i in range(vocab_size - 2 - len(vocab))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return blip_tokenizer(folder)


def find_checkpoint(model_type: str, checkpoint: str | None) -> Path:
    from recon_score.paths import weights_root

    path = (
        Path(checkpoint).expanduser() if checkpoint else weights_root() / "cyclereward" / f"{model_type}.pth"
    )
    if not path.is_file():
        raise ModelNotAvailableError(
            model_type,
            searched=[str(path)],
            reason="checkpoint file not found",
            fix=f"Download {RELEASE_URL}/{model_type}.pth (and {RELEASE_URL}/med_config.json) into "
            f"{path.parent}, or pass checkpoint=/path/to/{model_type}.pth.",
        )
    return path


class CycleReward(Metric):
    token_limit = MAX_LENGTH

    def __init__(
        self,
        *,
        model_type: str = "CycleReward-Combo",
        checkpoint: str | None = None,
        tokenizer: str = TOKENIZER,
        weights: str = "released",
        device: str | None = None,
        batch_size: int = 8,
    ):
        """`checkpoint`: the authors' CycleReward-*.pth (default RECONSCORE_WEIGHTS/cyclereward/<model_type>.pth,
        with med_config.json beside it if present); `weights` "smoke" (tiny) / "shapes" (full size) build random
        weights and an offline character vocabulary instead."""
        if model_type not in MODEL_TYPES:
            raise ReconScoreError(f"model_type must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
        if weights not in WEIGHTS:
            raise ReconScoreError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
        self.model_type, self.checkpoint, self.tokenizer_name = model_type, checkpoint, tokenizer
        self.weights, self.device, self.batch_size = weights, device, max(1, batch_size)
        self._model = self._tokenizer = None
        self._source = ""

    def _load(self) -> None:
        import tempfile

        from recon_score.runtime import resolve_device

        self.device = resolve_device(self.device)
        if self.weights == "released":
            self._load_release()
        else:
            size = SMOKE_SIZE if self.weights == "smoke" else CycleRewardSize()
            folder = Path(tempfile.mkdtemp(prefix="cyclereward-vocab-"))
            self._tokenizer = smoke_tokenizer(folder, size.med["vocab_size"])
            self._model = self._random(size)
            self._source = (
                f"{self.weights}: CycleReward architecture, random weights (numbers are meaningless)"
            )
        self._model = self._model.to(self.device).eval().requires_grad_(False)

    def _random(self, size: CycleRewardSize):
        import torch

        if self.weights == "smoke":
            from recon_score.runtime import seeded

            with seeded(0):
                return build_model(size)
        from recon_score.synthetic.shapes import materialize

        model = materialize(build_model(size, meta=True), device=self.device, dtype=torch.float32)
        restore_buffers(model, self.device)
        return model

    def _load_release(self) -> None:
        from recon_score.checkpoints import load_strict, read_checkpoint
        from recon_score.hub import resolve_model

        path = find_checkpoint(self.model_type, self.checkpoint)
        med_file = path.parent / "med_config.json"
        med = dict(BLIP_MED_CONFIG)
        if med_file.is_file():
            given = json.loads(med_file.read_text(encoding="utf-8"))
            med.update({k: given[k] for k in BLIP_MED_CONFIG if k in given})
        state = convert_checkpoint(read_checkpoint(path, self.model_type))
        tok_dir = resolve_model(
            self.tokenizer_name, kind="BERT tokenizer (bert-base-uncased)", option="tokenizer="
        )
        self._tokenizer = blip_tokenizer(tok_dir.path)
        model = load_strict(
            build_model(CycleRewardSize(med=med), meta=True), state, f"{path} ({self.model_type})"
        )
        restore_buffers(model, "cpu")
        self._model, self._source = model, str(path)

    def score(self, batch: CaptionBatch) -> MetricOutput:
        import torch

        if self._model is None:
            self._load()
        loaded = batch.loaded_images()
        pairs, inverse, errors = image_caption_pairs(loaded, batch.candidates, skip_failed_images=True)
        prep = preprocess()
        rewards, lengths = [], []
        for s in range(0, len(pairs), self.batch_size):
            chunk = pairs[s : s + self.batch_size]
            pixels = torch.stack([prep(im) for im, _ in chunk]).to(self.device)
            caps = [c for _, c in chunk]
            tok = self._tokenizer(
                caps, padding="max_length", truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
            )
            lengths += [len(ids) for ids in self._tokenizer(caps)["input_ids"]]
            with torch.inference_mode():
                out = self._model(pixels, tok.input_ids.to(self.device), tok.attention_mask.to(self.device))
            rewards += out.double().cpu().tolist()
        values = np.array([rewards[k] if k >= 0 else np.nan for k in inverse], dtype=float)
        truncated = [bool(k >= 0 and lengths[k] > MAX_LENGTH) for k in inverse]
        extra: dict = {"cyclereward_truncated": truncated}
        if any(errors):
            extra["cyclereward_error"] = errors
        info = {
            "distinct_pairs": len(pairs),
            "rows_over_context": sum(truncated),
            "context_length": MAX_LENGTH,
        }
        return MetricOutput(values, extra=extra, info=info)

    def config(self) -> dict:
        return {
            "model_type": self.model_type,
            "weights": self.weights,
            "checkpoint": self._source or self.checkpoint,
            "tokenizer": self.tokenizer_name
            if self.weights == "released"
            else "offline character vocabulary",
            "max_length": MAX_LENGTH,
            "device": str(self.device),
        }
