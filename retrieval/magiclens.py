"""MagicLens (Zhang et al., ICML 2024; google-deepmind/magiclens, Apache-2.0) in PyTorch from its released
checkpoints, with no JAX, Flax or scenic at run time: open_clip's CLIP towers, the authors' fusion head and pixel
pipeline. See docs/retrieval.md, "Learned methods"."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recon_score.errors import InputError
from retrieval.flax_checkpoint import flatten, read_flax_pickle

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
RELEASES = {  # the authors' two checkpoints (model.py MagicLensConfig): the fusion head over which CLIP
    "base": "magic_lens_clip_base.pkl (CLIP ViT-B/16, 512-d)",
    "large": "magic_lens_clip_large.pkl (CLIP ViT-L/14, 768-d)",
}


@dataclass(frozen=True)
class MagicLensConfig:
    """Everything the checkpoint's shapes determine (read by `config_from_params`)."""

    embed_dim: int
    head_layers: int
    head_heads: int
    head_ff: int
    pool_heads: int
    pool_width: int
    query_tokens: int
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    vision_head_width: int
    text_width: int
    text_layers: int
    text_heads: int
    context_length: int
    vocab_size: int

    def open_clip_cfg(self) -> dict:
        return {
            "embed_dim": self.embed_dim,
            "quick_gelu": True,
            "vision_cfg": {
                "image_size": self.image_size,
                "layers": self.vision_layers,
                "width": self.vision_width,
                "patch_size": self.patch_size,
                "head_width": self.vision_head_width,
            },
            "text_cfg": {
                "context_length": self.context_length,
                "vocab_size": self.vocab_size,
                "width": self.text_width,
                "heads": self.text_heads,
                "layers": self.text_layers,
            },
        }


# -- the fusion head, from layers.py ------------------------------------------------------------------------
class PlusOneLayerNorm(nn.Module):
    """layers.py ``LayerNorm``: (x - mean) / sqrt(var + eps) * (1 + scale) + bias."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.zeros(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).square().mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * (1 + self.scale) + self.bias


class Attention(nn.Module):
    """layers.py ``DotProductAttention``: per-head projections (D, N, H), capped logits, optional per-dim
    query scale."""

    def __init__(self, dim: int, width: int, heads: int, per_dim_scale: bool):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        shape = (dim, heads, self.head_dim)
        self.query_w, self.key_w, self.value_w, self.post_w = (
            nn.Parameter(torch.zeros(shape)) for _ in range(4)
        )
        self.query_b, self.key_b, self.value_b = (
            nn.Parameter(torch.zeros(heads, self.head_dim)) for _ in range(3)
        )
        self.post_b = nn.Parameter(torch.zeros(dim))
        self.per_dim_scale = nn.Parameter(torch.zeros(self.head_dim)) if per_dim_scale else None

    def forward(self, q: Tensor, kv: Tensor) -> Tensor:
        query = torch.einsum("btd,dnh->btnh", q, self.query_w) + self.query_b
        key = torch.einsum("bsd,dnh->bsnh", kv, self.key_w) + self.key_b
        value = torch.einsum("bsd,dnh->bsnh", kv, self.value_w) + self.value_b
        if self.per_dim_scale is not None:
            query = query * (1.442695041 / self.head_dim**0.5 * F.softplus(self.per_dim_scale))
        else:
            query = query * self.head_dim**-0.5
        logits = torch.einsum("btnh,bsnh->bnts", query, key)
        logits = 50.0 * torch.tanh(logits / 50.0)
        encoded = torch.einsum("bnts,bsnh->btnh", logits.softmax(-1), value)
        return torch.einsum("btnh,dnh->btd", encoded, self.post_w) + self.post_b


class FeedForward(nn.Module):
    """layers.py ``TransformerFFN``: LN, Dense + ReLU, Dense, residual."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = PlusOneLayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.relu(self.fc1(self.norm(x)))) + x


class FusionLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm = PlusOneLayerNorm(dim)
        self.attention = Attention(dim, dim, heads, per_dim_scale=False)
        self.ffn = FeedForward(dim, hidden)

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(x)
        return self.ffn(self.attention(h, h) + x)


class FusionHead(nn.Module):
    """``multimodal_encoder`` (StackedTransformer) + ``contrastive_multimodal_pooler`` (AttenTokenPoolingLayer)."""

    def __init__(self, cfg: MagicLensConfig):
        super().__init__()
        d = cfg.embed_dim
        self.layers = nn.ModuleList(
            FusionLayer(d, cfg.head_heads, cfg.head_ff) for _ in range(cfg.head_layers)
        )
        self.pool_query = nn.Parameter(torch.zeros(cfg.query_tokens, d))
        self.pool_attention = Attention(d, cfg.pool_width, cfg.pool_heads, per_dim_scale=True)
        self.pool_norm = PlusOneLayerNorm(d)

    def forward(self, tokens: Tensor) -> Tensor:
        for layer in self.layers:
            tokens = layer(tokens)
        query = self.pool_query.unsqueeze(0).expand(tokens.shape[0], -1, -1)
        pooled = self.pool_norm(self.pool_attention(query, tokens))
        return pooled[:, 0]


class MagicLens(nn.Module):
    """CLIP towers (open_clip) + the fusion head; `forward(pixels, ids)` -> the unnormalised embedding."""

    def __init__(self, cfg: MagicLensConfig):
        super().__init__()
        import open_clip

        self.cfg = cfg
        self.clip = open_clip.CLIP(**cfg.open_clip_cfg())
        self.head = FusionHead(cfg)

    def forward(self, pixels: Tensor, ids: Tensor) -> Tensor:
        image = self.clip.encode_image(pixels, normalize=False)
        return self.head(torch.stack([image, self.encode_text(ids)], dim=1))

    def encode_text(self, ids: Tensor) -> Tensor:
        """open_clip's `encode_text` with scenic's TextEncoder mask: causal, and every key whose token id is 0
        masked (`make_attention_mask(text > 0, text > 0)`): id 0 is CLIP's bare "!" token as well as padding, so
        an inner "!" is invisible to the authors' model. Queries keep their unmasked keys (the start marker at
        least); their treatment does not reach the pooled end marker."""
        from open_clip.transformer import text_global_pool

        clip, length = self.clip, ids.shape[1]
        heads = clip.transformer.resblocks[0].attn.num_heads
        x = clip.token_embedding(ids) + clip.positional_embedding[:length]
        causal = torch.full((length, length), float("-inf"), device=ids.device).triu_(1)
        keys = torch.zeros(ids.shape, device=ids.device).masked_fill_(ids == 0, float("-inf"))
        mask = (causal[None] + keys[:, None, :]).repeat_interleave(heads, dim=0).to(x.dtype)
        x = clip.ln_final(clip.transformer(x, attn_mask=mask))
        x = text_global_pool(x, ids, clip.text_pool_type, eos_token_id=getattr(clip, "text_eos_id", None))
        return x @ clip.text_projection

    @staticmethod
    def normalize(embed: Tensor) -> Tensor:
        """model.py ``_normalize_embed``: float32, x / sqrt(sum x^2 + 1e-12)."""
        embed = embed.float()
        return embed / torch.sqrt((embed * embed).sum(-1, keepdim=True) + 1e-12)

    def embed(self, pixels: Tensor, ids: Tensor) -> Tensor:
        return self.normalize(self(pixels, ids))


# -- scenic/Flax parameters -> this module ------------------------------------------------------------------
def _get(params: dict[str, np.ndarray], key: str, where: str) -> np.ndarray:
    if key not in params:
        found = ", ".join(sorted(params)[:5])
        raise InputError(f"{where}: no parameter {key!r}; not a MagicLens checkpoint? (found {found}, ...)")
    return params[key]


def _count(params: dict[str, np.ndarray], prefix: str) -> int:
    n = 0
    while any(k.startswith(f"{prefix}{n}/") for k in params):
        n += 1
    return n


