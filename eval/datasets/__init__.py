"""Captioning benchmark datasets, one registry: `load_dataset(name, root, split)`.

Layouts under --root (override with `annotations=` / `images_dir=`):
    rsicd, ucm-captions, sydney-captions, nwpu-captions   Karpathy JSON (dataset_rsicd.json, dataset_ucm.json,
                                                          dataset_sydney.json, dataset_nwpu.json) + images/
    rsitmd, ucm-precomp, rsicd-precomp, sydney-precomp     {split}_caps.txt + {split}_filename.txt + images/
    generic                                                any .jsonl/.csv (see eval.datasets.generic) + images/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eval.datasets.base import CaptionDataset, CaptionSample, DatasetFormatError
from recon_score.errors import ReconScoreError, did_you_mean

__all__ = ["DATASETS", "CaptionDataset", "CaptionSample", "DatasetFormatError", "load_dataset"]


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    layout: str  # karpathy | precomp | generic
    annotation: str  # default annotation file name (precomp: the prefix pattern)
    description: str


DATASETS: dict[str, DatasetSpec] = {
    s.name: s
    for s in (
        DatasetSpec(
            "rsicd",
            "karpathy",
            "dataset_rsicd.json",
            "RSICD (Lu et al. 2017), 10,921 images, 5 captions each",
        ),
        DatasetSpec(
            "ucm-captions", "karpathy", "dataset_ucm.json", "UCM-captions (Qu et al. 2016), 2,100 images"
        ),
        DatasetSpec(
            "sydney-captions",
            "karpathy",
            "dataset_sydney.json",
            "Sydney-captions (Qu et al. 2016), 613 images",
        ),
        DatasetSpec(
            "nwpu-captions",
            "karpathy",
            "dataset_nwpu.json",
            "NWPU-Captions (Cheng et al. 2022), 31,500 images",
        ),
        DatasetSpec(
            "rsitmd", "precomp", "{split}_caps.txt", "RSITMD (Yuan et al. 2022), precomp text layout"
        ),
        DatasetSpec("ucm-precomp", "precomp", "{split}_caps.txt", "UCM-captions in the precomp layout"),
        DatasetSpec("rsicd-precomp", "precomp", "{split}_caps.txt", "RSICD in the precomp layout"),
        DatasetSpec("sydney-precomp", "precomp", "{split}_caps.txt", "Sydney-captions in the precomp layout"),
        DatasetSpec(
            "generic",
            "generic",
            "captions.jsonl",
            "any JSONL/CSV: image, references, optional id/split/label",
        ),
    )
}


def load_dataset(
    name: str,
    root: str | Path,
    split: str = "test",
    *,
    annotations: str | Path | None = None,
    images_dir: str | Path | None = None,
    check_images: bool = True,
) -> CaptionDataset:
    """One split of dataset `name` under `root`; `split="all"` keeps every split (Karpathy/generic).

    Raises:
        ReconScoreError: unknown dataset, missing annotation files.
        DatasetFormatError: malformed annotations (the message names file and line or entry).
    """
    if name not in DATASETS:
        hint = did_you_mean(name, DATASETS)
        raise ReconScoreError(f"unknown dataset {name!r}{hint}; known: {', '.join(DATASETS)}")
    spec, root = DATASETS[name], Path(root)
    imgs = Path(images_dir) if images_dir else (root / "images" if (root / "images").is_dir() else root)
    if spec.layout == "precomp":
        if annotations:
            caps = Path(annotations)
            fnames = caps.with_name(caps.name.replace("_caps.txt", "_filename.txt"))
        else:
            caps, fnames = root / f"{split}_caps.txt", root / f"{split}_filename.txt"
        for p in (caps, fnames):
            if not p.is_file():
                raise ReconScoreError(
                    f"{name}: {p} not found (precomp layout: ROOT/{{split}}_caps.txt and "
                    "ROOT/{split}_filename.txt; or pass --annotations)"
                )
        from eval.datasets.precomp import load_precomp

        return load_precomp(name, caps, fnames, imgs, split, check_images=check_images)
    ann = Path(annotations) if annotations else root / spec.annotation
    if not ann.is_file():
        raise ReconScoreError(
            f"{name}: annotation file {ann} not found (expected ROOT/{spec.annotation}; or pass "
            "--annotations FILE)"
        )
    if spec.layout == "karpathy":
        from eval.datasets.karpathy import load_karpathy

        return load_karpathy(name, ann, imgs, split, check_images=check_images)
    from eval.datasets.generic import load_generic

    return load_generic(name, ann, imgs, split, check_images=check_images)
