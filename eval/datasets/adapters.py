"""Dataset splits as inputs of `reconscore score` (rows) and `reconscore describe` (images)."""

from __future__ import annotations

from eval.datasets.base import CaptionDataset


def score_rows(ds: CaptionDataset):
    """One row per reference caption (id `IMAGE_ID#k`): the ReconScore of the human references themselves.
    Images listed by the split but missing on disk become error rows."""
    from recon_score.inputs import InputRow

    rows = []
    missing = {id(m) for m in ds.missing}
    for sample in ds.listed:
        for k, ref in enumerate(sample.references or [None]):
            row = InputRow(
                index=len(rows),
                line=0,
                id=f"{sample.image_id}#{k}",
                image=sample.image,
                caption=ref,
                image_path=sample.path,
            )
            if id(sample) in missing:
                row.error = f"image {sample.image!r} of {ds.name}/{ds.split} not found in {ds.images_dir}"
            elif ref is None:
                row.error = f"{sample.image_id} has no reference caption"
            rows.append(row)
    return rows


def describe_items(ds: CaptionDataset):
    from describer.inputs import ImageItem

    items = []
    missing = {id(m) for m in ds.missing}
    for sample in ds.listed:
        item = ImageItem(
            len(items), sample.image_id, sample.image, sample.path, sample.references, root=ds.images_dir
        )
        if id(sample) in missing:
            item.error = f"image {sample.image!r} of {ds.name}/{ds.split} not found in {ds.images_dir}"
        items.append(item)
    return items


def split_inputs(kind: str, name: str, root, split: str, annotations=None) -> tuple[list, dict]:
    """Dataset `name`'s split as the inputs of `score` (rows, kind "score") or `describe` (images), and its
    summary for run.json."""
    from eval.datasets import load_dataset

    ds = load_dataset(name, root, split, annotations=annotations)
    return (score_rows(ds) if kind == "score" else describe_items(ds)), ds.summary()
