"""Tiny randomly-initialised models of every family the project loads, built offline in seconds, each written in
the real checkpoint's on-disk format so the smoke preset exercises the real loading code (numbers meaningless).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from recon_score.runtime import seeded

# DreamSim's per-backbone input normalisation (dreamsim.constants)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def _tiny_vae(latent_channels: int, *, seed: int):
    from diffusers import AutoencoderKL

    with seeded(seed):
        # four blocks -> 8x spatial compression, as in the real Z-Image / FLUX / SD VAEs
        return AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=["DownEncoderBlock2D"] * 4,
            up_block_types=["UpDecoderBlock2D"] * 4,
            block_out_channels=[8, 16, 16, 16],
            layers_per_block=1,
            latent_channels=latent_channels,
            norm_num_groups=8,
            sample_size=64,
            scaling_factor=0.3611,  # Z-Image's values; the pipeline needs both
            shift_factor=0.1159,
        )


def _tiny_qwen3(model_class, *, seed: int, max_position_embeddings: int, **config):
    """(tokenizer trained here, a 2-layer width-32 Qwen3 `model_class` seeded with `seed`): the text tower of the
    Z-Image pipeline and the generators' smoke LLM."""
    from transformers import Qwen3Config

    from recon_score.synthetic.tokenizers import train_qwen_tokenizer

    tokenizer = train_qwen_tokenizer()
    with seeded(seed):
        model = model_class(
            Qwen3Config(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
                vocab_size=len(tokenizer),
                max_position_embeddings=max_position_embeddings,
                **config,
            )
        )
    return tokenizer, model


