"""Karpathy-format caption JSON (`images[].filename / split / sentences[].raw`), as shipped for RSICD
(`dataset_rsicd.json`), UCM-captions (`dataset_ucm.json`), Sydney-captions (`dataset_sydney.json`); and the
NWPU-Captions file (`dataset_nwpu.json`: {category: [{filename, split, raw, raw_1, ... raw_4}]})."""

from __future__ import annotations

import json
import re
from pathlib import Path

from eval.datasets.base import (
    CaptionDataset,
    CaptionSample,
    DatasetFormatError,
    check_unique,
    dataset_of,
    image_under,
)
from recon_score.textfiles import TextFileError, read_json, unencodable

# UC Merced Land Use, alphabetical; UCM-captions image n.tif is class (n-1)//100 (PROVENANCE of ../shared/data).
UCM_CLASSES = (
    "agricultural",
    "airplane",
    "baseballdiamond",
    "beach",
    "buildings",
    "chaparral",
    "denseresidential",
    "forest",
    "freeway",
    "golfcourse",
    "harbor",
    "intersection",
    "mediumresidential",
    "mobilehomepark",
    "overpass",
    "parkinglot",
    "river",
    "runway",
    "sparseresidential",
    "storagetanks",
    "tenniscourt",
)


def label_from_filename(dataset: str, filename: str) -> str | None:
    stem = Path(filename).stem
    if dataset.startswith("ucm"):
        if stem.isdigit() and 1 <= int(stem) <= 2100:
            return UCM_CLASSES[(int(stem) - 1) // 100]
        return None
    m = re.fullmatch(r"([A-Za-z][A-Za-z_]*?)_?\d+", stem)  # RSICD/RSITMD: airport_348, denseresidential_12
    return m.group(1).rstrip("_").lower() if m else None


def load_karpathy(
    name: str,
    annotation: Path,
    images_dir: Path,
    split: str,
    *,
    check_images: bool = True,
) -> CaptionDataset:
    try:
        data = read_json(annotation)
    except TextFileError as err:  # the dataset loaders' own error type, same message
        raise DatasetFormatError(str(err)) from None
    bad = unencodable(data, "the file")
    if bad:  # a caption the results could never be written with
        raise DatasetFormatError(f"{annotation}: {bad}")
    if isinstance(data, dict) and "images" not in data:
        return _load_nwpu(name, data, annotation, images_dir, split, check_images=check_images)
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DatasetFormatError(
            f"{annotation}: expected a JSON object with an `images` list (Karpathy format)"
        )
    samples, ids = [], []
    for k, im in enumerate(images):
        where = f"{annotation.name}: images[{k}]"
        try:
            filename, im_split = im["filename"], im.get("split", "")
            sentences = im["sentences"]
        except (KeyError, TypeError) as err:
            raise DatasetFormatError(
                f"{where}: missing {err} (need filename, split, sentences[].raw)"
            ) from None
        filename = _text(filename, f"{where}.filename")
        if not isinstance(sentences, list):
            raise DatasetFormatError(f"{where}.sentences must be a list, got {_shown(sentences)}")
        refs = [_raw(s, f"{where}.sentences[{j}]") for j, s in enumerate(sentences)]
        if split != "all" and im_split != split:
            continue
        sub = im.get("filepath") or ""
        if sub:
            sub = _text(sub, f"{where}.filepath")
        rel = f"{sub}/{filename}" if sub else filename
        ids.append((filename, where))
        label = label_from_filename(name, filename)
        path = image_under(images_dir, rel, f"{where}.filename")
        samples.append(CaptionSample(filename, rel, path, refs, im_split, label))
    check_unique(ids, "image filename")
    return dataset_of(name, split, [annotation], images_dir, samples, check=check_images)


def _load_nwpu(name, data: dict, annotation: Path, images_dir: Path, split: str, *, check_images: bool):
    samples, ids = [], []
    for category, entries in data.items():
        if not isinstance(entries, list):
            raise DatasetFormatError(
                f"{annotation}: category {category!r} is not a list (NWPU-Captions format)"
            )
        for k, e in enumerate(entries):
            where = f"{annotation.name}: {category}[{k}]"
            try:
                filename, im_split = e["filename"], e["split"]
            except (KeyError, TypeError) as err:
                raise DatasetFormatError(f"{where}: missing {err}") from None
            filename = _text(filename, f"{where}.filename")
            raws = [key for key in sorted(e, key=_raw_order) if key.startswith("raw")]
            refs = [_raw(e, f"{where}", key) for key in raws]
            if split != "all" and im_split != split:
                continue
            rel = f"{category}/{filename}"
            path = (
                images_dir / rel
                if (images_dir / rel).exists() or not (images_dir / filename).exists()
                else (images_dir / filename)
            )
            ids.append((filename, where))
            rel = str(path.relative_to(images_dir))
            path = image_under(images_dir, rel, f"{where}.filename")
            samples.append(CaptionSample(filename, rel, path, refs, im_split, category))
    check_unique(ids, "image filename")
    return dataset_of(name, split, [annotation], images_dir, samples, check=check_images)


def _shown(value) -> str:
    return json.dumps(value, default=str)[:60]


def _text(value, where: str) -> str:
    """A non-empty string field, else the one-line error naming it (`Path(None)` was a TypeError traceback)."""
    if not isinstance(value, str) or not value.strip():
        raise DatasetFormatError(f"{where} must be a non-empty string, got {_shown(value)}")
    return value


def _raw(sentence, where: str, key: str = "raw") -> str:
    """A sentence's caption (`raw`, NWPU's `raw_1`...): a string (a null used to become the reference "None")."""
    if not isinstance(sentence, dict) or key not in sentence:
        raise DatasetFormatError(f"{where}: missing {key!r} (need sentences[].raw)")
    raw = sentence[key]
    if not isinstance(raw, str):
        raise DatasetFormatError(f"{where}.{key} must be a string, got {_shown(raw)}")
    return raw.strip()


def _raw_order(key: str) -> int:
    return 0 if key == "raw" else int(key.split("_")[1]) if key.split("_")[-1].isdigit() else 99
