"""The vision-language backbones the RS-CIR benchmark paper evaluates (Tables 1-2, A.2) as ready encoder specs, with
where their weights come from; nothing here downloads. See docs/retrieval.md ("reconscore models list")."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Backbone:
    name: str  # as in the RS-CIR benchmark paper's tables
    spec: str  # encoder spec; WEIGHTS stands for the local file you downloaded
    weights: str  # where the released weights are
    note: str = ""


BACKBONES = (
    Backbone(
        "CLIP (OpenAI ViT-L/14)",
        "open_clip:ViT-L-14-quickgelu/openai",
        "OpenAI's release through open_clip's `openai` tag (HF cache)",
        "BASIC's bundled LAION-1M image mean applies (retrieval/assets)",
    ),
    Backbone(
        "RemoteCLIP ViT-L/14",
        "open_clip:ViT-L-14@WEIGHTS/RemoteCLIP-ViT-L-14.pt",
        "huggingface.co/chendelong/RemoteCLIP, file RemoteCLIP-ViT-L-14.pt (also -ViT-B-32, -RN50)",
        "rscir's default backbone (utils.load_model: ViT-L-14 + load_state_dict)",
    ),
    Backbone(
        "SkyCLIP-50 ViT-L/14",
        "open_clip:ViT-L-14-quickgelu@WEIGHTS/SkyCLIP-50.pt",
        "opendatasharing.s3.us-west-2.amazonaws.com/SkyScript/ckpt/SkyCLIP_ViT_L14_top50pct.zip "
        "(github.com/wangzhecheng/SkyScript); unzip it: the .pt inside is the checkpoint",
        "continual pre-training on SkyScript top-50% (2.6M pairs)",
    ),
    Backbone(
        "CLIP LAION-RS ViT-L/14",
        "open_clip:ViT-L-14-quickgelu@WEIGHTS/CLIP-LAION-RS.pt",
        "opendatasharing.s3.us-west-2.amazonaws.com/SkyScript/ckpt/CLIP_ViT_L14_LAION_RS.zip "
        "(SkyScript's release); unzip it: the .pt inside is the checkpoint",
        "the RS-CIR benchmark paper's 'CLIP LAION-RS' [94]: OpenAI CLIP fine-tuned on the 726K-image RS subset of LAION-2B",
    ),
    Backbone(
        "GeoRSCLIP ViT-L/14",
        "open_clip:ViT-L-14@WEIGHTS/RS5M_ViT-L-14.pt",
        "huggingface.co/Zilun/GeoRSCLIP, file ckpt/RS5M_ViT-L-14.pt (RS5M; also ViT-B-32, ViT-H-14)",
        "the other LAION-derived RS CLIP (RS5M); not the checkpoint the RS-CIR benchmark paper names 'CLIP LAION-RS'",
    ),
    Backbone(
        "SigLIP ViT-L (WebLI)",
        "open_clip:hf-hub:timm/ViT-L-16-SigLIP-256",
        "huggingface.co/timm/ViT-L-16-SigLIP-256 (open_clip hub format)",
        "the SigLIP i-CIR's code uses (utils_features.py); the RS-CIR benchmark paper: 'trained on WebLI'",
    ),
)


def list_backbones() -> list[dict]:
    return [asdict(b) for b in BACKBONES]
