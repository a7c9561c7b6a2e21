"""LPIPS (Zhang et al. 2018) as a pairwise distance, in its shift-tolerant form (ST-LPIPS, Ghildyal & Liu 2022),
with the complete weights stlpips-pytorch ships (so it works offline). Both images of a pair are squashed to
256x256 (bicubic), as DreamSim squashes; a distance cannot be cached per image, only evaluated on aligned pairs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from recon_score.encoders.base import Encoder, EncoderInfo, SquashingEncoder
from recon_score.paths import WeightsLocation

NETS = {"alex": "alex", "vgg": "vgg"}
SIZE = 256


def weights_file(net: str) -> Path:
    import stlpips_pytorch

    return (
        Path(stlpips_pytorch.__file__).resolve().parent / "weights" / "vST0.0" / f"{net}_shift_tolerant.pth"
    )


class LPIPSEncoder(SquashingEncoder):
    def __init__(self, model, info: EncoderInfo, device: str):
        super().__init__(model, info, device, size=SIZE, batch_size=16)

    def _prep(self, images) -> torch.Tensor:
        return self._pixels(images) * 2.0 - 1.0

    def _pair_distance(self, a, b):
        return self.model(self._prep(a), self._prep(b)).reshape(len(a))


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    if name not in NETS:
        raise ValueError(f"unknown LPIPS network {name!r}; choose one of {', '.join(NETS)}")
    from stlpips_pytorch.stlpips import LPIPS

    path = weights_file(NETS[name])
    # pretrained=False + our own weights_only load: the package's loader calls torch.load without weights_only
    model = LPIPS(pretrained=False, net=NETS[name], variant="shift_tolerant", verbose=False)
    state = torch.load(path, map_location="cpu", weights_only=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    learned_missing = [k for k in missing if not k.startswith("lins.")]  # `lins` aliases lin0..lin4
    if learned_missing or unexpected:
        raise RuntimeError(
            f"LPIPS weights {path} do not match the network: missing {learned_missing}, "
            f"unexpected {unexpected}"
        )
    info = EncoderInfo(
        spec=f"lpips:{name}",
        kind="distance",
        modalities=("image",),
        source=str(path),
        notes="shift-tolerant LPIPS; 256x256 squash; [-1, 1] inputs",
    )
    return LPIPSEncoder(model, info, device)


def check(name: str, *, weights_dir: Path | None) -> WeightsLocation:
    if name not in NETS:
        return WeightsLocation(False, detail=f"unknown LPIPS network {name!r}")
    p = weights_file(NETS[name])
    return WeightsLocation(p.is_file(), str(p), "stlpips-pytorch package")
