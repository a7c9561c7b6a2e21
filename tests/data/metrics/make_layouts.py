"""Key layouts (name -> shape) of the authors' own model classes at full size, built on the meta device.

Run once from a scratch folder holding the authors' model files (aimagelab/pacscore: models/clip/model.py as
pacs_clip/model.py, models/open_clip/ as pacs_open_clip/, models/clip_lora/ and models/custom_loralib/ under
models/; beichenzbc/Long-CLIP: model/model_longclip.py as longclip/model_longclip.py).
Writes tests/data/metrics/layouts.json in the worktree given as argv[1].
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from longclip.model_longclip import CLIP as LongCLIP
from pacs_clip.model import CLIP as OpenAICLIP


def layout(model):
    return {k: list(v.shape) for k, v in model.state_dict().items()}


out = {}
with torch.device("meta"):
    # PAC-S ViT-B/32: the authors' clip.load("ViT-B/32") model (OpenAI CLIP), fine-tuned
    out["pacs-ViT-B-32"] = layout(OpenAICLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12))
    # Long-CLIP B/16 and L/14 as longclip.load builds them (load_from_clip=False: 248 + 248 positions)
    out["longclip-B"] = layout(LongCLIP(512, 224, 12, 768, 16, 248, 49408, 512, 8, 12, False))
    out["longclip-L"] = layout(LongCLIP(768, 224, 24, 1024, 14, 248, 49408, 768, 12, 12, False))
    # PAC-S++: clip_lora.load("ViT-B/32" | "ViT-L/14", lora=4)
    from models.clip_lora.model import CLIP as LoraCLIP

    out["pacs++-ViT-B-32"] = layout(LoraCLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12, lora=4))
    out["pacs++-ViT-L-14"] = layout(LoraCLIP(768, 224, 24, 1024, 14, 77, 49408, 768, 12, 12, lora=4))
try:
    import pacs_open_clip  # the authors' vendored open_clip: create_model_and_transforms("ViT-L-14")

    model = pacs_open_clip.create_model("ViT-L-14", pretrained="")
    out["pacs-ViT-L-14"] = layout(model)
except Exception as err:
    print("pacs ViT-L-14 skipped:", type(err).__name__, err)
dst = Path(sys.argv[1]) / "tests" / "data" / "metrics" / "layouts.json"
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
print({k: len(v) for k, v in out.items()})
