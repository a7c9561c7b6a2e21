"""The CompoDiff authors' CLIP inputs for reconscore's test (run once, outside the project).

Usage: python make_compodiff_clip_inputs.py /path/to/navervision-CompoDiff-checkout ../../../data/metrics/pacscore

The authors' `compodiff/models.py` `CLIPHF` loads both CLIP towers with `from_pretrained(torch_dtype=float16)`
and casts them to float32; `demo_search.py` squashes the reference to 512x512 (`image.resize((512, 512))`) and
runs `build_model`'s `CLIPImageProcessor`. Here `CLIPHF` loads a tiny random fp32 `CLIPTextModel` (saved in
clip_inputs/text_encoder) and a tiny `CLIPVisionModelWithProjection` (not stored: only the text side's states
are compared); `build_model` runs with its three downloads replaced by stubs, to return its processor. Stored:
the text encoder's `encode_texts` states for fixed token ids, and the processor's pixels of two non-square
PNGs after the 512x512 squash (as the uint8 levels
the processor rescales and normalises).
"""

import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, CLIPVisionModelWithProjection

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(sys.argv[1]).resolve()))
IMAGES = Path(sys.argv[2]).resolve()

from compodiff import model_loader, models  # noqa: E402  (the authors' code)


def main() -> None:
    torch.manual_seed(0)
    text_dir, vision_dir = HERE / "clip_inputs" / "text_encoder", Path("/tmp/compodiff-tiny-vision")
    tcfg = CLIPTextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, max_position_embeddings=77, projection_dim=16,
                          eos_token_id=63, bos_token_id=62, pad_token_id=0)  # fmt: skip
    text = CLIPTextModel(tcfg)
    with torch.no_grad():
        for p in text.parameters():
            p.add_(0.1 * torch.randn_like(p))
    text.save_pretrained(text_dir)
    vcfg = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                            image_size=224, patch_size=32, projection_dim=16)  # fmt: skip
    CLIPVisionModelWithProjection(vcfg).save_pretrained(vision_dir)
    clip = models.CLIPHF(image_model_name=str(vision_dir), text_model_name=str(text_dir))
    ids = torch.tensor([[62, 5, 17, 33, 63] + [63] * 72, [62, 40, 2, 63] + [63] * 73])
    mask = (torch.arange(77)[None] < torch.tensor([[5], [4]])).long()
    with torch.no_grad():
        states = clip.encode_texts(ids, mask).numpy()
    model_loader.CLIPTokenizer.from_pretrained = staticmethod(lambda *a, **k: None)
    model_loader.CompoDiffModel.from_pretrained = staticmethod(lambda *a, **k: None)
    model_loader.build_clip = lambda *a, **k: None
    _, _, preprocess, _ = model_loader.build_model()
    pixels = []
    for i in range(2):  # 47x33 and 32x40
        image = Image.open(IMAGES / f"image{i}.png").resize((512, 512))  # demo_search.py
        pixels.append(preprocess(image, return_tensors="pt")["pixel_values"][0].numpy())
    # the processor rescales uint8 values by 1/255 then normalises: store those uint8 levels (exact, smaller)
    mean, std = np.array(preprocess.image_mean)[:, None, None], np.array(preprocess.image_std)[:, None, None]
    levels = np.stack([np.round((p * std + mean) * 255) for p in pixels])
    assert np.abs(levels - np.stack([(p * std + mean) * 255 for p in pixels])).max() < 1e-3
    np.savez_compressed(HERE / "clip_inputs" / "reference.npz", ids=ids.numpy(), mask=mask.numpy(),
                        states=states, levels=levels.astype(np.uint8))  # fmt: skip
    print(states.shape, np.stack(pixels).shape)


if __name__ == "__main__":
    main()
