"""CIRCO (Baldrati et al., ICCV 2023), validation split, in miccunifi/CIRCO's layout, scored by mAP@K as its
src/evaluation.py computes it. See docs/retrieval.md, "Benchmarks and their protocols"."""

from __future__ import annotations

from pathlib import Path

from recon_score.textfiles import read_json
from retrieval.datasets.base import (
    Benchmark,
    Protocol,
    Query,
    QueryImage,
    checked_benchmark,
    find_file,
)
from retrieval.errors import DatasetLayoutError

PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(5, 10, 25, 50),
    map_at=(5, 10, 25, 50),
    headline=("map@5", "map@10", "map@25", "map@50"),
    source="miccunifi/CIRCO src/evaluation.py (mAP@K); the EDIR paper appendix B (mAP@5)",
)
QUERY_IMAGE = QueryImage(
    "kept",
    "miccunifi/CIRCO src/evaluation.py:53-54 (the submitted ranking is scored as given) and miccunifi/SEARLE "
    "src/validate.py:327-329 (the top 50 of the whole index, reference included)",
)


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    if options:
        raise DatasetLayoutError(f"benchmark 'circo' has no options; got {', '.join(options)}")
    root = Path(root)
    ann = find_file(
        root, ["annotations/val.json", "circo_val.json", "val.json"], "CIRCO annotations", given=annotations
    )
    info = find_file(
        root,
        ["COCO2017_unlabeled/annotations/image_info_unlabeled2017.json"],
        "COCO 2017 unlabeled image_info",
    )
    images = read_json(info)["images"]
    database = [f"COCO2017_unlabeled/unlabeled2017/{im['file_name']}" for im in images]
    index = {int(im["id"]): i for i, im in enumerate(images)}
    queries, positives = [], []
    for rec in read_json(ann):
        qid = rec["id"]
        missing = [x for x in [rec["reference_img_id"], *rec["gt_img_ids"]] if int(x) not in index]
        if missing:
            raise DatasetLayoutError(f"{ann}: query {qid} names image id(s) {missing} not in {info}")
        qi = len(queries)
        queries.append(
            Query(
                id=str(qid),
                reference=database[index[int(rec["reference_img_id"])]],
                text=rec["relative_caption"].strip(),
                group="circo",
                extra={
                    "target_img_id": rec.get("target_img_id"),
                    "shared_concept": rec.get("shared_concept", ""),
                    "semantic_aspects": "|".join(rec.get("semantic_aspects", [])),
                },
            )
        )
        positives.extend((qi, index[int(g)]) for g in dict.fromkeys(rec["gt_img_ids"]))
    return checked_benchmark(
        "circo",
        root,
        "CIRCO database",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE,
        options={"annotations": str(ann)},
    )
