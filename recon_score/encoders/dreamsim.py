"""DreamSim encoders (the ReconScore default, the ReconScore paper Sec. 3.3).

DreamSim's own preprocessing is kept: bicubic squash to 224x224 (no crop, the aspect ratio is not preserved),
[0, 1] tensors, per-backbone normalisation inside the model, embeddings centred and L2-normalised
(`normalize_embeds=True`), so cos(a, b) = 1 - DreamSim distance.

Weights: DreamSim always reads its unzipped release files from a `cache_dir`; we use
RECONSCORE_WEIGHTS/dreamsim (or --weights-dir DIR/dreamsim). With network access missing files are downloaded
by DreamSim itself; offline, a clear error lists what is missing. DreamSim also uses that folder as the torch.hub
dir: DINO backbones come from `torch.hub.load('facebookresearch/dino:main', ...)`, whose hubconf downloads
`checkpoints/dino_vitbase16_pretrain.pth` there. The checked list (`required_files`) is read from the installed
dreamsim's code and the downloaded hubconf, with dreamsim 0.2.1's values as the fallback.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from urllib.parse import urlparse

import torch

from recon_score import synthetic
from recon_score.encoders.base import FULL_BOX, Encoder, EncoderInfo, PatchGrid, SquashingEncoder, token_grid
from recon_score.errors import ModelNotAvailableError, UnknownEncoderError, did_you_mean
from recon_score.hub import is_offline
from recon_score.paths import weights_root

# Fallbacks, used only when the installed dreamsim's code cannot be read: dreamsim 0.2.1's
# `download_weights` table, and the checkpoints the torch-hub entry points download (facebookresearch/dino
# hubconf.py `dino_vitb16`; facebookresearch/dinov2 hub/backbones.py `dinov2_vitb14`).
_FALLBACK_RELEASE = {
    "ensemble": [
        "dino_vitb16_pretrain.pth",
        "open_clip_vitb16_pretrain.pth.tar",
        "clip_vitb16_pretrain.pth.tar",
        "ensemble_lora",
    ],
    "dino_vitb16": ["dino_vitb16_pretrain.pth", "dino_vitb16_single_lora"],
    "dinov2_vitb14": ["dinov2_vitb14_pretrain.pth", "dinov2_vitb14_single_lora"],
    "open_clip_vitb32": ["open_clip_vitb32_pretrain.pth.tar", "open_clip_vitb32_single_lora"],
    "clip_vitb32": ["clip_vitb32_pretrain.pth.tar", "clip_vitb32_single_lora"],
}
_FALLBACK_HUB = {"dino": "facebookresearch/dino:main", "dinov2": "facebookresearch/dinov2"}
HUB_WEIGHTS = {
    "dino_vitb16": "https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/dino_vitbase16_pretrain.pth",
    "dinov2_vitb14": "https://dl.fbaipublicfiles.com/dinov2/dinov2_vitb14/dinov2_vitb14_pretrain.pth",
}
REQUIRED = _FALLBACK_RELEASE  # the DreamSim models reconscore offers


def _source_tree(relpath: str, *names: str) -> ast.AST | None:
    """The syntax tree of the installed dreamsim's file `relpath` (or of the class/function `names` path inside
    it), read from disk without importing dreamsim: its import pulls torch, open_clip and peft (seconds), and a
    weights check must answer before that."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("dreamsim")
        roots = list(spec.submodule_search_locations or []) if spec else []
        tree: ast.AST = ast.parse(Path(roots[0], relpath).read_text(encoding="utf-8"))
    except (ImportError, IndexError, OSError, SyntaxError, ValueError):
        return None
    for name in names:
        body = getattr(tree, "body", [])
        tree = next(
            (n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name), None
        )
        if tree is None:
            return None
    return tree


def release_files(name: str) -> list[str]:
    """The unzipped release files `dreamsim.model.download_weights` checks for `name`, read from the installed
    dreamsim's own table (so a new dreamsim release cannot silently need a file this check does not list)."""
    tree = _source_tree("model.py", "download_weights")
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "dreamsim_required_ckpts" for t in node.targets
        ):
            try:
                return list(ast.literal_eval(node.value)[name])
            except (ValueError, KeyError):
                break
    return list(_FALLBACK_RELEASE[name])


def backbones(name: str) -> list[str]:
    """The ViT backbones of DreamSim model `name` (dreamsim.config), e.g. ensemble -> dino_vitb16, clip_vitb16,
    open_clip_vitb16."""
    tree = _source_tree("config.py")
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "dreamsim_args" for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)["model_config"][name]["model_type"].split(",")
            except (ValueError, KeyError, AttributeError):
                break
    from dreamsim.config import dreamsim_args  # not a literal any more: ask the package itself

    return dreamsim_args["model_config"][name]["model_type"].split(",")


