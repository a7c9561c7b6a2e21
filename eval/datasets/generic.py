"""Any other caption set (RSIEval, CoTalk dense captions, your own): JSONL or CSV rows with `image`, optional
`id`, `split`, `label`, and references as a JSON list `references` (JSONL) or columns `reference`,
`reference_1`, `reference_2`, ... (CSV; JSONL accepts those too)."""

from __future__ import annotations

from pathlib import Path

from eval.datasets.base import CaptionDataset, CaptionSample, DatasetFormatError, check_unique, dataset_of
from recon_score.errors import InputError
from recon_score.images import resolve_under
from recon_score.textfiles import TextFileError, csv_dicts, json_objects, unencodable


def _refs(rec: dict, where: str) -> list[str]:
    refs = rec.get("references")
    if refs is None:
        keys = sorted(
            (k for k in rec if k == "reference" or k.startswith("reference_")),
            key=lambda k: int(k.split("_")[1]) if "_" in k and k.split("_")[1].isdigit() else 0,
        )
        refs = [rec[k] for k in keys if rec[k] not in (None, "")]
    if isinstance(refs, str):
        refs = [refs]
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise DatasetFormatError(f"{where}: `references` must be a list of strings")
    return [r.strip() for r in refs if r.strip()]


def load_generic(
    name: str, annotation: Path, images_dir: Path, split: str, *, check_images: bool = True
) -> CaptionDataset:
    rows: list[tuple[str, dict]] = []
    if annotation.suffix.lower() in (".jsonl", ".ndjson"):
        try:
            for lineno, rec in json_objects(annotation):
                rows.append((f"{annotation.name}:{lineno}", rec))
        except TextFileError as err:  # the dataset loaders' own error type, same message
            raise DatasetFormatError(str(err)) from None
    elif annotation.suffix.lower() in (".csv", ".tsv"):
        fields, records = csv_dicts(annotation)
        if "image" not in fields:
            raise DatasetFormatError(f"{annotation}: CSV needs an `image` column; found {fields}")
        for lineno, rec in records:
            if None in rec:
                raise DatasetFormatError(f"{annotation.name}:{lineno}: more fields than the header")
            rows.append((f"{annotation.name}:{lineno}", rec))
    else:
        raise DatasetFormatError(f"{annotation}: expected .jsonl or .csv")
    samples, ids = [], []
    for where, rec in rows:
        bad = unencodable(rec, "the row")
        if bad:
            raise DatasetFormatError(f"{where}: {bad}")
        image = rec.get("image")
        if not isinstance(image, str) or not image.strip():
            raise DatasetFormatError(f"{where}: missing `image`")
        rec_split = str(rec.get("split") or split)
        if split != "all" and rec.get("split") not in (None, "") and rec_split != split:
            continue
        try:
            path = resolve_under(images_dir, image.strip())
        except InputError as err:
            raise DatasetFormatError(f"{where}: {err}") from None
        image_id = str(rec.get("id") or image.strip())
        ids.append((image_id, where))
        samples.append(
            CaptionSample(image_id, image.strip(), path, _refs(rec, where), rec_split, rec.get("label"))
        )
    check_unique(ids, "image id")
    return dataset_of(name, split, [annotation], images_dir, samples, check=check_images)
