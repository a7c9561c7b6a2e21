"""Reference outputs of the CompoDiff authors' code for reconscore's loader tests (run once, outside the project).

Environment: the authors' compodiff/models.py and model_loader.py (navervision/CompoDiff), unmodified, in this
folder; torch and transformers, with einops, einops-exts and rotary-embedding-torch from the package index.

Tiny configuration through the authors' own builder (`CompoDiffConfig(embed_dim=16, model_depth=2, model_dim=8,
model_heads=2, timesteps=100)`); one substitution: the text projection, hard-wired to CLIP ViT-bigG-14's 1280-wide
states, takes 32-wide ones (`net.to_text_embeds`), so the test data stays small. Every parameter is random
(N(0, 0.1^2) added), except the first layer of the mask MLP (4096 inputs): zeroed, since composed retrieval always
passes an empty mask, where that layer's weight has no effect. Saved as config.json + pytorch_model.bin.

Writes next to this script: compodiff_tiny/ (config.json + pytorch_model.bin) and
compodiff_reference.npz (inputs, one network evaluation, and `sample` outputs with a fixed seed).
"""

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from model_loader import CompoDiffConfig, CompoDiffModel  # noqa: E402  (the authors' code)


def main() -> None:
    torch.manual_seed(0)
    config = CompoDiffConfig(embed_dim=16, model_depth=2, model_dim=8, model_heads=2, timesteps=100)
    model = CompoDiffModel(config)
    model.model.net.to_text_embeds = nn.Sequential(nn.Linear(32, 16))
    with torch.no_grad():
        for _name, p in model.named_parameters():
            p.add_(0.1 * torch.randn_like(p))
        model.model.net.to_mask_embeds[1].net[0][0].weight.zero_()
    model.eval()
    # transformers 5 refuses to save the shared rotary tensor; the 2023 layout (config.json + pytorch_model.bin,
    # what save_pretrained wrote by default then) is written the way save_pretrained wrote it
    out = HERE / "compodiff_tiny"
    config.save_pretrained(out)
    torch.save(model.state_dict(), out / "pytorch_model.bin")

    g = torch.Generator().manual_seed(1)
    image_cond = torch.randn(2, 1, 16, generator=g)
    text_cond = torch.randn(2, 77, 32, generator=g)
    negative_cond = torch.randn(2, 77, 32, generator=g)
    mask = torch.zeros(2, 64, 64)
    image_embed = torch.randn(2, 1, 16, generator=g)
    time = torch.tensor([37, 5])
    with torch.no_grad():
        net = model.model.net
        forward = net.forward(image_embed, image_cond, text_cond, mask, time)
        guided = net.forward_with_cond_scale(
            image_embed, image_cond, text_cond, mask, time, text_cond_uc=negative_cond, cond_scale=(1.5, 7.5)
        )
        sampled = model.sample(
            image_cond,
            text_cond,
            negative_cond,
            mask,
            num_samples_per_batch=2,
            cond_scale=(1.5, 7.5),
            timesteps=10,
            random_seed=0,
        )
    np.savez(
        HERE / "compodiff_reference.npz",
        image_cond=image_cond.numpy(),
        text_cond=text_cond.numpy(),
        negative_cond=negative_cond.numpy(),
        image_embed=image_embed.numpy(),
        time=time.numpy(),
        forward=forward.numpy(),
        guided=guided.numpy(),
        sampled=sampled.numpy(),
    )
    print("torch", torch.__version__, "transformers", __import__("transformers").__version__)


if __name__ == "__main__":
    main()