def hub_repo(backbone: str) -> str | None:
    """The torch.hub repo ("owner/name[:ref]") the installed dreamsim's `ViTExtractor.create_model` loads
    `backbone` from: its if/elif chain on substrings of the model type, read from its source."""
    tree = _source_tree("feature_extraction/extractor.py", "ViTExtractor", "create_model")
    if tree is None:
        return next((r for k, r in sorted(_FALLBACK_HUB.items(), reverse=True) if k in backbone), None)
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.If)), None)
    while isinstance(node, ast.If):
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Constant)
            and isinstance(test.ops[0], ast.In)
            and test.left.value in backbone
        ):
            for call in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if (
                    isinstance(call, ast.Call)
                    and ast.unparse(call.func) == "torch.hub.load"
                    and isinstance(call.args[0], ast.Constant)
                ):
                    return call.args[0].value
            return None
        node = node.orelse[0] if len(node.orelse) == 1 else None
    return None


def hub_folder(repo: str) -> str:
    """torch.hub's cache folder for `repo`: owner_name_ref; without a ref torch tries `main` first."""
    info, _, ref = repo.partition(":")
    owner, name = info.split("/")
    return f"{owner}_{name}_{ref or 'main'}"


def hub_checkpoint_urls(repo_dir: Path, entry: str) -> list[str]:
    """URLs the hub entry point `entry` passes to torch.hub.load_state_dict_from_url, read from the downloaded
    repo's hubconf.py; [] when there is no such literal (then HUB_WEIGHTS says)."""
    try:
        tree = ast.parse((repo_dir / "hubconf.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return []
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == entry:
            return [
                kw.value.value
                for call in ast.walk(fn)
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("load_state_dict_from_url")
                for kw in [*call.keywords, *(ast.keyword(arg="url", value=a) for a in call.args[:1])]
                if kw.arg == "url" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
            ]
    return []


def required_files(name: str, cache_dir: Path) -> list[str]:
    """Every file or folder the real loader opens in `cache_dir` (DreamSim's cache_dir is also the torch.hub dir):
    the release files, each backbone's torch.hub repo folder, and the checkpoint its hub entry point downloads
    into `checkpoints/` (torch.hub.load_state_dict_from_url's destination)."""
    need = release_files(name)
    for backbone in backbones(name):
        repo = hub_repo(backbone)
        if repo is None:
            continue
        folder = hub_folder(repo)
        need.append(f"{folder}/hubconf.py")
        urls = hub_checkpoint_urls(cache_dir / folder, backbone) or [HUB_WEIGHTS[backbone]]
        need.extend(f"checkpoints/{os.path.basename(urlparse(u).path)}" for u in urls)
    return list(dict.fromkeys(need))


def dreamsim_dir(weights_dir: Path | None) -> Path:
    env = os.environ.get("RECONSCORE_DREAMSIM_DIR")
    if env:
        return Path(env).expanduser()
    return (weights_dir or weights_root()) / "dreamsim"


def _missing(name: str, cache_dir: Path) -> list[str]:
    return [f for f in required_files(name, cache_dir) if not (cache_dir / f).exists()]


class DreamSimEncoder(SquashingEncoder):
    def __init__(self, model: torch.nn.Module, info: EncoderInfo, device: str, img_size: int = 224):
        super().__init__(model, info, device, size=img_size, batch_size=32)

    def _embed_images(self, images):
        x = self._pixels(images)
        emb = self.model.embed(x)
        return emb.reshape(len(images), -1)

    def _patch_tokens(self, images):
        """Each tower's last-layer patch tokens (block 11, the layer DreamSim's features come from), on the same
        squashed input as the embedding, so every grid covers the whole image."""
        x, boxes = self._pixels(images), [FULL_BOX] * len(images)
        if hasattr(self.model, "patch_tokens"):  # the tiny smoke ensemble
            return [PatchGrid(token_grid(t, r, c), boxes) for t, (r, c) in self.model.patch_tokens(x)]
        inner = perceptual_model(self.model)
        grids = []
        for extractor, model_type in zip(inner.extractor_list, inner.model_list):
            desc = extractor.extract_descriptors(inner._preprocess(x, model_type), 11)
            rows, cols = extractor.num_patches
            grids.append(
                PatchGrid(token_grid(desc.reshape(len(images), desc.shape[-2], -1), rows, cols), boxes)
            )
        return grids


def perceptual_model(model: torch.nn.Module) -> torch.nn.Module:
    """dreamsim's PerceptualModel inside what `dreamsim()` returns (the ensemble comes wrapped in a peft
    PeftModel -> LoraModel -> PerceptualModel)."""
    for cand in (model, getattr(getattr(model, "base_model", None), "model", None)):
        if cand is not None and hasattr(cand, "extractor_list"):
            return cand
    raise TypeError(f"{type(model).__name__} holds no DreamSim towers")


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    if synthetic.is_synthetic(name):
        return _build_synthetic(synthetic.parse(name), device)
    if name not in REQUIRED:
        hint = did_you_mean(name, REQUIRED)
        reason = f"unknown DreamSim model {name!r}; choose one of {', '.join(REQUIRED)}{hint}"
        raise UnknownEncoderError(f"dreamsim:{name}", known=[], reason=reason)

    cache_dir = dreamsim_dir(weights_dir)
    missing = _missing(name, cache_dir)
    fix = (
        f"Put DreamSim's unzipped release files for {name!r} there (from "
        "https://github.com/ssundaram21/dreamsim/releases, plus the torch-hub repo folders), "
        "set RECONSCORE_WEIGHTS=DIR (files in DIR/dreamsim), or pass --weights-dir DIR. "
        "`reconscore models check dreamsim:NAME` lists every file."
    )
    if missing and is_offline():
        raise ModelNotAvailableError(
            f"dreamsim:{name}",
            searched=[str(cache_dir)],
            fix=fix,
            reason=f"missing {', '.join(missing)}; HF_HUB_OFFLINE=1 is set, so nothing was downloaded",
        )
    try:
        from dreamsim import dreamsim as load_dreamsim

        cache_dir.mkdir(parents=True, exist_ok=True)
        model, _ = load_dreamsim(
            pretrained=True,
            device=device,
            cache_dir=str(cache_dir),
            normalize_embeds=True,
            dreamsim_type=name,
        )
    except Exception as err:  # network errors, torch.hub errors, partial zips
        raise ModelNotAvailableError(
            f"dreamsim:{name}",
            searched=[str(cache_dir)],
            fix=fix,
            reason=f"{type(err).__name__}: {err}"[:400],
        ) from err
    dims = {
        "ensemble": 1792,
        "dino_vitb16": 768,
        "dinov2_vitb14": 768,
        "open_clip_vitb32": 512,
        "clip_vitb32": 512,
    }
    info = EncoderInfo(
        spec=f"dreamsim:{name}",
        kind="embedding",
        modalities=("image",),
        source=str(cache_dir),
        dim=dims[name],
    )
    return DreamSimEncoder(model, info, device)


def _build_synthetic(name: synthetic.SyntheticName, device: str) -> Encoder:
    """`smoke:dreamsim`: a DreamSim-shaped tiny ensemble; `shapes:dreamsim[@SCALE]`: dreamsim's own ensemble
    model (three ViT-B/16 towers + LoRA) with random weights."""
    if name.prefix == "smoke":
        from recon_score.synthetic.tiny_models import TinyDreamSim

        path, revision = synthetic.resolve(name.name)
        model = TinyDreamSim.from_dir(path)
        source = f"{revision} {path} (random weights; numbers are meaningless)"
        dim = sum(b["embed_dim"] for b in model.config["backbones"])
    else:
        from recon_score.synthetic.shapes import SHAPES_NOTE, build_dreamsim_ensemble

        model, source, dim = build_dreamsim_ensemble(name.scale, device=device), SHAPES_NOTE, None
    info = EncoderInfo(spec=name.name, kind="embedding", modalities=("image",), source=source, dim=dim)
    return DreamSimEncoder(model, info, device)


def check(name: str, *, weights_dir: Path | None) -> dict:
    if synthetic.is_synthetic(name):
        return synthetic.check(name)
    if name not in REQUIRED:
        return {
            "available": False,
            "location": "",
            "source": "",
            "detail": f"unknown DreamSim model {name!r}; choose one of {', '.join(REQUIRED)}"
            + did_you_mean(name, REQUIRED),
        }
    cache_dir = dreamsim_dir(weights_dir)
    missing = _missing(name, cache_dir)
    return {
        "available": not missing,
        "location": str(cache_dir),
        "source": "DreamSim GitHub release zip + torch.hub repos and their checkpoints (downloaded into this "
        "folder by dreamsim and torch.hub on first use when online)",
        "detail": f"missing: {', '.join(missing)}" if missing else "all release files present",
    }
