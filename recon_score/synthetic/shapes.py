"""Full-size model shapes with random weights: the `shapes:` model names (speed needs no trained weights).

Built on the meta device, then allocated on the target device in the target dtype; `NAME@SCALE` scales every
width. What each name builds and where its config comes from: docs/performance.md, "`shapes:` models".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from recon_score.paths import WeightsLocation, cache_root
from recon_score.synthetic import SyntheticName

SHAPES_VERSION = 1
MARKER = "shapes.json"
SHAPES_NOTE = "shapes: published sizes, random weights: speed is real, scores are meaningless"

# Parameter counts the configs must reproduce (tests check within 2% on the meta device).
PUBLISHED_PARAMS = {
    "z-image/transformer": 6_154_908_736,  # diffusers' ZImageTransformer2DModel defaults
    "z-image/text_encoder": 4_020_000_000,  # Qwen3-4B model card: 4.0B ("4.02B" on the hub page)
    "z-image/vae": 83_800_000,  # FLUX.1 VAE: 84M
    "qwen3-vl-8b": 8_770_000_000,  # Qwen3-VL-8B-Instruct hub page: 8.77B
    "dreamsim/tower": 86_000_000,  # each ViT-B/16 tower: 86M (ViT paper)
    "open_clip/ViT-B-32-quickgelu": 151_300_000,  # OpenAI CLIP ViT-B/32: 151M
    "open_clip/ViT-L-14-quickgelu": 427_600_000,  # OpenAI CLIP ViT-L/14: 428M
}


def _heads(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def _width(x: int, scale: float, multiple: int) -> int:
    return max(multiple, round(x * scale / multiple) * multiple)


# --- configs (one place) ---------------------------------------------------------------------------------------


def qwen3_4b_config(scale: float = 1.0) -> dict:
    kv = _heads(8, scale)
    return {
        "hidden_size": _width(2560, scale, 64),
        "intermediate_size": _width(9728, scale, 64),
        "num_hidden_layers": 36,
        "num_attention_heads": 4 * kv,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "attention_bias": False,
    }


def z_image_dit_config(scale: float = 1.0) -> dict:
    heads = _heads(30, scale)  # head dim stays 128 = sum(axes_dims)
    return {
        "dim": heads * 128,
        "n_heads": heads,
        "n_kv_heads": heads,
        "cap_feat_dim": qwen3_4b_config(scale)["hidden_size"],
    }  # everything else: diffusers' defaults


def flux_vae_config(scale: float = 1.0) -> dict:
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [_width(c, scale, 32) for c in (128, 256, 512, 512)],
        "layers_per_block": 2,
        "act_fn": "silu",
        "latent_channels": 16,
        "norm_num_groups": 32,
        "sample_size": 1024,
        "scaling_factor": 0.3611,
        "shift_factor": 0.1159,
        "use_quant_conv": False,
        "use_post_quant_conv": False,
        "force_upcast": True,
        "mid_block_add_attention": True,
    }


# Qwen3-VL's placeholder ids (tokenizers.vision_token_ids gives a trained tokenizer's)
QWEN3_VL_TOKEN_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}


def qwen3_vl_8b_config(scale: float = 1.0, *, token_ids: dict[str, int] | None = None) -> dict:
    kv, vheads = _heads(8, scale), _heads(16, scale)
    text_hidden = _width(4096, scale, 64)
    return {
        "text_config": {
            "hidden_size": text_hidden,
            "intermediate_size": _width(12288, scale, 64),
            "num_hidden_layers": 36,
            "num_attention_heads": 4 * kv,
            "num_key_value_heads": kv,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "rope_theta": 5000000,
            "rope_scaling": {
                "rope_type": "default",
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "depth": 27,
            "hidden_size": vheads * 72,
            "intermediate_size": _width(4304, scale, 16),
            "num_heads": vheads,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
            "out_hidden_size": text_hidden,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [8, 16, 24],
            "hidden_act": "gelu_pytorch_tanh",
        },
        **(token_ids or QWEN3_VL_TOKEN_IDS),
        "tie_word_embeddings": False,
    }


def dreamsim_tower_config(scale: float = 1.0) -> dict:
    heads = _heads(12, scale)  # ViT-B/16: 12 heads of 64
    return {"embed_dim": heads * 64, "num_heads": heads, "proj_dim": _width(512, scale, 16), "scale": scale}


# --- building on the meta device -------------------------------------------------------------------------------


def empty_weights():
    """Parameters on the meta device; buffers (rotary tables, masks) stay real: they are small and computed."""
    from accelerate import init_empty_weights

    return init_empty_weights(include_buffers=False)


def meta_dit(scale: float = 1.0):
    from diffusers import ZImageTransformer2DModel

    with empty_weights():
        return ZImageTransformer2DModel(**z_image_dit_config(scale))


def meta_text_encoder(scale: float = 1.0):
    from transformers import Qwen3Config, Qwen3Model

    with empty_weights():
        return Qwen3Model(Qwen3Config(**qwen3_4b_config(scale)))


def meta_vae(scale: float = 1.0):
    from diffusers import AutoencoderKL

    with empty_weights():
        return AutoencoderKL(**flux_vae_config(scale))


def meta_vlm(scale: float = 1.0, config=None):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = config if config is not None else Qwen3VLConfig(**qwen3_vl_8b_config(scale))
    with empty_weights():
        return Qwen3VLForConditionalGeneration(config)


def count_params(module: torch.nn.Module) -> int:
    """Distinct parameters (tied ones once), as the hub pages count them."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


