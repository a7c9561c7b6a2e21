"""The `smoke:` models: tiny random models built once per cache into a folder the real loaders read.

Builds are locked, renamed into place, and run out of process inside torch.distributed workers (transformers
saves weights on rank 0 only), so concurrent processes never see a partial fixture.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from recon_score.paths import WeightsLocation, cache_root
from recon_score.synthetic import MODELS, SyntheticName

# Bump when a builder changes: cached fixtures of another version are ignored.
FIXTURE_VERSION = 1
MEANINGLESS = "random weights; numbers are meaningless"


def _builders() -> dict[str, Callable[[Path], Path]]:
    from recon_score.synthetic import tiny_models as tiny

    return {
        "z-image": tiny.build_z_image,
        "stable-diffusion": tiny.build_stable_diffusion,
        "open-clip": tiny.build_open_clip,
        "dreamsim": tiny.build_dreamsim,
        "hf-clip": tiny.build_hf_clip,
        "hf-dinov2": tiny.build_hf_dinov2,
        "qwen3-vl": tiny.build_qwen3_vl,
        "qwen3-text": tiny.build_qwen3_text,
    }


FIXTURE_NAMES = tuple(m.family for m in MODELS.values() if m.prefix == "smoke")


def resolve(name: SyntheticName) -> dict:
    """The registry's entry point: the built folder of `smoke:FAMILY`, which the real loader reads."""
    path, revision = ensure_fixture(name.family), f"fixture:v{FIXTURE_VERSION}"
    return {"path": path, "revision": revision, "source": f"{revision} {path} ({MEANINGLESS})"}


def check(name: SyntheticName) -> WeightsLocation:
    p = fixture_path(name.family)
    built = "built" if (p / ".complete").exists() else "not built yet"
    return WeightsLocation(True, str(p), "built offline on first use (random weights)", built)


def fixture_path(name: str) -> Path:
    return cache_root() / "fixtures" / f"v{FIXTURE_VERSION}" / name


def _missing_weights(folder: Path) -> list[str]:
    """Component folders with a config but no weight file: what a save from a non-zero torch.distributed rank
    leaves behind (transformers writes weights on rank 0 only)."""
    weight_suffixes = (".safetensors", ".bin", ".pt", ".pth")
    missing = []
    for cfg in folder.rglob("config.json"):
        sub = cfg.parent
        if sub == folder and (folder / "model_index.json").exists():
            continue
        if not any(f.name.endswith(weight_suffixes) for f in sub.iterdir()):
            missing.append(str(sub.relative_to(folder)) or ".")
    return sorted(missing)


def _build(name: str, target: Path) -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # Inside an accelerate/torchrun worker: build in a plain child process so every rank writes a full copy.
        env = {k: v for k, v in os.environ.items() if k not in _DIST_ENV}
        cmd = [sys.executable, "-m", "recon_score.synthetic.smoke", name, str(target)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building fixture {name!r} failed:\n{proc.stderr[-2000:]}")
    else:
        _builders()[name](target)
    missing = _missing_weights(target)
    if missing:
        raise RuntimeError(f"fixture {name!r} was built without weights in: {', '.join(missing)}")


_DIST_ENV = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
)  # fmt: skip


def ensure_fixture(name: str) -> Path:
    """Folder of fixture `name`, built on first use by one process (an exclusive lock) into a temporary sibling
    renamed into place, so nobody ever sees a half-written fixture."""
    if name not in FIXTURE_NAMES:
        raise KeyError(
            f"unknown fixture {name!r}; known: {', '.join(FIXTURE_NAMES)} (use them as 'smoke:NAME')"
        )
    final = fixture_path(name)
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (final / ".complete").exists():  # built by the process we waited for
                return final
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
            try:
                _build(name, tmp / "model")
                (tmp / "model" / ".complete").write_text("ok\n")
                if final.exists():  # a partial folder from a crashed build before locking existed
                    shutil.rmtree(final)
                os.rename(tmp / "model", final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return final


def main(argv: list[str] | None = None) -> int:
    """`python -m recon_score.synthetic.smoke NAME TARGET`: build one fixture into TARGET (used by `_build`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in FIXTURE_NAMES:
        print(
            f"usage: python -m recon_score.synthetic.smoke {{{','.join(FIXTURE_NAMES)}}} TARGET",
            file=sys.stderr,
        )
        return 2
    _builders()[args[0]](Path(args[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
