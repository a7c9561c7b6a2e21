"""EDIR (Song et al., 2026; the EDIR paper): 5,000 edited-image queries in 5 categories and 15 subcategories, one
target each, scored by Recall@1 and @3 (appendix B.3); the paper fixes no file layout, so reconscore documents
its own. See docs/retrieval.md, "Benchmarks and their protocols"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recon_score.textfiles import read_json, read_lines
from retrieval.data import check_unique_ids
from retrieval.datasets.base import (
    Benchmark,
    Protocol,
    Query,
    QueryImage,
    checked_benchmark,
    find_file,
    images_under,
    parse_options,
)
from retrieval.errors import DatasetLayoutError

INSTRUCTION = "Given an image, find a similar image satisfying the query."
CATEGORIES = ("attribute", "object", "relationship", "global environment", "complex")
PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(1, 3, 5, 10),
    headline=("hit@1", "hit@3"),
    group_order=CATEGORIES,
    subgroup_table=True,
    source="the EDIR paper: Recall@1 per subcategory and category (Sec. 4), Recall@3 (appendix B.3)",
)
QUERY_IMAGE = {
    False: QueryImage(
        "kept",
        'the EDIR paper appendix B (Benchmark Settings): only "CIRR excludes the reference image from the '
        'retrieval corpus"; EDIR is scored on its gallery as released',
    ),
    True: QueryImage(
        "excluded", "option exclude_reference=true (CIRR's rule, not the EDIR paper's protocol)"
    ),
}
_ALIASES = {
    "reference": ("reference", "query_image", "reference_image"),
    "text": ("text", "query", "instruction_query", "modification"),
    "target": ("target", "target_image"),
    "category": ("category",),
    "subcategory": ("subcategory", "sub_category"),
}
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff"}


@dataclass(frozen=True)
class EdirOptions:
    exclude_reference: bool = False


def _field(record: dict, name: str, where: str) -> str:
    for key in _ALIASES[name]:
        if key in record and record[key] is not None:
            return str(record[key]).strip()
    raise DatasetLayoutError(f"{where}: missing {name!r} (accepted keys: {', '.join(_ALIASES[name])})")


def _records(path: Path) -> list[tuple[str, dict]]:
    """(where in the file, record) per query: "line N" of a .jsonl, "item N" of a .json list (or of its
    "queries" list). Anything else is one error naming the file and the place, never a KeyError downstream."""
    out = []
    if path.suffix == ".json":
        data = read_json(path)
        items = data.get("queries") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise DatasetLayoutError(
                f"{path}: expected a JSON list of query records, or an object whose 'queries' is one"
            )
        out = [(f"item {n}", rec) for n, rec in enumerate(items, start=1)]
    else:
        for n, line in read_lines(path):
            if line.strip():
                try:
                    out.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as err:
                    raise DatasetLayoutError(f"{path}: line {n} is not valid JSON: {err}") from err
    for place, rec in out:
        if not isinstance(rec, dict):
            raise DatasetLayoutError(
                f"{path}: {place} is a JSON {type(rec).__name__}, not a query record (an object with "
                "reference, text, target, category, subcategory)"
            )
    return out


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    opts = parse_options(EdirOptions, options, benchmark="edir")
    root = Path(root)
    path = find_file(
        root, ["edir.jsonl", "edir.json", "annotations.jsonl"], "EDIR query file", given=annotations
    )
    gallery_file = root / "gallery.txt"
    notes = [f"instruction for MLLM embedders (recorded, not applied): {INSTRUCTION}"]
    places = None
    if gallery_file.is_file():
        listed = [(n, ln.strip()) for n, ln in read_lines(gallery_file) if ln.strip()]
        database, places = [p for _, p in listed], [f"{gallery_file}:{n}" for n, _ in listed]
    elif (root / "images").is_dir():
        database = images_under(root, _IMAGE_SUFFIXES)
        notes.append("gallery.txt not found: the gallery is every image under images/, sorted by path")
    else:
        raise DatasetLayoutError(f"EDIR: neither {gallery_file} nor {root / 'images'}/ exists under --root")
    index = {p: i for i, p in enumerate(database)}
    queries, positives, in_gallery = [], [], 0
    records = _records(path)
    for n, (place, rec) in enumerate(records, start=1):
        where = f"{path}: {place}"
        ref, target = _field(rec, "reference", where), _field(rec, "target", where)
        if target not in index:
            raise DatasetLayoutError(f"{where}: target {target!r} is not in the gallery")
        qi = len(queries)
        queries.append(
            Query(
                id=str(rec.get("id", n)),
                reference=ref,
                text=_field(rec, "text", where),
                group=_field(rec, "category", where).lower(),
                subgroup=_field(rec, "subcategory", where).lower(),
                extra={"target": target},
            )
        )
        positives.append((qi, index[target]))
        in_gallery += ref in index
    check_unique_ids([q.id for q in queries], str(path), [place for place, _ in records])
    if in_gallery:
        rule = (
            "excluded from their own rankings (exclude_reference=true, CIRR's rule)"
            if opts.exclude_reference
            else "ranked as negatives (the EDIR paper excludes the reference for CIRR only; exclude_reference=true "
            "removes it)"
        )
        notes.append(f"{in_gallery} of {len(queries)} reference images are in the gallery: {rule}")
    return checked_benchmark(
        "edir",
        root,
        "EDIR",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE[opts.exclude_reference],
        images=dict.fromkeys(database + [q.reference for q in queries]),
        places=places,
        options={"exclude_reference": opts.exclude_reference, "annotations": str(path)},
        notes=notes,
    )