def config_from_params(params: dict[str, np.ndarray], where: str) -> MagicLensConfig:
    """The architecture, read from the parameter shapes of a flattened release tree (keys without 'params/')."""
    g = lambda key: _get(params, key, where)  # noqa: E731
    vis, txt = "clip/visual/transformer/resblocks_", "clip/text/transformer/resblocks_"
    conv = g("clip/visual/conv1/kernel")  # (p, p, 3, width)
    vq = g(f"{vis}0/attn/query/kernel")  # (width, heads, head_dim)
    tq = g(f"{txt}0/attn/query/kernel")
    pos = g("clip/visual/positional_embedding")
    grid = math.isqrt(pos.shape[0] - 1)
    if grid * grid + 1 != pos.shape[0]:
        raise InputError(
            f"{where}: {pos.shape[0]} visual positions is not a square grid plus the class token"
        )
    hq = g("multimodal_encoder/x_layers_0/self_attention/query/w")  # (D, N, H)
    pq = g("contrastive_multimodal_pooler/pool_attn/query/w")
    return MagicLensConfig(
        embed_dim=int(g("clip/visual/proj/kernel").shape[1]),
        head_layers=_count(params, "multimodal_encoder/x_layers_"),
        head_heads=int(hq.shape[1]),
        head_ff=int(g("multimodal_encoder/x_layers_0/ff_layer/ffn_layer1/linear/w").shape[1]),
        pool_heads=int(pq.shape[1]),
        pool_width=int(pq.shape[1] * pq.shape[2]),
        query_tokens=int(g("contrastive_multimodal_pooler/pooling_attn_query").shape[0]),
        image_size=grid * int(conv.shape[0]),
        patch_size=int(conv.shape[0]),
        vision_width=int(conv.shape[3]),
        vision_layers=_count(params, vis),
        vision_head_width=int(vq.shape[2]),
        text_width=int(tq.shape[0]),
        text_layers=_count(params, txt),
        text_heads=int(tq.shape[1]),
        context_length=int(g("clip/text/positional_embedding").shape[0]),
        vocab_size=int(g("clip/text/token_embedding/embedding").shape[0]),
    )


def _norm(g, src: str, dst: str, weight: str = "weight") -> dict[str, np.ndarray]:
    """A scenic LayerNorm (scale, bias) -> `dst.{weight}`, `dst.bias`."""
    return {f"{dst}.{weight}": g(f"{src}/scale"), f"{dst}.bias": g(f"{src}/bias")}


def _block(src: str, dst: str, g) -> dict[str, np.ndarray]:
    """One scenic ResidualAttentionBlock -> open_clip's names."""
    qkv = [g(f"{src}/attn/{n}/kernel") for n in ("query", "key", "value")]
    width = qkv[0].shape[0]
    out = g(f"{src}/attn/out/kernel")
    state = {
        f"{dst}.attn.in_proj_weight": np.concatenate([k.reshape(width, width).T for k in qkv]),
        f"{dst}.attn.in_proj_bias": np.concatenate(
            [g(f"{src}/attn/{n}/bias").reshape(width) for n in ("query", "key", "value")]
        ),
        f"{dst}.attn.out_proj.weight": out.reshape(width, width).T,
        f"{dst}.attn.out_proj.bias": g(f"{src}/attn/out/bias"),
    }
    for ln in ("ln_1", "ln_2"):
        state.update(_norm(g, f"{src}/{ln}", f"{dst}.{ln}"))
    for fc in ("c_fc", "c_proj"):
        state[f"{dst}.mlp.{fc}.weight"] = g(f"{src}/mlp/{fc}/kernel").T
        state[f"{dst}.mlp.{fc}.bias"] = g(f"{src}/mlp/{fc}/bias")
    return state


