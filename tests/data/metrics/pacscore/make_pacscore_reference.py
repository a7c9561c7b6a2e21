"""Reference outputs of the PAC-S authors' code for reconscore's PAC-S / PAC-S++ tests (run once, outside the project).

Usage: python make_pacscore_reference.py /path/to/aimagelab-pacscore-checkout
(torch, torchvision, ftfy, regex, tqdm; the authors' files unmodified; nothing downloaded.)

Two tiny random checkpoints in the authors' layouts, run through the authors' own loaders and `PACScore` /
`RefPACScore` (evaluation/pac_score/pac_score.py):

* `openClip_ViT-L-14.pth` ({"state_dict": ...}): `compute_metrics.py --clip_model open_clip_ViT-L/14` calls
  `open_clip.create_model_and_transforms('ViT-L-14', pretrained='laion2b_s32b_b82k')` (the authors' vendored
  open_clip), `model.float()`, `load_state_dict(checkpoint['state_dict'])`. Here the registered `ViT-L-14` config
  is replaced by a tiny one and `download_pretrained` returns a random file of that shape: the transform still
  comes from the `laion2b_s32b_b82k` pretrained config, which is what this reference pins.
* `PAC++_clip_ViT-B-32.pth`: `compute_correlations_pac++.py` calls `clip_lora.load(name, lora=4)` then
  `load_state_dict(checkpoint['state_dict'])`. Here `name` is a tiny OpenAI-layout state dict (width 64, one head,
  as build_model derives heads = width // 64; `torch.jit.load` is made to refuse it without reading it, as
  torch 1.x did, so the authors' fallback to a plain state dict runs); every LoRA factor of the PAC++ file is non-zero.

Token-embedding rows no test text uses are zeroed (the files gzip to a few kB); every other parameter is
the authors' initialisation + 0.1·N(0, 1), so no bias or LayerNorm offset is trivial; files store fp16.
"""

import gzip
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
UPSTREAM = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(UPSTREAM))

from models import clip  # noqa: E402
from models import open_clip as authors_open_clip  # noqa: E402
from models.clip_lora import clip_lora  # noqa: E402
from models.clip_lora import model as lora_model  # noqa: E402
from models.open_clip import factory  # noqa: E402

spec = importlib.util.spec_from_file_location("pac_score", UPSTREAM / "evaluation/pac_score/pac_score.py")
pac_score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pac_score)

CANDS = ["a farm with fields", "two tennis courts", "a harbour with boats"]
REFS = [
    ["fields and a farm", "a farmland"],
    ["tennis courts near a road"],
    ["boats in a port", "water", "a pier"],
]
TINY_L = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 16, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def images() -> list[Path]:
    rng = np.random.default_rng(0)
    out = []
    for i, (w, h) in enumerate([(47, 33), (32, 40), (50, 50)]):
        path = HERE / f"image{i}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        out.append(path)
    return out


def used_token_rows() -> torch.Tensor:
    texts = ["A photo depicts " + t for t in CANDS + [r for rs in REFS for r in rs]]
    return torch.unique(clip.tokenize(texts, truncate=True))


def randomise(state: dict, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    keep = used_token_rows()
    out = {}
    for k, v in state.items():
        if not v.is_floating_point():
            out[k] = v
            continue
        v = v.float() + 0.1 * torch.randn(v.shape, generator=g)
        if k == "token_embedding.weight":
            mask = torch.zeros(v.shape[0], 1, dtype=torch.bool)
            mask[keep] = True
            v = torch.where(mask, v, torch.zeros_like(v))  # +0.0 (not -0.0): the zeros compress
        out[k] = v.half()  # stored in fp16 (a smaller file); loading copies the values exactly
    return out


def save_gz(obj, path: Path) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))


def scores(model, preprocess, paths) -> dict:
    model.eval()
    _, pac, cand_feats, lens = pac_score.PACScore(
        model, preprocess, [str(p) for p in paths], CANDS, "cpu", w=2.0
    )
    _, ref_sim = pac_score.RefPACScore(model, REFS, cand_feats, "cpu", torch.tensor(lens))
    ref_sim = np.array(ref_sim)
    refpac = 2 * pac * ref_sim / (pac + ref_sim)  # compute_metrics.py's line
    pixels = torch.stack([preprocess(Image.open(p)) for p in paths]).numpy()
    return {"pac": pac, "ref_sim": ref_sim, "refpac": refpac, "pixels": pixels}


def vit_l(paths) -> dict:
    torch.manual_seed(0)
    factory._MODEL_CONFIGS["ViT-L-14"] = TINY_L
    base = HERE / "_pretrained_tiny.pt"
    torch.save(authors_open_clip.CLIP(**TINY_L).state_dict(), base)
    factory.download_pretrained = lambda cfg, cache_dir=None: str(base)
    model, _, preprocess = authors_open_clip.create_model_and_transforms(
        "ViT-L-14", pretrained="laion2b_s32b_b82k"
    )
    base.unlink()
    model = model.float()
    checkpoint = {"state_dict": randomise(model.state_dict(), seed=1)}
    save_gz(checkpoint, HERE / "openClip_ViT-L-14.pth.gz")
    model.load_state_dict(checkpoint["state_dict"])
    return scores(model, preprocess, paths)


def not_an_archive(*_args, **_kwargs):
    raise RuntimeError("not a TorchScript archive")


def pacpp_b32(paths) -> dict:
    torch.manual_seed(0)
    plain = lora_model.CLIP(16, 16, 1, 64, 8, 77, 49408, 64, 1, 1, lora=-1)
    base = HERE / "_openai_tiny.pt"
    torch.save(plain.state_dict(), base)
    jit_load = torch.jit.load
    torch.jit.load = not_an_archive  # torch 2.x reads the whole file before refusing it; older torch did not
    model, preprocess = clip_lora.load(str(base), device="cpu", lora=4)
    torch.jit.load = jit_load
    base.unlink()
    checkpoint = {"state_dict": randomise(model.state_dict(), seed=2)}
    save_gz(checkpoint, HERE / "PAC++_clip_ViT-B-32.pth.gz")
    model.load_state_dict(checkpoint["state_dict"])
    return scores(model, preprocess, paths)


def main() -> None:
    paths = images()
    out = {"cands": np.array(CANDS)}
    for name, fn in (("vitl", vit_l), ("pacpp", pacpp_b32)):
        for k, v in fn(paths).items():
            out[f"{name}_{k}"] = np.asarray(v)
    np.savez(HERE / "pacscore_reference.npz", **out)
    (HERE / "refs.json").write_text(json.dumps(REFS))
    print({k: v.round(6).tolist() for k, v in out.items() if "pixels" not in k and k != "cands"})


if __name__ == "__main__":
    main()
