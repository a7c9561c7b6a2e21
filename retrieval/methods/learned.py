"""Pic2Word and SEARLE of the RS-CIR benchmark paper: textual inversion from the authors' released checkpoints
(MagicLens and CompoDiff are in retrieval.methods.magiclens and .compodiff; RELEASES lists all four for
`models list`). See docs/retrieval.md, "Learned methods"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from recon_score.errors import InputError
from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

# name -> (paper, where the released weights are, what inference needs)
RELEASES = {
    "pic2word": (
        "Saito et al., CVPR 2023",
        "google-research/composed_image_retrieval (pic2word_model.pt)",
        "an image-to-token MLP whose output replaces a token embedding inside the CLIP text tower",
    ),
    "searle": (
        "Baldrati et al., ICCV 2023",
        "miccunifi/SEARLE releases (SEARLE_ViT-B32.pt or SEARLE_ViT-L14.pt)",
        "a textual-inversion network feeding a pseudo-token to the text tower",
    ),
    "compodiff": (
        "Gu et al., TMLR 2024",
        "the Hugging Face hub repo navervision/CompoDiff-Aesthetic (code: github.com/navervision/CompoDiff)",
        "a diffusion prior in CLIP-L/14 image space (10 steps, source weight 0.4 in the RS-CIR benchmark paper)",
    ),
    "magiclens": (
        "Zhang et al., ICML 2024",
        "gs://gresearch/magiclens/models (magic_lens_clip_large.pkl; code: github.com/google-deepmind/magiclens)",
        "its multimodal transformer head over CLIP ViT-L/14 (a Flax release, read here without JAX: "
        "retrieval.magiclens)",
    ),
}


# -- the two inversion networks, shaped like the released state dicts ----------------------------------------
class Im2Text(nn.Module):
    """Pic2Word's IM2TEXT: keys ``layers.{i}.0.{weight,bias}`` and ``fc_out.{weight,bias}``."""

    def __init__(self, embed_dim: int, middle_dim: int, output_dim: int, n_layer: int, dropout: float = 0.1):
        super().__init__()
        dims = [embed_dim] + [middle_dim] * n_layer
        self.layers = nn.Sequential(
            *(
                nn.Sequential(nn.Linear(dims[i], middle_dim), nn.Dropout(dropout), nn.ReLU())
                for i in range(n_layer)
            )
        )
        self.fc_out = nn.Linear(middle_dim, output_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.layers(x))