def _tiny_clip_text(tokenizer) -> dict:
    """A 2-layer width-32 CLIP text tower's config over `tokenizer` (the real CLIP BPE, 77 positions)."""
    return {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": 77,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def build_z_image(path: Path, *, seed: int = 0) -> Path:
    """A ZImagePipeline (Qwen3 text encoder + ZImageTransformer2DModel + AutoencoderKL) saved to `path`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    from transformers import Qwen3Model

    tokenizer, text_encoder = _tiny_qwen3(Qwen3Model, seed=seed, max_position_embeddings=1024)
    with seeded(seed):
        transformer = ZImageTransformer2DModel(
            all_patch_size=(2,),
            all_f_patch_size=(1,),
            in_channels=16,
            dim=64,
            n_layers=2,
            n_refiner_layers=1,
            n_heads=2,
            n_kv_heads=2,
            norm_eps=1e-5,
            qk_norm=True,
            cap_feat_dim=32,
            rope_theta=256.0,
            t_scale=1000.0,
            axes_dims=[16, 8, 8],
            axes_lens=[1024, 128, 128],
        )
    with torch.no_grad():  # created with torch.empty upstream: fix them so the fixture never holds NaNs
        transformer.x_pad_token.copy_(torch.ones_like(transformer.x_pad_token))
        transformer.cap_pad_token.copy_(torch.ones_like(transformer.cap_pad_token))
    vae = _tiny_vae(16, seed=seed)
    pipe = ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(path, safe_serialization=True)
    return path


def build_stable_diffusion(path: Path, *, seed: int = 0) -> Path:
    """A StableDiffusionPipeline with a real CLIP tokenizer (77-token limit, as Text2Earth-style models)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from recon_score.synthetic.tokenizers import clip_tokenizer

    tokenizer = clip_tokenizer(path / "_tokenizer_build")
    with seeded(seed):
        unet = UNet2DConditionModel(
            block_out_channels=(16, 32),
            layers_per_block=1,
            sample_size=8,
            in_channels=4,
            out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32,
            norm_num_groups=8,
            attention_head_dim=4,
        )
    with seeded(seed):
        text_encoder = CLIPTextModel(CLIPTextConfig(**_tiny_clip_text(tokenizer), projection_dim=32))
    vae = _tiny_vae(4, seed=seed)
    vae.register_to_config(shift_factor=None, scaling_factor=0.18215)
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=EulerDiscreteScheduler(
            beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1
        ),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(path, safe_serialization=True)
    import shutil

    shutil.rmtree(path / "_tokenizer_build", ignore_errors=True)
    return path


# --- open_clip -----------------------------------------------------------------------------------------------

OPEN_CLIP_TINY_CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def build_open_clip(path: Path, *, seed: int = 0) -> Path:
    """An open_clip ViT in open_clip's `local-dir:` layout, with open_clip's own (the real CLIP BPE) tokenizer."""
    import open_clip
    from safetensors.torch import save_file

    with seeded(seed):
        model = open_clip.CLIP(**OPEN_CLIP_TINY_CFG)
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "model_cfg": OPEN_CLIP_TINY_CFG,
        "preprocess_cfg": {
            "mean": list(CLIP_MEAN),
            "std": list(CLIP_STD),
            "interpolation": "bicubic",
            "resize_mode": "shortest",
        },
    }
    (path / "open_clip_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / "open_clip_model.safetensors"))
    return path


# --- DreamSim-shaped ensemble --------------------------------------------------------------------------------


def _tiny_vit(name: str, embed_dim: int, norm: str) -> dict:
    return {"name": name, "patch_size": 32, "embed_dim": embed_dim, "depth": 2, "num_heads": 2, "norm": norm}


DREAMSIM_TINY_CFG = {
    # same structure as DreamSim's ensemble: three ViT backbones, each with its own normalisation, features
    # concatenated, then DreamSim's embedding normalisation (centre, L2); 224x224 bicubic squash.
    "img_size": 224,
    "backbones": [
        _tiny_vit("dino_like", 24, "imagenet"),
        _tiny_vit("clip_like", 16, "clip"),
        _tiny_vit("open_clip_like", 16, "clip"),
    ],
}


class TinyDreamSim(torch.nn.Module):
    """DreamSim's `PerceptualModel.embed` contract on tiny random ViTs: (B, 3, 224, 224) in [0, 1] -> (B, D)."""

    def __init__(self, config: dict):
        super().__init__()
        from timm.models.vision_transformer import VisionTransformer

        self.config = config
        self.backbones = torch.nn.ModuleList()
        means, stds = [], []
        for b in config["backbones"]:
            self.backbones.append(
                VisionTransformer(
                    img_size=config["img_size"],
                    patch_size=b["patch_size"],
                    embed_dim=b["embed_dim"],
                    depth=b["depth"],
                    num_heads=b["num_heads"],
                    num_classes=0,
                )
            )
            mean, std = (IMAGENET_MEAN, IMAGENET_STD) if b["norm"] == "imagenet" else (CLIP_MEAN, CLIP_STD)
            means.append(torch.tensor(mean).view(1, 3, 1, 1))
            stds.append(torch.tensor(std).view(1, 3, 1, 1))
        self.register_buffer("means", torch.stack(means), persistent=False)
        self.register_buffer("stds", torch.stack(stds), persistent=False)

    @property
    def embed_dim(self) -> int:
        return sum(b["embed_dim"] for b in self.config["backbones"])

    def embed(self, img: torch.Tensor) -> torch.Tensor:
        return self.embed_and_patch_tokens(img)[0]

    def embed_and_patch_tokens(
        self, img: torch.Tensor
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, tuple]]]:
        """`embed(img)` and each backbone's last-layer tokens (B, prefix + rows*cols, D) with its (rows, cols)
        patch grid, from one forward pass (timm's forward is forward_features, then forward_head)."""
        from dreamsim.model import normalize_embedding

        feats, towers = [], []
        for i, bb in enumerate(self.backbones):
            tokens = bb.forward_features((img - self.means[i]) / self.stds[i])
            feats.append(bb.forward_head(tokens))
            towers.append((tokens, tuple(bb.patch_embed.grid_size)))
        return normalize_embedding(torch.cat(feats, dim=-1)), towers

    @classmethod
    def from_dir(cls, path: Path) -> TinyDreamSim:
        from safetensors.torch import load_file

        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        model = cls(config)
        model.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
        return model.eval().requires_grad_(False)


