"""The "precomp" text layout of the RS image-text retrieval code bases (AMFMN, PE-RSITR, GaLR):
`{split}_caps.txt` and `{split}_filename.txt`, one caption per line, the image's file name on the same line of
the other file; five consecutive lines per image for UCM, RSICD, Sydney and RSITMD."""

from __future__ import annotations

from pathlib import Path

from eval.datasets.base import CaptionDataset, CaptionSample, DatasetFormatError, dataset_of, image_under
from eval.datasets.karpathy import label_from_filename
from recon_score.textfiles import read_lines

PER_IMAGE = 5  # captions per image in every precomp set


def _lines(path: Path) -> list[str]:
    """The file's lines without the trailing blank ones."""
    lines = [line for _, line in read_lines(path)]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def load_precomp(
    name: str,
    caps: Path,
    filenames: Path,
    images_dir: Path,
    split: str,
    *,
    check_images: bool = True,
) -> CaptionDataset:
    cap_lines, name_lines = _lines(caps), _lines(filenames)
    if len(cap_lines) != len(name_lines):
        raise DatasetFormatError(
            f"{caps.name} has {len(cap_lines)} lines but {filenames.name} has "
            f"{len(name_lines)}; they must pair line by line"
        )
    groups: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    prev = None
    for lineno, (cap, fname) in enumerate(zip(cap_lines, name_lines), start=1):
        fname, cap = fname.strip(), cap.strip()
        if not fname:
            raise DatasetFormatError(f"{filenames.name}:{lineno}: empty file name")
        if not cap:
            raise DatasetFormatError(f"{caps.name}:{lineno}: empty caption (for {fname})")
        if fname != prev and fname in groups:
            raise DatasetFormatError(
                f"{filenames.name}:{lineno}: {fname!r} reappears after other images "
                f"(first block at line {first_line[fname]}); an image's captions must be "
                "consecutive"
            )
        groups.setdefault(fname, []).append(cap)
        first_line.setdefault(fname, lineno)
        prev = fname
    notes = []
    odd = {f: len(c) for f, c in groups.items() if len(c) != PER_IMAGE}
    if odd:
        notes.append(
            f"{len(odd)} images do not have {PER_IMAGE} captions, e.g. "
            + ", ".join(f"{f} ({n})" for f, n in list(odd.items())[:3])
        )
    where = {f: f"{filenames.name}:{line}" for f, line in first_line.items()}
    samples = [
        CaptionSample(f, f, image_under(images_dir, f, where[f]), refs, split, label_from_filename(name, f))
        for f, refs in groups.items()
    ]
    return dataset_of(name, split, [caps, filenames], images_dir, samples, check=check_images, notes=notes)
