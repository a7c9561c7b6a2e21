"""The wheel carries every data file the packages hold (prompts, templates, the sample, bundled arrays)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("recon_score", "describer", "retrieval", "preference_data", "eval")


def _package_files() -> set[str]:
    out = set()
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.add(path.relative_to(REPO).as_posix())
    return out


def test_wheel_carries_every_package_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp_path),
    ]
    subprocess.run([*cmd, str(src)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("reconscore-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_package_files() - names)
    assert not missing, f"files the wheel leaves out: {missing}"
    assert "preference_data/prompts/paraphrase.txt" in names and "recon_score/sample/captions.jsonl" in names
