"""Reference outputs of the Long-CLIP authors' loader for reconscore's Long-CLIP test (run once, outside the project).

Usage: python make_longclip_reference.py /path/to/beichenzbc-Long-CLIP-checkout ../pacscore
(torch, torchvision, ftfy, regex, tqdm, setuptools' pkg_resources; the authors' files unmodified; nothing
downloaded.)

A tiny Long-CLIP (the authors' `model_longclip.CLIP`, load_from_clip=False: 248 positions plus
`positional_embedding_res`; width 64 so `build_model` derives one head) is saved as the authors save theirs, a
plain fp32 state dict, then loaded by the authors' `longclip.load(path, device="cpu")`: `build_model` converts
Linear/Conv/attention/projection weights to fp16 *before* `load_state_dict`, then `model.float()`. Its text
and image embeddings of a few texts (one over 77 tokens) and the PAC-S test images are stored.
Token-embedding rows no text uses are zeroed; every other parameter is the authors' initialisation
+ 0.1·N(0, 1).
"""

import gzip
import io
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(sys.argv[1]).resolve()))
IMAGES = Path(sys.argv[2]).resolve()

from model import longclip  # noqa: E402
from model.model_longclip import CLIP  # noqa: E402

TEXTS = ["a farm with fields", "two tennis courts near a road", "a harbour " + "with boats and a pier " * 20]


def main() -> None:
    torch.manual_seed(0)
    model = CLIP(16, 16, 1, 64, 8, 248, 49408, 64, 1, 1, load_from_clip=False)
    g = torch.Generator().manual_seed(3)
    keep = torch.unique(longclip.tokenize(TEXTS, truncate=True))
    state = {}
    for k, v in model.state_dict().items():
        v = v.float() + 0.1 * torch.randn(v.shape, generator=g)
        if k == "token_embedding.weight":
            mask = torch.zeros(v.shape[0], 1, dtype=torch.bool)
            mask[keep] = True
            v = torch.where(mask, v, torch.zeros_like(v))
        state[k] = v
    path = HERE / "_longclip-tiny.pt"
    torch.save(state, path)
    loaded, preprocess = longclip.load(str(path), device="cpu")
    buf = io.BytesIO()
    torch.save(state, buf)
    (HERE / "longclip-tiny.pt.gz").write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    path.unlink()
    images = torch.stack([preprocess(Image.open(IMAGES / f"image{i}.png")) for i in range(3)])
    with torch.no_grad():
        text = loaded.encode_text(longclip.tokenize(TEXTS, truncate=True)).numpy()
        image = loaded.encode_image(images).numpy()
    np.savez(HERE / "longclip_reference.npz", texts=np.array(TEXTS), text=text, image=image)
    print(text[:, :4], image[:, :4])


if __name__ == "__main__":
    main()
