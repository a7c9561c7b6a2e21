"""CompoDiff (Gu et al., TMLR 2024; navervision/CompoDiff, Apache-2.0) in PyTorch from its hub release, without the
authors' package: the denoiser (``compodiff/models.py`` ``CompoDiffNetwork``) and their DDIM sampler
(``CompoDiff.p_sample_loop_ddim``). See docs/retrieval.md, "Learned methods"."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recon_score.errors import InputError
from recon_score.runtime import seeded
from retrieval.methods.learned import read_state

DEFAULT_RELEASE = "navervision/CompoDiff-Aesthetic"


class ScaleNorm(nn.Module):
    """models.py ``LayerNorm``: (x - mean) / sqrt(var + eps) * g, no bias; `stable` divides by the row max first."""

    def __init__(self, dim: int, stable: bool = False):
        super().__init__()
        self.stable = stable
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if self.stable:
            x = x / x.amax(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - x.mean(dim=-1, keepdim=True)) * (var + 1e-5).rsqrt() * self.g


class _MLP(nn.Module):
    """models.py ``MLP`` (expansion 2, depth 2, no norm), keys ``net.{0.0,1.0,2}``."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        hidden = 2 * dim_out
        self.net = nn.Sequential(
            nn.Sequential(nn.Linear(dim_in, hidden), nn.SiLU()),
            nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU()),
            nn.Linear(hidden, dim_out),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.float())


def _rotate(t: Tensor, freqs: Tensor) -> Tensor:
    """Rotary embedding over positions 0..n-1 on the first 2·len(freqs) features, pairs interleaved."""
    n = t.shape[-2]
    angles = torch.arange(n, dtype=t.dtype, device=t.device)[:, None] * freqs[None, :].to(t.dtype)
    angles = angles.repeat_interleave(2, dim=-1)
    rot = angles.shape[-1]
    mid = t[..., :rot]
    pairs = mid.unflatten(-1, (-1, 2))
    half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return torch.cat((mid * angles.cos() + half * angles.sin(), t[..., rot:]), dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, dim_head: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = ScaleNorm(dim)
        self.null_kv = nn.Parameter(torch.zeros(2, dim_head))
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * 2, bias=False)
        self.rotary_emb = nn.Module()
        self.rotary_emb.freqs = nn.Parameter(torch.zeros(min(32, dim_head) // 2), requires_grad=False)
        self.to_out = nn.Sequential(nn.Linear(dim_head * heads, dim, bias=False), ScaleNorm(dim))

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        b = x.shape[0]
        x = self.norm(x)
        q = self.to_q(x).unflatten(-1, (self.heads, -1)).transpose(1, 2)  # b h n d
        k, v = self.to_kv(x).chunk(2, dim=-1)  # b n d: one head shared by all queries
        q, k = _rotate(q * 16.0, self.rotary_emb.freqs), _rotate(k, self.rotary_emb.freqs)
        nk, nv = (t.expand(b, 1, -1) for t in self.null_kv.unbind(0))
        k, v = torch.cat((nk, k), dim=-2), torch.cat((nv, v), dim=-2)
        q, k = F.normalize(q, dim=-1) * 4.0, F.normalize(k, dim=-1) * 4.0  # sqrt(16)
        sim = torch.einsum("bhid,bjd->bhij", q, k) + bias
        out = torch.einsum("bhij,bjd->bhid", sim.softmax(dim=-1, dtype=torch.float32).type(sim.dtype), v)
        return self.to_out(out.transpose(1, 2).flatten(2))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, dim_head: int, heads: int = 8):
        super().__init__()
        self.heads, self.scale = heads, dim_head**-0.5
        self.norm = ScaleNorm(dim)
        self.null_kv = nn.Parameter(torch.zeros(2, dim_head))
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * heads * 2, bias=False)
        self.to_out = nn.Sequential(nn.Linear(dim_head * heads, dim, bias=False), ScaleNorm(dim))

    def forward(self, x: Tensor, context: Tensor) -> Tensor:
        b = x.shape[0]
        split = lambda t: t.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # noqa: E731
        q = split(self.to_q(self.norm(x)))
        k, v = (split(t) for t in self.to_kv(context).chunk(2, dim=-1))
        nk, nv = (t.expand(b, self.heads, 1, -1) for t in self.null_kv.unbind(0))
        k, v = torch.cat((nk, k), dim=-2), torch.cat((nv, v), dim=-2)
        sim = torch.einsum("bhid,bhjd->bhij", q * self.scale**0.5, k * self.scale**0.5)
        out = torch.einsum("bhij,bhjd->bhid", sim.softmax(dim=-1, dtype=torch.float32).type(sim.dtype), v)
        return self.to_out(out.transpose(1, 2).flatten(2))


