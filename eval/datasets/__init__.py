"""Captioning benchmark datasets, one registry: `load_dataset(name, root, split)`. The layout each expects under
--root is in docs/evaluate.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eval.datasets.base import CaptionDataset, CaptionSample, DatasetFormatError
from recon_score.errors import ReconScoreError
from recon_score.registry import Entry, Registry

__all__ = ["DATASETS", "CaptionDataset", "CaptionSample", "DatasetFormatError", "load_dataset"]

_KARPATHY = "eval.datasets.karpathy:load_karpathy"
_PRECOMP = "eval.datasets.precomp:load_precomp"


@dataclass(frozen=True)
class CaptionDatasetEntry(Entry):
    """`target` loads the layout; `annotation` is the default annotation file under --root."""

    annotation: str  # precomp: the captions file pattern ({split}_caps.txt, beside {split}_filename.txt)

    @property
    def precomp(self) -> bool:
        return self.target == _PRECOMP


def _d(name: str, target: str, annotation: str, help: str) -> CaptionDatasetEntry:
    return CaptionDatasetEntry(name, target, help, annotation)


DATASETS: Registry[CaptionDatasetEntry] = Registry(
    "dataset",
    (
        _d(
            "rsicd", _KARPATHY, "dataset_rsicd.json", "RSICD (Lu et al. 2017), 10,921 images, 5 captions each"
        ),
        _d("ucm-captions", _KARPATHY, "dataset_ucm.json", "UCM-captions (Qu et al. 2016), 2,100 images"),
        _d(
            "sydney-captions",
            _KARPATHY,
            "dataset_sydney.json",
            "Sydney-captions (Qu et al. 2016), 613 images",
        ),
        _d(
            "nwpu-captions",
            _KARPATHY,
            "dataset_nwpu.json",
            "NWPU-Captions (Cheng et al. 2022), 31,500 images",
        ),
        _d("rsitmd", _PRECOMP, "{split}_caps.txt", "RSITMD (Yuan et al. 2022), precomp text layout"),
        _d("ucm-precomp", _PRECOMP, "{split}_caps.txt", "UCM-captions in the precomp layout"),
        _d("rsicd-precomp", _PRECOMP, "{split}_caps.txt", "RSICD in the precomp layout"),
        _d("sydney-precomp", _PRECOMP, "{split}_caps.txt", "Sydney-captions in the precomp layout"),
        _d(
            "generic",
            "eval.datasets.generic:load_generic",
            "captions.jsonl",
            "any JSONL/CSV: image, references, optional id/split/label",
        ),
    ),
)


def load_dataset(
    name: str,
    root: str | Path,
    split: str = "test",
    *,
    annotations: str | Path | None = None,
    images_dir: str | Path | None = None,
    check_images: bool = True,
) -> CaptionDataset:
    """One split of dataset `name` under `root`; `split="all"` keeps every split (Karpathy/generic). Malformed
    annotations raise DatasetFormatError naming the file and line or entry."""
    spec, root = DATASETS[name], Path(root)
    imgs = Path(images_dir) if images_dir else (root / "images" if (root / "images").is_dir() else root)
    load = spec.load()
    if spec.precomp:
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
        return load(name, caps, fnames, imgs, split, check_images=check_images)
    ann = Path(annotations) if annotations else root / spec.annotation
    if not ann.is_file():
        raise ReconScoreError(
            f"{name}: annotation file {ann} not found (expected ROOT/{spec.annotation}; or pass "
            "--annotations FILE)"
        )
    return load(name, ann, imgs, split, check_images=check_images)
