"""DreamSim encoders (the ReconScore default, seed 004 Sec. 3.3).

DreamSim's own preprocessing is kept: bicubic squash to 224x224 (no crop, the aspect ratio is not preserved),
[0, 1] tensors, per-backbone normalisation inside the model, embeddings centred and L2-normalised
(`normalize_embeds=True`), so cos(a, b) = 1 - DreamSim distance.

Weights: DreamSim always reads its unzipped release files from a `cache_dir`; we use
RECONSCORE_WEIGHTS/dreamsim (or --weights-dir DIR/dreamsim). With network access missing files are downloaded
by DreamSim itself; offline, a clear error lists what is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from recon_score.encoders.base import Encoder, EncoderInfo
from recon_score.errors import ModelNotAvailableError
from recon_score.hub import is_offline, weights_root

# dreamsim.model.download_weights' table, plus the torch-hub repos the backbones are built from
REQUIRED = {
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
HUB_REPOS = {
    "ensemble": ["facebookresearch_dino_main"],
    "dino_vitb16": ["facebookresearch_dino_main"],
    "dinov2_vitb14": ["facebookresearch_dinov2_main"],
}
NAMES = (*REQUIRED, "smoke")


def dreamsim_dir(weights_dir: Path | None) -> Path:
    env = os.environ.get("RECONSCORE_DREAMSIM_DIR")
    if env:
        return Path(env).expanduser()
    return (weights_dir or weights_root()) / "dreamsim"


def _missing(name: str, cache_dir: Path) -> list[str]:
    need = REQUIRED[name] + HUB_REPOS.get(name, [])
    return [f for f in need if not (cache_dir / f).exists()]


class DreamSimEncoder(Encoder):
    def __init__(self, model: torch.nn.Module, info: EncoderInfo, device: str, img_size: int = 224):
        from torchvision import transforms

        self.model = model.to(device).eval().requires_grad_(False)
        self.info, self.device = info, torch.device(device)
        self.batch_size = 32
        self.transform = transforms.Compose(
            [
                transforms.Resize((img_size, img_size), interpolation=transforms.InterpolationMode.BICUBIC),
                transforms.ToTensor(),
            ]
        )

    def _embed_images(self, images):
        x = torch.stack([self.transform(im.convert("RGB")) for im in images]).to(self.device)
        emb = self.model.embed(x)
        return emb.reshape(len(images), -1)


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    if name.startswith("shapes:"):
        return _build_shapes(name, device)
    if name not in NAMES:
        raise ValueError(f"unknown DreamSim model {name!r}; choose one of {', '.join(NAMES)}")
    if name == "smoke":
        from recon_score.testing.fixtures import FIXTURE_VERSION, ensure_fixture
        from recon_score.testing.tiny import TinyDreamSim

        path = ensure_fixture("dreamsim")
        model = TinyDreamSim.from_dir(path)
        info = EncoderInfo(
            spec="dreamsim:smoke",
            kind="embedding",
            modalities=("image",),
            source=f"fixture:v{FIXTURE_VERSION} {path} (random weights; numbers are meaningless)",
            dim=sum(b["embed_dim"] for b in model.config["backbones"]),
        )
        return DreamSimEncoder(model, info, device)

    cache_dir = dreamsim_dir(weights_dir)
    missing = _missing(name, cache_dir)
    fix = (
        f"Put DreamSim's unzipped release files for {name!r} there (from "
        "https://github.com/ssundaram21/dreamsim/releases, plus the torch-hub repo folders), "
        "set RECONSCORE_WEIGHTS=DIR (files in DIR/dreamsim), or pass --weights-dir DIR."
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


def _build_shapes(name: str, device: str) -> Encoder:
    """`shapes:ensemble[@SCALE]`: dreamsim's ensemble model (three ViT-B/16 towers + LoRA), random weights."""
    from recon_score.testing.shapes import SHAPES_NOTE, build_dreamsim_ensemble, parse_name

    base, scale = parse_name(name[len("shapes:") :])
    if base != "ensemble":
        raise ValueError(
            f"dreamsim shapes exist for the ensemble only: dreamsim:shapes:ensemble, got {name!r}"
        )
    model = build_dreamsim_ensemble(scale, device=device)
    info = EncoderInfo(
        spec=f"dreamsim:{name}",
        kind="embedding",
        modalities=("image",),
        source=SHAPES_NOTE,
        dim=None,
    )
    return DreamSimEncoder(model, info, device)


def check(name: str, *, weights_dir: Path | None) -> dict:
    if name.startswith("shapes:"):
        return {"available": True, "location": "", "source": "random weights (no download)", "detail": ""}
    if name == "smoke":
        from recon_score.hub import check_model

        return check_model("smoke:dreamsim")
    if name not in REQUIRED:
        return {
            "available": False,
            "location": "",
            "source": "",
            "detail": f"unknown DreamSim model {name!r}",
        }
    cache_dir = dreamsim_dir(weights_dir)
    missing = _missing(name, cache_dir)
    return {
        "available": not missing,
        "location": str(cache_dir),
        "source": "DreamSim GitHub release (downloaded by dreamsim on first use when online)",
        "detail": f"missing: {', '.join(missing)}" if missing else "all release files present",
    }