class _SwiGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        x, gate = x.chunk(2, dim=-1)
        return x * F.silu(gate)


def _feed_forward(dim: int, mult: int = 4) -> nn.Sequential:
    """models.py ``FeedForward`` (keys 0, 1, 5): norm, Linear to 2·inner, SwiGLU, Linear back."""
    inner = mult * dim
    return nn.Sequential(
        ScaleNorm(dim),
        nn.Linear(dim, inner * 2, bias=False),
        _SwiGLU(),
        nn.Identity(),
        nn.Identity(),
        nn.Linear(inner, dim, bias=False),
    )


def _bucket(relative: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    n = (-relative).clamp(min=0)
    exact = num_buckets // 2
    large = (
        exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)).long()
    )
    return torch.where(n < exact, n, large.clamp(max=num_buckets - 1))


class Transformer(nn.Module):
    def __init__(self, dim: int, depth: int, dim_head: int, heads: int):
        super().__init__()
        self.rel_pos_bias = nn.Module()
        self.rel_pos_bias.relative_attention_bias = nn.Embedding(32, heads)
        self.layers = nn.ModuleList(
            nn.ModuleList(
                [SelfAttention(dim, dim_head, heads), CrossAttention(dim, dim_head), _feed_forward(dim)]
            )
            for _ in range(depth)
        )
        self.norm = ScaleNorm(dim, stable=True)
        self.project_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, context: Tensor) -> Tensor:
        n = x.shape[1]
        rel = torch.arange(n + 1, device=x.device)[None, :] - torch.arange(n, device=x.device)[:, None]
        bias = self.rel_pos_bias.relative_attention_bias(_bucket(rel)).permute(2, 0, 1)
        for attn, cross, ff in self.layers:
            x = attn(x, bias) + x
            x = cross(x, context) + x
            x = ff(x) + x
        return self.project_out(self.norm(x))


