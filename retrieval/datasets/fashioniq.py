"""FashionIQ (Wu et al., CVPR 2021), validation split, in XiaoxiaoGuo/fashion-iq's layout: one gallery per category,
Recall@10 and @50. See docs/retrieval.md, "Benchmarks and their protocols"."""

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

CATEGORIES = ("dress", "shirt", "toptee")
PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(1, 10, 50),
    headline=("hit@10", "hit@50"),
    group_order=CATEGORIES,
    source="FashionIQ (Wu et al. 2021): Recall@10/50 per category; the EDIR paper appendix B (Recall@10)",
)
QUERY_IMAGE = QueryImage(
    "kept",
    "miccunifi/SEARLE src/validate.py:94-95 (fiq_compute_val_metrics ranks the category's whole index, the "
    "candidate image included)",
)


@dataclass(frozen=True)
class FashionIQOptions:
    categories: str = ""  # comma-separated; empty = every category present
    split: str = "val"


def _files(root: Path, cat: str, split: str) -> tuple[Path, Path] | None:
    caps = [root / f"captions/cap.{cat}.{split}.json", root / f"fashioniq_cap.{cat}.{split}.json"]
    splits = [root / f"image_splits/split.{cat}.{split}.json", root / f"fashioniq_split.{cat}.{split}.json"]
    c = next((p for p in caps if p.is_file()), None)
    s = next((p for p in splits if p.is_file()), None)
    return (c, s) if c and s else None


def _image(root: Path, asin: str) -> str:
    for ext in (".png", ".jpg", ".jpeg"):
        if (root / "images" / f"{asin}{ext}").is_file():
            return f"images/{asin}{ext}"
    raise DatasetLayoutError(f"FashionIQ: image {asin!r} not found as {root / 'images'}/{asin}.png or .jpg")


def caption_text(captions: list[str]) -> str:
    parts = [c.strip(".?, ") for c in captions if c.strip(".?, ")]
    return " and ".join(parts)


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    opts = parse_options(FashionIQOptions, options, benchmark="fashioniq")
    root = Path(root)
    wanted = [c for c in opts.categories.split(",") if c] or list(CATEGORIES)
    found = {c: _files(root, c, opts.split) for c in wanted}
    if opts.categories and any(v is None for v in found.values()):
        missing = [c for c, v in found.items() if v is None]
        find_file(root, [f"captions/cap.{missing[0]}.{opts.split}.json"], f"FashionIQ {missing[0]} captions")
    found = {c: v for c, v in found.items() if v is not None}
    if not found:
        raise DatasetLayoutError(
            f"FashionIQ: no captions/cap.<category>.{opts.split}.json with image_splits/split.<category>."
            f"{opts.split}.json under {root} (categories: {', '.join(wanted)})"
        )
    database, database_group, queries, positives = [], [], [], []
    for cat, (caps, split) in found.items():
        asins = read_json(split)
        offset = len(database)
        index = {a: offset + i for i, a in enumerate(asins)}
        database.extend(_image(root, a) for a in asins)
        database_group.extend([cat] * len(asins))
        for n, rec in enumerate(read_json(caps), start=1):
            if rec["target"] not in index:
                raise DatasetLayoutError(f"{caps}: query {n} target {rec['target']!r} is not in {split}")
            qi = len(queries)
            queries.append(
                Query(
                    id=f"{cat}/{n}",
                    reference=_image(root, rec["candidate"]),
                    text=caption_text(rec["captions"]),
                    group=cat,
                    db_group=cat,
                    extra={"target": rec["target"]},
                )
            )
            positives.append((qi, index[rec["target"]]))
    return checked_benchmark(
        "fashioniq",
        root,
        "FashionIQ gallery",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE,
        database_group=database_group,
        options={"categories": ",".join(found), "split": opts.split},
    )
