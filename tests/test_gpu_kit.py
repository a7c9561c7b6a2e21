"""The GPU benchmark kit (benchmarks/gpu/): what prepare.sh carries plus what the image has covers what the
benchmark imports. The full check runs the scaled-down benchmark (`python benchmarks/gpu/check_imports.py`,
minutes); here its rules run on the imports that broke run.sh once (diffusers -> requests)."""

import importlib.util
import re
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KIT = REPO / "benchmarks" / "gpu"


@pytest.fixture(scope="module")
def kit():
    spec = importlib.util.spec_from_file_location("check_imports", KIT / "check_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _carried(kit) -> dict[str, list[str]]:
    """The distributions prepare.sh pins, with their declared requirements (local metadata)."""
    pins = re.findall(r'"([A-Za-z0-9_.-]+)==[^"]+"', (KIT / "prepare.sh").read_text())
    return {kit.normalize(p): metadata.distribution(p).requires or [] for p in pins}


# what diffusers, its scheduler code and the HTTP stack import at run time (seen in a scaled-down run)
IMPORTED = [
    "diffusers",
    "requests",
    "urllib3",
    "charset_normalizer",
    "certifi",
    "idna",
    "torch",
    "transformers",
    "huggingface_hub",
    "open_clip",
    "dreamsim",
    "peft",
    "ftfy",
    "wcwidth",
    "yaml",
    "PIL",
    "scipy",
    "_cyutility",
    "json",
    "recon_score",
]


def test_the_image_list_is_stated_once(kit):
    installed, optional = kit.image_distributions()
    for name in ("torch", "transformers", "huggingface-hub", "accelerate", "timm", "torchmetrics"):
        assert name in installed
    assert "requests" not in installed and "diffusers" not in installed
    assert optional == {"scipy", "dill"}


def test_prepare_carries_what_diffusers_imports(kit):
    installed, optional = kit.image_distributions()
    missing, notes = kit.check(IMPORTED, _carried(kit), installed, optional)
    assert missing == []
    assert any(n.startswith("scipy: optional") for n in notes)
    assert any(n.startswith("_cyutility: no distribution") for n in notes)


def test_without_the_http_wheels_the_check_fails(kit):
    installed, optional = kit.image_distributions()
    wheels = {
        k: v for k, v in _carried(kit).items() if k not in ("requests", "urllib3", "charset-normalizer")
    }
    missing, _ = kit.check(IMPORTED, wheels, installed, optional)
    assert [m.split()[0] for m in missing] == ["requests", "urllib3", "charset_normalizer"]


def test_every_carried_wheel_is_pure_python():
    text = (KIT / "prepare.sh").read_text()
    assert "--only-binary=:all: --platform any --implementation py" in text
    assert "*-py3-none-any.whl" in text  # the script refuses any other wheel it ends up with


def test_an_import_only_made_because_it_is_installed_here_is_not_missing(kit):
    """torch.utils.data.graph imports dill only when it is installed: in the project's environment it is, on
    the GPU image it is not, and the run does not need it."""
    installed, optional = kit.image_distributions()
    missing, notes = kit.check(["torch", "dill"], _carried(kit), installed, optional)
    assert missing == [] and any(n.startswith("dill: optional") for n in notes)


def _dist(folder: Path, name: str, version: str, requires: list[str]) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")


def test_versions_the_wheels_need_are_checked(kit, tmp_path):
    """pip --no-deps installs open_clip next to whatever timm the image has: run.sh stops when a present
    requirement is of a version the wheel does not accept, and names both."""
    deps, image = tmp_path / "deps", tmp_path / "image"
    _dist(deps, "open_clip_torch", "3.3.0", ["timm>=1.0.17", "torch>=2.0", 'pytest; extra == "test"'])
    _dist(image, "timm", "1.0.15", [])
    assert kit.unmet_versions(deps, [str(image)]) == ["open_clip_torch needs timm>=1.0.17, found 1.0.15"]
    (image / "timm-1.0.15.dist-info" / "METADATA").unlink()
    (image / "timm-1.0.15.dist-info").rmdir()
    _dist(image, "timm", "1.0.17", [])
    assert (
        kit.unmet_versions(deps, [str(image)]) == []
    )  # torch absent here: check()'s business, not a version


def test_run_sh_calls_python3():
    """The GPU machine has python3 and no `python`: every call goes through $PYTHON (default python3)."""
    text = (KIT / "run.sh").read_text()
    assert 'py="${PYTHON:-python3}"' in text
    calls = [line for line in text.splitlines() if re.search(r"(^|[\s;(])python\s", line.split("#")[0])]
    assert calls == []
    assert '"$py" "$repo/benchmarks/gpu/check_imports.py" --versions "$deps"' in text
