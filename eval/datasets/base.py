"""A captioning dataset split: images, their human references, optional class labels. Loaders report missing image
files (never dropped silently) and raise on duplicate ids and malformed lines, naming the file and line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from recon_score.errors import ReconScoreError


class DatasetFormatError(ReconScoreError, ValueError):
    """An annotation file that does not follow its format; the message names the file and line."""


@dataclass
class CaptionSample:
    image_id: str  # unique within the split (the file name for most RS sets)
    image: str  # path relative to the images folder
    path: Path  # absolute path
    references: list[str]
    split: str
    label: str | None = None  # scene class where the dataset has one


@dataclass
class CaptionDataset:
    name: str
    split: str
    annotations: list[Path]
    images_dir: Path
    samples: list[CaptionSample]
    missing: list[CaptionSample] = field(default_factory=list)  # listed but not on disk
    notes: list[str] = field(default_factory=list)  # irregularities worth a look (not errors)
    listed: list[CaptionSample] = field(default_factory=list)  # everything the split lists, in file order

    @property
    def n_references(self) -> int:
        return sum(len(s.references) for s in self.samples)

    def summary(self) -> dict:
        return {
            "dataset": self.name,
            "split": self.split,
            "images": len(self.samples),
            "references": self.n_references,
            "missing_images": [s.image for s in self.missing],
            "annotations": [str(p) for p in self.annotations],
            "images_dir": str(self.images_dir),
            "notes": self.notes,
        }


def dataset_of(
    name: str, split: str, annotations: list[Path], images_dir: Path, samples: list, *, check: bool, notes=()
) -> CaptionDataset:
    """The split with its listed `samples` sorted into present and missing files (all present unless `check`)."""
    missing = [s for s in samples if check and not s.path.is_file()]
    gone = {id(s) for s in missing}
    present = [s for s in samples if id(s) not in gone]
    return CaptionDataset(name, split, annotations, images_dir, present, missing, list(notes), listed=samples)


def image_under(images_dir: Path, rel: str, where: str) -> Path:
    """`images_dir / rel`, refused (naming `where`) when the path as written leaves the images folder (`..`, an
    absolute path) or an existing file is refused by `resolve_under` (a symlink out under --no-follow-symlinks, a
    FIFO); a missing file inside the folder is kept, and the split lists it as missing."""
    from recon_score.errors import InputError
    from recon_score.images import resolve_under, written_under

    try:
        if os.path.lexists(written_under(images_dir, rel)):
            resolve_under(images_dir, rel)
    except InputError as err:
        raise DatasetFormatError(f"{where}: {err}") from None
    return images_dir / rel


def check_unique(ids: list[tuple[str, str]], what: str) -> None:
    """ids: (id, location) pairs; raises on the first duplicate, naming both locations."""
    seen: dict[str, str] = {}
    for i, loc in ids:
        if i in seen:
            raise DatasetFormatError(f"{loc}: duplicate {what} {i!r} (first at {seen[i]})")
        seen[i] = loc