def build_dreamsim(path: Path, *, seed: int = 0) -> Path:
    from safetensors.torch import save_file

    with seeded(seed):
        model = TinyDreamSim(DREAMSIM_TINY_CFG)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(DREAMSIM_TINY_CFG, indent=2), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


# --- transformers vision-language / vision / VLM --------------------------------------------------------------


def build_hf_clip(path: Path, *, seed: int = 0) -> Path:
    """A transformers CLIPModel + CLIPProcessor (real CLIP tokenizer) in a plain `save_pretrained` folder."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from recon_score.synthetic.tokenizers import clip_tokenizer

    tokenizer = clip_tokenizer(path / "_tokenizer_build")
    with seeded(seed):
        config = CLIPConfig(
            text_config=_tiny_clip_text(tokenizer),
            vision_config={
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "image_size": 64,
                "patch_size": 16,
            },
            projection_dim=32,
        )
        model = CLIPModel(config)
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64}),
        tokenizer=tokenizer,
    )
    model.save_pretrained(path, safe_serialization=True)
    processor.save_pretrained(path)
    import shutil

    shutil.rmtree(path / "_tokenizer_build", ignore_errors=True)
    return path


def build_hf_dinov2(path: Path, *, seed: int = 0) -> Path:
    """A transformers Dinov2Model + image processor (vision-only encoder, CLS pooling)."""
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    with seeded(seed):
        model = Dinov2Model(
            Dinov2Config(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                image_size=56,
                patch_size=14,
            )
        )
    model.save_pretrained(path, safe_serialization=True)
    BitImageProcessor(
        size={"shortest_edge": 64},
        crop_size={"height": 56, "width": 56},
        do_center_crop=True,
        image_mean=list(IMAGENET_MEAN),
        image_std=list(IMAGENET_STD),
    ).save_pretrained(path)
    return path


def build_qwen3_vl(path: Path, *, seed: int = 0) -> Path:
    """A Qwen3-VL (AutoModelForImageTextToText) with a tokenizer trained here and a small-pixel processor."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from recon_score.synthetic.tokenizers import (
        generation_ids,
        qwen3_vl_processor,
        train_qwen_tokenizer,
        vision_token_ids,
    )

    tokenizer = train_qwen_tokenizer()
    with seeded(seed):
        config = Qwen3VLConfig(
            text_config={
                "vocab_size": len(tokenizer),
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "max_position_embeddings": 2048,
                "rope_scaling": {
                    "rope_type": "default",
                    "mrope_section": [2, 3, 3],
                    "mrope_interleaved": True,
                },
                "tie_word_embeddings": True,
            },
            vision_config={
                "depth": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "out_hidden_size": 32,
                "num_position_embeddings": 64,
                "deepstack_visual_indexes": [1],
            },
            **vision_token_ids(tokenizer),
            tie_word_embeddings=True,
        )
        model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.update(**generation_ids(tokenizer))
    model.save_pretrained(path, safe_serialization=True)
    pixels = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}
    qwen3_vl_processor(tokenizer, patch_size=14, **pixels).save_pretrained(path)
    return path


def build_qwen3_text(path: Path, *, seed: int = 0) -> Path:
    """A Qwen3 causal LM (text only) with a tokenizer trained here: the generators' smoke LLM."""
    from transformers import Qwen3ForCausalLM

    from recon_score.synthetic.tokenizers import generation_ids

    tokenizer, model = _tiny_qwen3(
        Qwen3ForCausalLM, seed=seed, max_position_embeddings=2048, tie_word_embeddings=True
    )
    model.generation_config.update(**generation_ids(tokenizer))
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path