def materialize(module: torch.nn.Module, *, device, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """Allocate every meta parameter on `device` in `dtype` (floating ones) and fill it randomly (matrices
    N(0, 1/fan_in), so activations stay finite through deep stacks); move buffers. Tied parameters stay tied."""
    device = torch.device(device)
    gen = torch.Generator(device).manual_seed(seed)
    done: dict[int, torch.nn.Parameter] = {}
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) in done:
                mod._parameters[name] = done[id(p)]
                continue
            kind = dtype if p.is_floating_point() else p.dtype
            if p.is_meta:
                t = torch.empty(p.shape, device=device, dtype=kind)
                _fill(t, name, gen)
            else:
                t = p.detach().to(device, kind)
            new = torch.nn.Parameter(t, requires_grad=False)
            done[id(p)] = mod._parameters[name] = new
        for name, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[name] = (
                    torch.zeros(b.shape, device=device, dtype=b.dtype) if b.is_meta else b.to(device)
                )
    # transformers ties after init, as from_pretrained
    if callable(getattr(type(module), "tie_weights", None)):
        module.tie_weights()
    return module.eval().requires_grad_(False)


@torch.no_grad()
def _fill(t: torch.Tensor, name: str, gen: torch.Generator) -> None:
    if not t.is_floating_point():
        t.zero_()
    elif t.ndim >= 2:
        fan_in = max(1, t[0].numel())
        t.normal_(0.0, fan_in**-0.5, generator=gen)
    elif "bias" in name:
        t.zero_()
    else:
        t.fill_(1.0)


# --- folders resolvable by the real loaders -------------------------------------------------------------------


def shapes_root() -> Path:
    return cache_root() / "shapes" / f"v{SHAPES_VERSION}"


def resolve(name: SyntheticName) -> dict:
    """The registry's entry point for `shapes:FAMILY[@SCALE]`: its folder (configs and tokenizer, no weights)
    and `build`, which makes the model from that folder on the target device."""
    from functools import partial

    path = ensure_shapes(name.family, name.scale)
    builder = {"z-image": build_pipeline, "qwen3-vl": build_vlm}[name.family]
    return {
        "path": path,
        "revision": f"shapes:v{SHAPES_VERSION}",
        "build": partial(builder, path),
        "source": SHAPES_NOTE,
    }


def check(name: SyntheticName) -> WeightsLocation:
    return WeightsLocation(
        True, source="published sizes, random weights, built on the target device (no download)"
    )