def _clip_state(cfg: MagicLensConfig, g) -> dict[str, np.ndarray]:
    state = {
        "visual.conv1.weight": g("clip/visual/conv1/kernel").transpose(3, 2, 0, 1),
        "visual.class_embedding": g("clip/visual/class_embedding"),
        "visual.positional_embedding": g("clip/visual/positional_embedding"),
        "visual.proj": g("clip/visual/proj/kernel"),
        "token_embedding.weight": g("clip/text/token_embedding/embedding"),
        "positional_embedding": g("clip/text/positional_embedding"),
        "text_projection": g("clip/text/text_projection/kernel"),
        "logit_scale": np.asarray(g("clip/logit_scale")).reshape(()),
    }
    for src, dst in (
        ("clip/visual/ln_pre", "visual.ln_pre"),
        ("clip/visual/ln_post", "visual.ln_post"),
        ("clip/text/ln_final", "ln_final"),
    ):
        state.update(_norm(g, src, dst))
    for i in range(cfg.vision_layers):
        state.update(_block(f"clip/visual/transformer/resblocks_{i}", f"visual.transformer.resblocks.{i}", g))
    for i in range(cfg.text_layers):
        state.update(_block(f"clip/text/transformer/resblocks_{i}", f"transformer.resblocks.{i}", g))
    return {f"clip.{k}": v for k, v in state.items()}


def _attention_state(src: str, dst: str, g, *, per_dim_scale: bool) -> dict[str, np.ndarray]:
    state = {f"{dst}.{n}_w": g(f"{src}/{n}/w") for n in ("query", "key", "value", "post")}
    state.update({f"{dst}.{n}_b": g(f"{src}/{n}/b") for n in ("query", "key", "value", "post")})
    if per_dim_scale:
        state[f"{dst}.per_dim_scale"] = g(f"{src}/per_dim_scale/per_dim_scale")
    return state


def _head_state(cfg: MagicLensConfig, g) -> dict[str, np.ndarray]:
    state = {}
    for i in range(cfg.head_layers):
        src, dst = f"multimodal_encoder/x_layers_{i}", f"head.layers.{i}"
        state.update(_norm(g, f"{src}/layer_norm", f"{dst}.norm", "scale"))
        state.update(_attention_state(f"{src}/self_attention", f"{dst}.attention", g, per_dim_scale=False))
        ff = f"{src}/ff_layer"
        state.update(_norm(g, f"{ff}/layer_norm", f"{dst}.ffn.norm", "scale"))
        for n in (1, 2):
            state[f"{dst}.ffn.fc{n}.weight"] = g(f"{ff}/ffn_layer{n}/linear/w").T
            state[f"{dst}.ffn.fc{n}.bias"] = g(f"{ff}/ffn_layer{n}/bias/b")
    pool = "contrastive_multimodal_pooler"
    state["head.pool_query"] = g(f"{pool}/pooling_attn_query")
    state.update(_attention_state(f"{pool}/pool_attn", "head.pool_attention", g, per_dim_scale=True))
    state.update(_norm(g, f"{pool}/pool_attn_ln", "head.pool_norm", "scale"))
    return state


def state_from_release(path: str | Path) -> tuple[MagicLensConfig, dict[str, Tensor]]:
    """(config, state dict of `MagicLens`) from a released pickle (see retrieval.flax_checkpoint); a
    parameter the mapping does not read is refused, so nothing of a release is silently dropped."""
    where = str(path)
    tree = read_flax_pickle(path)
    params = tree.get("params", tree)
    if not isinstance(params, dict):
        raise InputError(f"{where}: 'params' is a {type(params).__name__}, not a parameter tree")
    try:
        params = flatten(params)
    except InputError as err:
        raise InputError(f"{where}: {err}") from err
    cfg = config_from_params(params, where)
    seen: set[str] = set()

    def g(key: str) -> np.ndarray:
        seen.add(key)
        return _get(params, key, where)

    state = {**_clip_state(cfg, g), **_head_state(cfg, g)}
    unused = sorted(set(params) - seen)
    if unused:
        raise InputError(f"{where}: parameters this MagicLens does not use: {', '.join(unused[:5])}")
    return cfg, {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in state.items()}