class Phi(nn.Module):
    """SEARLE's Phi: keys ``layers.{0,3,6}.{weight,bias}``."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, dropout: float = 0.5):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, output_dim),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


def read_state(path: Path, key: str) -> dict[str, Tensor]:
    """The network's state dict from a released checkpoint: ``ckpt[key]`` when present, else the file itself.
    Loaded with ``weights_only=True`` (or safetensors); DistributedDataParallel's ``module.`` prefix is stripped."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            ckpt = load_file(str(path))
        else:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip or safetensors errors: all mean "not a checkpoint we can read"
        raise InputError(f"cannot read checkpoint {path}: {type(err).__name__}: {err}") from err
    state = ckpt.get(key, ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise InputError(f"checkpoint {path} holds no {key!r} state dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}


def _shape(state: dict[str, Tensor], key: str, path: Path, layout: str) -> torch.Size:
    if key not in state:
        found = ", ".join(sorted(state)[:6])
        raise InputError(f"checkpoint {path} lacks {key!r}; expected {layout} (found: {found}, ...)")
    return state[key].shape


def load_im2text(path: Path) -> Im2Text:
    state = read_state(path, "state_dict_img2text")
    layout = "Pic2Word's IM2TEXT (layers.N.0.weight, fc_out.weight)"
    n_layer = len({k.split(".")[1] for k in state if k.startswith("layers.") and k.endswith(".0.weight")})
    first = _shape(state, "layers.0.0.weight", path, layout)
    out = _shape(state, "fc_out.weight", path, layout)
    net = Im2Text(embed_dim=first[1], middle_dim=first[0], output_dim=out[0], n_layer=n_layer)
    _load(net, state, path)
    return net


def load_phi(path: Path) -> Phi:
    state = read_state(path, "Phi")
    layout = "SEARLE's Phi (layers.0/3/6.weight)"
    first = _shape(state, "layers.0.weight", path, layout)
    out = _shape(state, "layers.6.weight", path, layout)
    net = Phi(input_dim=first[1], hidden_dim=first[0], output_dim=out[0])
    _load(net, state, path)
    return net


def _load(net: nn.Module, state: dict[str, Tensor], path: Path) -> None:
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise InputError(f"checkpoint {path} does not fit {type(net).__name__}: {err}") from err
    net.eval().requires_grad_(False)


# -- the methods ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TextualInversionConfig:
    """`template` holds {text} and exactly the placeholder the network's token replaces."""

    template: str
    placeholder: str
    batch_size: int = 64  # reference images per forward pass

    def __post_init__(self):
        if "{text}" not in self.template or self.placeholder not in self.template.replace("{text}", ""):
            raise ValueError(
                f"template {self.template!r} must contain {{text}} and the placeholder {self.placeholder!r}"
            )


@dataclass(frozen=True)
class Pic2WordConfig(TextualInversionConfig):
    template: str = "{text} *"  # the RS-CIR benchmark paper A.4; the authors' natural-image prompt: "a photo of * , {text}"
    placeholder: str = "*"


@dataclass(frozen=True)
class SearleConfig(TextualInversionConfig):
    template: str = "{text} $"  # the RS-CIR benchmark paper A.4; the authors' natural-image prompt: "a photo of $ that {text}"
    placeholder: str = "$"


class TextualInversion(Method):
    """Shared inference of Pic2Word and SEARLE; subclasses name the network loader."""

    loader = staticmethod(load_phi)

    def __init__(self, config=None):
        super().__init__(config)
        self._net: tuple[Path, nn.Module] | None = None

    def missing(self, r: Resources) -> list[str]:
        paper, where, _ = RELEASES[self.name]
        needs = r.checkpoint_needs(
            self.name, f"its released checkpoint ({where}; {paper}), given with --checkpoint {self.name}=PATH"
        )
        return needs + r.pseudo_token_needs()

    def fix_hint(self) -> str:
        return (
            f"Download {RELEASES[self.name][1]} and pass --checkpoint {self.name}=PATH with the CLIP the network "
            "was trained on as --encoder (e.g. open_clip:ViT-L-14/openai)."
        )

    def network(self, path: Path) -> nn.Module:
        if self._net is None or self._net[0] != path:
            self._net = (path, self.loader(path))
        return self._net[1]

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        r = ctx.resources
        encoder, path = r.encoder, Path(r.checkpoints[self.name])
        net = self.network(path).to(encoder.device)
        in_dim, out_dim = _io_dims(net)
        if in_dim != encoder.info.dim or out_dim != encoder.pseudo_token_width:
            raise InputError(
                f"{self.name} checkpoint {path} maps {in_dim}-d image embeddings to {out_dim}-d tokens, but "
                f"{encoder.info.spec} has {encoder.info.dim}-d embeddings and {encoder.pseudo_token_width}-d tokens; "
                "use the CLIP it was trained on"
            )

        def tokens(images: list) -> Tensor:
            with torch.inference_mode():
                raw = encoder.encode_images(images, normalize=False)
                return net(raw.to(encoder.device)).float().cpu()

        prepared, n_images = pseudo_token_query(self.name, ctx, self.config, tokens)
        prepared.notes.append(f"{self.name}: {type(net).__name__} from {path}, {n_images} reference images")
        return prepared


def pseudo_token_query(name: str, ctx: MethodContext, cfg, tokens) -> tuple[Prepared, int]:
    """Textual inversion's linear method: `tokens(images)` gives each distinct reference image's pseudo-token
    (batches of `cfg.batch_size`), which replaces `cfg.placeholder` in `cfg.template` filled with the query
    text; and the number of distinct references."""
    r = ctx.resources
    keys, first = ctx.references_once()
    unique = list(first)
    batches = [unique[i : i + cfg.batch_size] for i in range(0, len(unique), cfg.batch_size)]
    table = torch.cat([tokens([r.load_reference(first[k]) for k in batch]) for batch in batches])
    position = {k: n for n, k in enumerate(unique)}
    pseudo = table[[position[k] for k in keys]]
    prompts = [cfg.template.format(text=t) for t in ctx.texts()]
    try:
        query = r.encoder.encode_texts_with_pseudo_tokens(prompts, pseudo, placeholder=cfg.placeholder)
    except ValueError as err:
        raise InputError(f"{name}: {err}") from err
    return linear(query, ctx.database, details=prompts), len(unique)


def _io_dims(net: nn.Module) -> tuple[int, int]:
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]  # registered input first, output last
    return linears[0].in_features, linears[-1].out_features


class Pic2Word(TextualInversion):
    name, config_cls = "pic2word", Pic2WordConfig
    loader = staticmethod(load_im2text)


class Searle(TextualInversion):
    name, config_cls = "searle", SearleConfig
    loader = staticmethod(load_phi)