def ensure_shapes(family: str, scale: float = 1.0) -> Path:
    """Folder for `shapes:FAMILY[@SCALE]` (configs + tokenizer/processor, no weights), written once."""
    final = shapes_root() / f"{family}@{scale:g}"
    if (final / MARKER).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{family}-", dir=final.parent))
    try:
        _WRITERS[family](tmp, scale)
        marker = {"family": family, "scale": scale, "version": SHAPES_VERSION, "note": SHAPES_NOTE}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:  # another process wrote it first
            if not (final / MARKER).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_z_image(path: Path, scale: float) -> None:
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler

    from recon_score.synthetic.tokenizers import train_qwen_tokenizer

    train_qwen_tokenizer().save_pretrained(path / "tokenizer")
    FlowMatchEulerDiscreteScheduler(shift=3.0).save_pretrained(path / "scheduler")
    meta_dit(scale).save_config(path / "transformer")
    meta_vae(scale).save_config(path / "vae")
    meta_text_encoder(scale).config.save_pretrained(path / "text_encoder")
    index = {
        "_class_name": "ZImagePipeline",
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen3Model"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "ZImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def _write_vlm(path: Path, scale: float) -> None:
    from transformers import Qwen3VLConfig

    from recon_score.synthetic.tokenizers import (
        generation_ids,
        qwen3_vl_processor,
        train_qwen_tokenizer,
        vision_token_ids,
    )

    tok = train_qwen_tokenizer()
    Qwen3VLConfig(**qwen3_vl_8b_config(scale, token_ids=vision_token_ids(tok))).save_pretrained(path)
    # Qwen3-VL-8B-Instruct's preprocessor_config.json: patch 16, merge 2, 256x256 .. 4096x4096 pixels, mean/std 0.5
    qwen3_vl_processor(
        tok, patch_size=16, min_pixels=65536, max_pixels=16777216, image_mean=[0.5] * 3, image_std=[0.5] * 3
    ).save_pretrained(path)
    (path / "generation_config.json").write_text(json.dumps(generation_ids(tok)), encoding="utf-8")


_WRITERS = {"z-image": _write_z_image, "qwen3-vl": _write_vlm}


def build_pipeline(path: Path, *, device, dtype: torch.dtype, seed: int = 0):
    """A ZImagePipeline from a shapes folder: components built on meta, materialised on `device`."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        ZImagePipeline,
        ZImageTransformer2DModel,
    )
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    path = Path(path)
    with empty_weights():
        transformer = ZImageTransformer2DModel.from_config(
            ZImageTransformer2DModel.load_config(path / "transformer")
        )
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(path / "vae"))
        text_encoder = Qwen3Model(Qwen3Config.from_pretrained(path / "text_encoder"))
    for i, m in enumerate((transformer, vae, text_encoder)):
        materialize(m, device=device, dtype=dtype, seed=seed + i)
    return ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=AutoTokenizer.from_pretrained(path / "tokenizer"),
        transformer=transformer,
    )


def build_vlm(path: Path, *, device, dtype: torch.dtype, seed: int = 0):
    """Qwen3-VL from a shapes folder's config.json, materialised on `device`."""
    from transformers import AutoConfig, GenerationConfig

    path = Path(path)
    model = materialize(
        meta_vlm(config=AutoConfig.from_pretrained(path)), device=device, dtype=dtype, seed=seed
    )
    model.generation_config = GenerationConfig.from_pretrained(path)
    return model


# --- encoders --------------------------------------------------------------------------------------------------


def meta_dreamsim_ensemble(scale: float = 1.0):
    """dreamsim's own PerceptualModel (ensemble settings) + its LoRA, every tower built from dreamsim's ViT code
    with random weights instead of the release checkpoints."""
    from dreamsim.config import dreamsim_args
    from dreamsim.feature_extraction import extractor as ext
    from dreamsim.model import PerceptualModel
    from peft import LoraConfig, get_peft_model

    cfg = dreamsim_tower_config(scale)
    original = ext.ViTExtractor.create_model
    ext.ViTExtractor.create_model = staticmethod(
        lambda model_type, load_dir="": _dreamsim_tower(model_type, cfg)
    )
    try:
        with empty_weights():
            model = PerceptualModel(
                **dreamsim_args["model_config"]["ensemble"], device="meta", load_dir="", normalize_embeds=True
            )
            # configs/train_ensemble_model_lora.yaml (the released ensemble): r 16, alpha 8, on every qkv
            model = get_peft_model(
                model, LoraConfig(r=16, lora_alpha=8, lora_dropout=0.3, bias="none", target_modules=["qkv"])
            )
    finally:
        ext.ViTExtractor.create_model = original
    return model


def _dreamsim_tower(model_type: str, cfg: dict):
    """Same modules as dreamsim's loaders (load_clip_as_dino / load_open_clip_as_dino / torch-hub DINO)."""
    from functools import partial

    from dreamsim.feature_extraction.load_clip_as_dino import QuickGELU
    from dreamsim.feature_extraction.vision_transformer import DINOHead, VisionTransformer

    model = VisionTransformer(
        patch_size=16,
        embed_dim=cfg["embed_dim"],
        depth=12,
        num_heads=cfg["num_heads"],
        mlp_ratio=4,
        qkv_bias=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
    )
    if model_type == "dino_vitb16":
        s = cfg["scale"]
        head = DINOHead(
            cfg["embed_dim"],
            _width(2048, s, 16),
            hidden_dim=_width(2048, s, 16),
            bottleneck_dim=_width(256, s, 16),
        )
        return model, head
    model.pos_drop = torch.nn.LayerNorm(cfg["embed_dim"])
    if model_type == "clip_vitb16":
        for blk in model.blocks:
            blk.mlp.act = QuickGELU()
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.eps = 1e-5
    return model, torch.nn.Parameter(torch.empty(cfg["embed_dim"], cfg["proj_dim"], device="meta"))


def build_dreamsim_ensemble(scale: float, *, device, dtype: torch.dtype = torch.float32, seed: int = 0):
    model = materialize(meta_dreamsim_ensemble(scale), device=device, dtype=dtype, seed=seed)
    inner = model.base_model.model
    inner.device = str(device)
    for extractor in inner.extractor_list:
        extractor.device = str(device)
    return model


def meta_open_clip(arch: str):
    import open_clip

    with empty_weights():
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=None, device="meta")
    return model, preprocess


def build_open_clip(arch: str, *, device, dtype: torch.dtype = torch.float32, seed: int = 0):
    """An open_clip architecture (e.g. ViT-L-14-quickgelu) with random weights; its preprocessing is the one
    its `visual.preprocess_cfg` names, as for a loaded checkpoint."""
    model, _ = meta_open_clip(arch)
    materialize(model, device=device, dtype=dtype, seed=seed)
    restore_causal_mask(model, device)
    return model


def restore_causal_mask(model: torch.nn.Module, device) -> None:
    """open_clip's causal text mask, made again on `device`: it is a non-persistent buffer, lost on the meta
    device and in no state dict."""
    if getattr(model, "attn_mask", None) is not None:
        n = model.attn_mask.shape[0]
        model.attn_mask = torch.full((n, n), float("-inf"), device=device).triu_(1)
