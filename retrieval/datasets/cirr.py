"""CIRR (Liu et al., ICCV 2021), validation split, in Cuberick-Orion/CIRR's layout: the reference is removed from its
own ranking; Recall@K and Recall_subset@K within the query's ``img_set``. See docs/retrieval.md, "Benchmarks and
their protocols"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from recon_score.textfiles import read_json
from retrieval.datasets.base import (
    Benchmark,
    Protocol,
    Query,
    QueryImage,
    checked_benchmark,
    find_file,
    parse_options,
)
from retrieval.errors import DatasetLayoutError

PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(1, 5, 10, 50),
    headline=("hit@1", "hit@5", "hit@10", "hit@50", "subset_hit@1", "subset_hit@2", "subset_hit@3"),
    source="CIRR (Liu et al. 2021): Recall@K without the reference image, Recall_subset@K within img_set; "
    "the EDIR paper appendix B (Recall@1)",
    subset_ks=(1, 2, 3),
)
QUERY_IMAGE = QueryImage(
    "excluded",
    'miccunifi/SEARLE src/validate.py:198-201 (cirr_compute_val_metrics: "Delete the reference image from the '
    'results"); the EDIR paper appendix B: "CIRR excludes the reference image from the retrieval corpus"',
)


@dataclass(frozen=True)
class CirrOptions:
    split: str = "val"


def _pair(rec: object, where: str) -> tuple[object, str, str | None, str, list[str]]:
    """(pairid, reference, target_hard, caption, img_set members) of one caption record; a record of another
    shape is one error naming the file and the item, never a KeyError or TypeError."""
    if not isinstance(rec, dict):
        raise DatasetLayoutError(f"{where} is a JSON {type(rec).__name__}, not a caption record (an object)")
    for key in ("pairid", "reference", "caption"):
        if key not in rec:
            raise DatasetLayoutError(
                f"{where}: missing {key!r} (a CIRR caption record has pairid, reference, "
                "target_hard, caption, img_set)"
            )
    ref, target, caption = rec["reference"], rec.get("target_hard"), rec["caption"]
    img_set = rec.get("img_set", {})
    members = img_set.get("members", []) if isinstance(img_set, dict) else None
    bad = [k for k, v in (("reference", ref), ("caption", caption)) if not isinstance(v, str)]
    bad += [] if target is None or isinstance(target, str) else ["target_hard"]
    bad += [] if isinstance(members, list) and all(isinstance(m, str) for m in members) else ["img_set"]
    if bad:
        raise DatasetLayoutError(
            f"{where}: {', '.join(bad)} of the wrong type (reference, target_hard and caption are strings; "
            "img_set an object whose members is a list of image names)"
        )
    return rec["pairid"], ref, target, caption, members


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    opts = parse_options(CirrOptions, options, benchmark="cirr")
    root, s = Path(root), opts.split
    caps = find_file(
        root,
        [f"captions/cap.rc2.{s}.json", f"cirr/captions/cap.rc2.{s}.json", f"cirr_cap.rc2.{s}.json"],
        "CIRR captions",
        given=annotations,
    )
    split = find_file(
        root,
        [
            f"image_splits/split.rc2.{s}.json",
            f"cirr/image_splits/split.rc2.{s}.json",
            f"cirr_split.rc2.{s}.json",
        ],
        "CIRR image split",
    )
    names = read_json(split, expect=dict)
    for name, rel in names.items():
        if not isinstance(rel, str):
            raise DatasetLayoutError(f"{split}: image {name!r} maps to {rel!r}, not a path")
    database = [str(Path(p)) for p in names.values()]  # Path() drops the leading "./"
    index = {name: i for i, name in enumerate(names)}
    queries, positives, subset = [], [], []
    for n, rec in enumerate(read_json(caps, expect=list), start=1):
        pair, ref, target, caption, members = _pair(rec, f"{caps}: item {n}")
        if ref not in index or (target is not None and target not in index):
            raise DatasetLayoutError(f"{caps}: pair {pair} names an image missing from {split}")
        qi = len(queries)
        queries.append(
            Query(
                id=str(pair),
                reference=database[index[ref]],
                text=caption.strip(),
                group="cirr",
                extra={"target": target, "img_set": "|".join(members)},
            )
        )
        if target is not None:
            positives.append((qi, index[target]))
        for member in members:
            if member not in index:
                raise DatasetLayoutError(
                    f"{caps}: pair {pair}'s img_set names {member!r}, missing from {split}"
                )
            subset.append((qi, index[member]))
    return checked_benchmark(
        "cirr",
        root,
        "CIRR gallery",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE,
        subset=subset,
        options={"split": s, "captions": str(caps), "image_split": str(split)},
    )
