"""Reading released checkpoints safely and loading them strictly: `torch.load(weights_only=True)` (or
safetensors), and a state dict whose keys and shapes must match the module exactly, with one error naming the
first differing keys. Used by the released CLIP fine-tunes (PAC-S, Long-CLIP) and CycleReward."""

from __future__ import annotations

from pathlib import Path

import torch

from recon_score.errors import ModelNotAvailableError


def read_checkpoint(path: Path, what: str) -> dict:
    """A torch checkpoint read with weights_only=True (no code runs); anything else is one clear error."""
    import pickle

    def refuse(reason: str, fix: str = "Use the authors' released file.") -> ModelNotAvailableError:
        return ModelNotAvailableError(what, searched=[str(path)], reason=reason, fix=fix)

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as err:  # safetensors raises its own error types
            raise refuse(f"unreadable safetensors ({type(err).__name__})", "Re-download it.") from None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as err:
        why = f"not a weights-only torch checkpoint ({type(err).__name__})"
        raise refuse(
            why, "Use the authors' released file; reconscore never unpickles arbitrary objects."
        ) from None
    if not isinstance(data, dict):
        raise refuse("not a state dict")
    return data


def load_strict(model: torch.nn.Module, state: dict, what: str) -> torch.nn.Module:
    """`model` with `state` loaded strictly (assign: the model may live on the meta device); a mismatch names the
    first differing keys."""
    expected = model.state_dict()
    odd = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if odd:
        raise ModelNotAvailableError(
            what, searched=[], reason=f"non-tensor entries {odd[:3]}", fix="Use the authors' released file."
        )
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or shapes:
        raise ModelNotAvailableError(
            what,
            searched=[],
            reason=f"{len(missing)} missing keys {missing[:3]}, {len(unexpected)} unexpected {unexpected[:3]}, "
            f"{len(shapes)} of another shape {shapes[:3]}",
            fix="The file does not have the released key layout; check that it is the authors' checkpoint.",
        )
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval().requires_grad_(False)