# -- loading, converting -------------------------------------------------------------------------------------
def build(cfg: MagicLensConfig, state: dict[str, Tensor], where: str) -> MagicLens:
    model = MagicLens(cfg)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise InputError(f"{where} does not fit MagicLens: {err}") from err
    return model.eval().requires_grad_(False)


def load_magiclens(path: str | Path) -> MagicLens:
    """A released ``.pkl`` (read without unpickling) or a converted ``.safetensors`` (`convert`)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"MagicLens checkpoint {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
        if "magiclens_config" not in meta:
            raise InputError(
                f"{path} has no magiclens_config metadata; write it with `reconscore models convert`"
            )
        cfg = MagicLensConfig(**json.loads(meta["magiclens_config"]))
        return build(cfg, load_file(str(path)), str(path))
    return build(*state_from_release(path), str(path))


def convert(src: str | Path, dst: str | Path) -> MagicLensConfig:
    """Write a release as safetensors (state dict + the config as metadata), loadable by `load_magiclens`."""
    from safetensors.torch import save

    from recon_score.atomic_io import atomic_write_bytes
    from recon_score.run_engine import check_file_target

    dst = Path(dst)
    check_file_target(dst, inputs=[Path(src)], what="DST")  # before the release is read
    cfg, state = state_from_release(src)
    data = save(
        {k: v.contiguous() for k, v in state.items()}, metadata={"magiclens_config": json.dumps(asdict(cfg))}
    )
    atomic_write_bytes(dst, data)  # a full disk: one line naming the folder, no half-written file left
    return cfg


# -- pixels --------------------------------------------------------------------------------------------------
def _triangle_weights(n_in: int, n_out: int) -> Tensor:
    """(n_in, n_out) weights of jax.image.resize's antialiased bilinear (jax/_src/image/scale.py
    compute_weight_mat, no translation)."""
    scale = n_out / n_in
    inv = 1.0 / scale
    kernel_scale = max(inv, 1.0)
    sample = (torch.arange(n_out, dtype=torch.float64) + 0.5) * inv - 0.5
    x = (sample[None, :] - torch.arange(n_in, dtype=torch.float64)[:, None]).abs() / kernel_scale
    w = (1.0 - x).clamp(min=0.0)
    total = w.sum(0, keepdim=True)
    w = torch.where(
        total.abs() > 1000 * float(np.finfo(np.float32).eps), w / torch.where(total != 0, total, 1), 0
    )
    inside = (sample >= -0.5) & (sample <= n_in - 0.5)
    return torch.where(inside[None, :], w, 0).float()


def jax_resize(images: Tensor, size: int) -> Tensor:
    """(B, H, W, C) -> (B, size, size, C), as ``jax.image.resize(images, ..., method="bilinear")``."""
    wh = _triangle_weights(images.shape[1], size)
    ww = _triangle_weights(images.shape[2], size)
    return torch.einsum("bhwc,hy,wx->byxc", images.float(), wh, ww)


def model_pixels(images: Tensor, size: int) -> Tensor:
    """model.py ``_preprocess_images`` on (B, H, W, 3) in [0, 1]: centred square crop, resize, CLIP mean/std;
    returned channels-first for open_clip."""
    h, w = images.shape[1:3]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    x = jax_resize(images[:, top : top + side, left : left + side], size)
    x = (x - torch.tensor(CLIP_MEAN)) / torch.tensor(CLIP_STD)
    return x.permute(0, 3, 1, 2).contiguous()


def image_pixels(images, size: int) -> Tensor:
    """PIL images -> model input, as data_utils ``process_img`` (RGB / its maximum, squashed to size x size)
    then `model_pixels`."""
    arrays = []
    for im in images:
        a = torch.from_numpy(np.array(im.convert("RGB"), dtype=np.float32))
        a = a / (a.max() + 1e-12)
        arrays.append(jax_resize(a[None], size)[0])
    return model_pixels(torch.stack(arrays), size)
