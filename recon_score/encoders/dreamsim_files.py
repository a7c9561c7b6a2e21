"""DreamSim's weights on disk, checked without importing torch or dreamsim (a missing-weights message must come
before those imports): the release files and torch.hub repos and checkpoints its loader opens in the weights
folder, read from the installed dreamsim's source (recon_score.encoders.dreamsim builds the encoder)."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from urllib.parse import urlparse

from recon_score.errors import did_you_mean
from recon_score.paths import WeightsLocation, weights_root

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
    """The syntax tree of the installed dreamsim's file `relpath` (or of the class/function `names` path in it),
    read without importing dreamsim (which pulls torch, open_clip and peft): a weights check answers first."""
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


def _assigned_literal(tree: ast.AST | None, name: str):
    """The literal value `tree` assigns to `name`, or None (no such assignment, or not a literal)."""
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def release_files(name: str) -> list[str]:
    """The unzipped release files `dreamsim.model.download_weights` checks for `name`, read from the installed
    dreamsim's own table (so a new dreamsim release cannot silently need a file this check does not list)."""
    table = _assigned_literal(_source_tree("model.py", "download_weights"), "dreamsim_required_ckpts")
    if isinstance(table, dict) and name in table:
        return list(table[name])
    return list(_FALLBACK_RELEASE[name])


def backbones(name: str) -> list[str]:
    """The ViT backbones of DreamSim model `name` (dreamsim.config), e.g. ensemble -> dino_vitb16, clip_vitb16,
    open_clip_vitb16."""
    args = _assigned_literal(_source_tree("config.py"), "dreamsim_args")
    try:
        return args["model_config"][name]["model_type"].split(",")
    except (TypeError, KeyError, AttributeError):
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


def missing_files(name: str, cache_dir: Path) -> list[str]:
    return [f for f in required_files(name, cache_dir) if not (cache_dir / f).exists()]


def check(name: str, *, weights_dir: Path | None) -> WeightsLocation:
    if name not in REQUIRED:
        why = f"unknown DreamSim model {name!r}; choose one of {', '.join(REQUIRED)}" + did_you_mean(
            name, REQUIRED
        )
        return WeightsLocation(False, detail=why)
    cache_dir = dreamsim_dir(weights_dir)
    missing = missing_files(name, cache_dir)
    return WeightsLocation(
        not missing,
        str(cache_dir),
        "DreamSim GitHub release zip + torch.hub repos and their checkpoints (downloaded into this folder by "
        "dreamsim and torch.hub on first use when online)",
        f"missing: {', '.join(missing)}" if missing else "all release files present",
    )
