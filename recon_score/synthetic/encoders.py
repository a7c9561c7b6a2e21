"""The synthetic encoders (`smoke:dreamsim`, `smoke:open-clip[/RELEASE]`, `shapes:dreamsim[@SCALE]`,
`shapes:open-clip/ARCH`): what recon_score.hub hands an encoder family's loader, a folder where the library loads
one (`smoke:open-clip`), else a `build` that makes the random model on the target device.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from recon_score.paths import WeightsLocation
from recon_score.synthetic import SyntheticName, smoke


def resolve(name: SyntheticName) -> dict:
    """The registry's entry point (the fields of recon_score.hub.ResolvedModel but the name)."""
    return _dreamsim(name) if name.family == "dreamsim" else _open_clip(name)


def check(name: SyntheticName) -> WeightsLocation:
    if name.prefix == "smoke":
        return smoke.check(name)
    from recon_score.synthetic import shapes  # imports torch: only for a shapes name, as before

    return shapes.check(name)


def _dreamsim(name: SyntheticName) -> dict:
    if name.prefix == "shapes":  # dreamsim's own PerceptualModel + LoRA, built on the device
        from recon_score.synthetic import shapes

        return _random(name, partial(shapes.build_dreamsim_ensemble, name.scale), shapes.SHAPES_NOTE)
    found = smoke.resolve(name)
    return {**found, "build": partial(_tiny_dreamsim, found["path"])}


def _tiny_dreamsim(path: Path, *, device):
    from recon_score.synthetic.tiny_models import TinyDreamSim

    return TinyDreamSim.from_dir(path).to(device)


def _open_clip(name: SyntheticName) -> dict:
    from recon_score.encoders.open_clip import RELEASES, release_model
    from recon_score.synthetic import shapes

    if name.arch in RELEASES:
        release = RELEASES[name.arch]
        note = f"{name.prefix}: {release.paper} architecture, random weights (numbers are meaningless)"
        return _random(name, partial(release_model, release, mode=name.prefix), note, stands_for=name.arch)
    if name.prefix == "smoke":
        if name.arch:
            raise ValueError(f"{name.arch!r} is not a released CLIP fine-tune; known: {', '.join(RELEASES)}")
        return smoke.resolve(name)  # a folder in open_clip's local-dir layout
    import open_clip

    if name.arch not in open_clip.list_models():
        raise ValueError(f"unknown open_clip architecture {name.arch!r}; see open_clip.list_models()")
    return _random(name, partial(shapes.build_open_clip, name.arch), shapes.SHAPES_NOTE, stands_for=name.arch)


def _random(name: SyntheticName, build, source: str, *, stands_for: str = "") -> dict:
    """A model with no folder: made by `build(device=...)`."""
    from recon_score.synthetic.shapes import SHAPES_VERSION

    revision = f"shapes:v{SHAPES_VERSION}" if name.prefix == "shapes" else f"fixture:v{smoke.FIXTURE_VERSION}"
    return {"path": None, "revision": revision, "build": build, "source": source, "stands_for": stands_for}
