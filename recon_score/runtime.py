"""Devices, dtypes, seeded draws that leave the caller's random state alone, and the provenance block every
results file carries."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

DTYPES = ("bfloat16", "float16", "float32")  # the names a preset or --dtype uses
_DTYPES = {**{d: d for d in DTYPES}, "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """ "auto"/None -> cuda or cpu; "cpu:N" -> "cpu" (one CPU device: an index only changes which kernels some
    diffusers models pick, e.g. the Z-Image DiT's floats on "cpu:0", which accelerate hands every CPU rank)."""
    if device in (None, "", "auto"):
        return default_device()
    if str(device).split(":")[0] == "cpu":
        return "cpu"
    return device


def parse_dtype(name: str):
    import torch

    key = _DTYPES.get(name.lower())
    if key is None:
        raise ValueError(f"unknown dtype {name!r}; use one of float32, bfloat16, float16")
    return getattr(torch, key)


@contextlib.contextmanager
def seeded(seed: int, device: object = None) -> Iterator[None]:
    """torch's global generator (and every CUDA one when `device` is CUDA) seeded with `seed` inside the block and
    restored after it, so code that only draws from it (module init, transformers' `generate`) makes the draws of
    `torch.manual_seed(seed)` without reseeding the caller. The one place in the packages that seeds torch."""
    import torch

    on_cuda = device is not None and torch.device(device).type == "cuda"
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if on_cuda else []):
        if on_cuda:
            torch.manual_seed(seed)  # every generator, as the authors' torch.manual_seed; all are restored
        else:  # the CPU generator only: torch.manual_seed would also queue a seed for CUDA's lazy start
            torch.random.default_generator.manual_seed(seed)
        yield


@contextlib.contextmanager
def loading_bars_off(*libraries: str) -> Iterator[None]:
    """The per-file loading bars of `libraries` ("transformers", "diffusers") off inside the block and as they
    were after it: a model load inside a run's own progress bar stays quiet without silencing the caller's."""
    import importlib

    modules = [importlib.import_module(f"{name}.utils.logging") for name in libraries]
    were = [m.is_progress_bar_enabled() for m in modules]
    for m in modules:
        m.disable_progress_bar()
    try:
        yield
    finally:
        for m, on in zip(modules, were):
            if on:
                m.enable_progress_bar()


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# what every results file records the version of
VERSIONED = (
    "reconscore", "torch", "torchvision", "diffusers", "transformers", "accelerate", "open_clip_torch", "dreamsim",
    "stlpips-pytorch", "numpy", "pillow", "pycocoevalcap",
)  # fmt: skip


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision() -> str | None:
    """Commit of the reconscore checkout (None for an installed wheel); '+dirty' when there are local edits."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str:
        run = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=True
        )
        return run.stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def hardware_info() -> dict:
    import torch

    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def provenance() -> dict:
    from recon_score.images import follow_symlinks

    return {
        "versions": package_versions(),
        "git": git_revision(),
        "hardware": hardware_info(),
        "argv": sys.argv,
        "follow_symlinks": follow_symlinks(),
    }
