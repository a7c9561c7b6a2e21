"""Reference data for tests/eval/test_metrics_cyclereward.py, made once with the authors' `cyclereward` 0.1.7
package (hjbahng/cyclereward) in a scratch environment where it imports (transformers 4.44.2,
huggingface_hub 0.24.7; it fails on transformers >= 4.57).

    python make_cyclereward_reference.py OUT.json

1. The full-size model's state-dict layout (name -> shape), built offline: BLIP's download is skipped
   (blip_path = "") and the BERT tokenizer is replaced by one from a small vocabulary (the layout does not
   depend on it).
2. The package's own `CycleReward.score(image, caption)` at a reduced size (ViT and BERT of width 64, depth 2,
   the package's classes throughout) with every weight drawn from one numpy PCG64 stream in sorted-key order,
   on a bundled sample image and three captions (one past the 128-token limit).
"""

import json
import sys
from pathlib import Path

import cyclereward.blip.blip_pretrain as bp
import cyclereward.model as cm
import numpy as np
import torch
from cyclereward.blip.vit import VisionTransformer
from PIL import Image

REPO = Path(__file__).resolve().parents[3]
IMAGE = "recon_score/sample/images/UCM_1.tif"
WORDS = [
    "a",
    "an",
    "the",
    "of",
    "with",
    "and",
    "in",
    "on",
    "there",
    "is",
    "are",
    "many",
    "some",
    "green",
    "trees",
    "buildings",
    "road",
    "roads",
    "river",
    "farm",
    "field",
]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, ",", "."]
CAPTIONS = [
    "there is a river with green trees .",
    "many buildings and some roads",
    " ".join(["a green field with trees"] * 40),  # 200 word tokens: past max_length 128
]
MED_FULL = {  # BLIP's configs/med_config.json (the release's med_config.json)
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 30524,
    "encoder_width": 768,
    "add_cross_attention": True,
}
SMALL = {"width": 64, "depth": 2, "heads": 4, "text_layers": 2, "text_heads": 4, "intermediate": 128}


def tokenizer(folder: Path):
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tok = BertTokenizer(str(folder / "vocab.txt"))
    tok.add_special_tokens({"bos_token": "[DEC]"})
    tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    tok.enc_token_id = tok.additional_special_tokens_ids[0]
    return tok


def fill(state: dict) -> dict:
    """Every tensor from one PCG64 stream, sorted keys: 0.05 * N(0, 1), + 1 for norm weights; position ids."""
    rng = np.random.default_rng(0)
    out = {}
    for k in sorted(state):
        shape = tuple(state[k].shape)
        if k.endswith("position_ids"):
            out[k] = torch.arange(shape[-1]).expand(shape).clone()
            continue
        v = rng.standard_normal(size=shape).astype(np.float32) * 0.05
        if k.endswith(".weight") and "norm" in k.lower():
            v += 1.0
        out[k] = torch.from_numpy(v)
    return out


def build(tmp: Path, med: dict, small: bool):
    (tmp / "med_config.json").write_text(json.dumps(med))
    bp.init_tokenizer = lambda: tokenizer(tmp / "tok")
    cm.cyclereward_args["blip_path"] = ""  # no BLIP download: the CycleReward checkpoint holds every weight
    if small:
        cm.cyclereward_args["mlp_dim"] = SMALL["width"]
        bp.create_vit = lambda *a, **k: (
            VisionTransformer(
                img_size=224,
                patch_size=16,
                embed_dim=SMALL["width"],
                depth=SMALL["depth"],
                num_heads=SMALL["heads"],
            ),
            SMALL["width"],
        )
    return cm.CycleReward(device="cpu", med_config=str(tmp / "med_config.json")).eval()


def main(out: Path) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        full = build(Path(d), MED_FULL, small=False)
        layout = {k: list(v.shape) for k, v in full.state_dict().items()}
        del full
    med_small = {
        **MED_FULL,
        "hidden_size": SMALL["width"],
        "num_hidden_layers": SMALL["text_layers"],
        "num_attention_heads": SMALL["text_heads"],
        "intermediate_size": SMALL["intermediate"],
        "vocab_size": len(VOCAB) + 2,
    }
    with tempfile.TemporaryDirectory() as d:
        model = build(Path(d), med_small, small=True)
        model.load_state_dict(fill(model.state_dict()), strict=True)
        image = model.preprocess(Image.open(REPO / IMAGE).convert("RGB")).unsqueeze(0)
        scores = [float(model.score(image, c)[0, 0]) for c in CAPTIONS]
        small_layout = {k: list(v.shape) for k, v in model.state_dict().items()}
    out.write_text(
        json.dumps(
            {
                "package": "cyclereward 0.1.7",
                "full_layout": layout,
                "small": SMALL,
                "small_med_config": med_small,
                "small_layout": small_layout,
                "vocab": VOCAB,
                "image": IMAGE,
                "captions": CAPTIONS,
                "scores": scores,
            },
            indent=0,
        )
        + "\n"
    )
    print(len(layout), "keys;", "scores", scores)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