class _Sinusoidal(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, t: Tensor) -> Tensor:
        half = self.dim // 2
        freqs = torch.exp(
            torch.arange(half, dtype=t.dtype, device=t.device) * -(math.log(10000) / (half - 1))
        )
        emb = t[:, None] * freqs[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class Denoiser(nn.Module):
    """``CompoDiffNetwork``: predicts the clean image embedding from (noisy embedding, time, conditions)."""

    def __init__(self, dim: int, depth: int, dim_head: int, heads: int, text_width: int):
        super().__init__()
        self.to_text_embeds = nn.Sequential(nn.Linear(text_width, dim))
        self.to_time_embeds = nn.Sequential(nn.Sequential(_Sinusoidal(dim), _MLP(dim, dim)))
        self.to_mask_embeds = nn.Sequential(nn.Flatten(1), _MLP(4096, dim))
        self.transformer = Transformer(dim, depth, dim_head, heads)

    def forward(self, embed: Tensor, image: Tensor, text: Tensor, mask: Tensor, time: Tensor) -> Tensor:
        time_embed = self.to_time_embeds(time.to(embed.dtype)).unsqueeze(1)
        mask_embed = self.to_mask_embeds(mask).unsqueeze(1)
        context = torch.cat([self.to_text_embeds(text), image, mask_embed], dim=1)
        return self.transformer(torch.cat((embed, time_embed), dim=-2), context)[..., :1, :]

    def guided(self, embed, image, text, negative, mask, time, scales: tuple[float, float]) -> Tensor:
        """Classifier-free guidance over (image, text) as ``forward_with_cond_scale``."""
        out = self(
            torch.cat([embed] * 3),
            torch.cat([image, image, torch.zeros_like(image)]),
            torch.cat([text, negative, negative]),
            torch.cat([mask] * 3),
            torch.cat([time] * 3),
        )
        cond, null_text, null_all = out.chunk(3)
        return null_all + (cond - null_text) * scales[1] + (null_text - null_all) * scales[0]


@dataclass(frozen=True)
class CompoDiffConfig:
    embed_dim: int
    depth: int
    dim_head: int
    heads: int
    timesteps: int
    text_width: int


class CompoDiff(nn.Module):
    """The denoiser and the schedule buffers of the release; `sample` is the authors' sampler."""

    def __init__(self, cfg: CompoDiffConfig):
        super().__init__()
        self.cfg = cfg
        self.net = Denoiser(cfg.embed_dim, cfg.depth, cfg.dim_head, cfg.heads, cfg.text_width)
        for name in ("alphas_cumprod_prev", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod"):
            self.register_buffer(name, torch.zeros(cfg.timesteps))

    @torch.no_grad()
    def sample(
        self,
        image: Tensor,
        text: Tensor,
        negative: Tensor,
        *,
        steps: int = 10,
        scales: tuple[float, float] = (1.5, 7.5),
        num_samples: int = 2,
        seed: int | None = 0,
    ) -> Tensor:
        """(B, D) sampled embeddings (unnormalised) for image (B, 1, D), text/negative (B, L, W) states."""
        rep = lambda t: t.repeat_interleave(num_samples, dim=0)  # noqa: E731
        image, text, negative = rep(image), rep(text), rep(negative)
        mask = torch.zeros(image.shape[0], 64, 64, device=image.device)
        times = list(reversed(torch.linspace(-1.0, self.cfg.timesteps, steps + 1)[:-1].int().tolist()))
        shape = (image.shape[0], 1, self.cfg.embed_dim)
        # the authors' draws (torch.manual_seed(seed), then randn and randn_like per step), from generators
        # seeded here and restored afterwards: the caller's random state is left as it was
        with seeded(seed, image.device) if seed is not None else contextlib.nullcontext():
            x = self._denoise(torch.randn(shape).to(image.device), image, text, negative, mask, times, scales)
        return x.reshape(-1, num_samples, self.cfg.embed_dim).mean(dim=1)

    def _denoise(self, x: Tensor, image, text, negative, mask, times: list[int], scales) -> Tensor:
        """The authors' DDIM loop from the noise `x` (draws its step noise from the global generator)."""
        shape = x.shape
        alphas = self.alphas_cumprod_prev
        for time, time_next in itertools.pairwise(times):
            t = torch.full((shape[0],), time, device=image.device, dtype=torch.long)
            x0 = self.net.guided(x, image, text, negative, mask, t, scales)
            if time_next < 0:
                x = x0
                continue
            noise_pred = (self.sqrt_recip_alphas_cumprod[time] * x - x0) / self.sqrt_recipm1_alphas_cumprod[
                time
            ]
            alpha, alpha_next = alphas[time], alphas[time_next]
            c1 = ((1 - alpha / alpha_next) * (1 - alpha_next) / (1 - alpha)).sqrt()
            c2 = ((1 - alpha_next) - c1.square()).sqrt()
            noise = torch.randn_like(x) if time_next > 0 else 0.0
            x = x0 * alpha_next.sqrt() + c1 * noise + c2 * noise_pred
        return x


def _release_state(folder: Path) -> dict[str, Tensor]:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return read_state(folder / name, "state_dict")  # a release is the bare state dict
    raise InputError(
        f"{folder} has neither model.safetensors nor pytorch_model.bin (the hub release's layout)"
    )


def load_compodiff(folder: str | Path) -> CompoDiff:
    """A release folder (config.json + model.safetensors or pytorch_model.bin, keys ``model.net.…``, as
    ``CompoDiffModel.save_pretrained`` writes it), read with safetensors or ``weights_only=True``."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise InputError(
            f"{folder} has no config.json; expected a CompoDiff release folder ({DEFAULT_RELEASE})"
        )
    config = json.loads((folder / "config.json").read_text())
    state = {k.removeprefix("model."): v for k, v in _release_state(folder).items()}
    text = state.get("net.to_text_embeds.0.weight")
    if text is None:
        raise InputError(f"{folder}: no net.to_text_embeds.0.weight; not a CompoDiff checkpoint")
    cfg = CompoDiffConfig(
        embed_dim=int(config.get("embed_dim", 768)),
        depth=int(config.get("model_depth", 12)),
        dim_head=int(config.get("model_dim", 64)),
        heads=int(config.get("model_heads", 16)),
        timesteps=int(config.get("timesteps", 1000)),
        text_width=int(text.shape[1]),
    )
    model = CompoDiff(cfg)
    wanted = set(model.state_dict())
    kept = {k.replace("noise_scheduler.", ""): v for k, v in state.items()}
    schedule = {k.replace("noise_scheduler.", "") for k in state if k.startswith("noise_scheduler.")}
    unused = sorted(set(kept) - wanted - schedule)  # the schedule's tensors (betas, ...) are not weights
    if unused:  # e.g. more layers than config.json's model_depth: loading fewer would be a different model
        raise InputError(
            f"{folder}: {len(unused)} checkpoint parameters that config.json's model does not use "
            f"({', '.join(unused[:5])}); the checkpoint and config.json disagree"
        )
    kept = {k: v for k, v in kept.items() if k in wanted}
    rotary = [v for k, v in kept.items() if k.endswith("rotary_emb.freqs")]
    # one rotary module is shared by every layer; a deduplicating save keeps one
    for key in wanted - set(kept):
        if key.endswith("rotary_emb.freqs") and rotary:
            kept[key] = rotary[0]
    missing = wanted - set(kept)
    if missing:
        raise InputError(f"{folder}: the checkpoint lacks {', '.join(sorted(missing)[:5])}")
    model.load_state_dict(kept, strict=True)
    return model.eval().requires_grad_(False)
