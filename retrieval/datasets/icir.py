"""i-CIR (Psomas et al., NeurIPS 2025; the i-CIR paper) in its release's folder layout, with billpsomas/icir's
protocol: per-instance databases, relevance by instance and text, trapezoidal AP. See docs/retrieval.md,
"Benchmarks and their protocols"."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from recon_score.textfiles import csv_rows
from retrieval.data import check_unique_ids
from retrieval.datasets.base import Benchmark, Protocol, Query, QueryImage, checked_benchmark
from retrieval.errors import DatasetLayoutError

PROTOCOL = Protocol(
    ap="trapezoidal-eps",  # utils.compute_ap divides by n + 1e-5
    method_defaults={"product": {"rectify": "true"}},  # utils_retrieval.calculate_rankings clamps at 0
    ks=(1, 5, 10),
    headline=("ap",),
    source="billpsomas/icir run_retrieval.py (per-instance databases, mmAP over instances) + utils.compute_ap",
)
QUERY_IMAGE = QueryImage(
    "absent",
    "billpsomas/icir run_retrieval.py:177-178 (separate query and database feature files) and :203-204 (an "
    "instance's queries rank its database rows only)",
)
_HEADER_CELLS = {"image", "image_path", "path", "file", "filename"}


def _rows(path: Path) -> list[tuple[str, str, str, int]]:
    """(image_path, text, instance, row number in the file) per row."""
    rows = [(n, row) for n, row in csv_rows(path) if any(cell.strip() for cell in row)]
    if rows and rows[0][1][0].strip().lower() in _HEADER_CELLS:
        rows = rows[1:]
    out = []
    for n, row in rows:
        if len(row) < 3:
            raise DatasetLayoutError(
                f"{path}: row {n} has {len(row)} columns, expected image_path,text,instance"
            )
        out.append((row[0].strip(), row[1].strip(), row[2].strip(), n))
    return out


def _files(root: Path, annotations: Path | None) -> tuple[Path, Path]:
    """query_files.csv and database_files.csv, in the --annotations folder or else under root (or
    root/annotations); --annotations is a folder here, since i-CIR's annotations are two files."""
    if annotations is not None and not Path(annotations).is_dir():
        raise DatasetLayoutError(
            f"i-CIR: --annotations {annotations} is not a folder; give the folder that holds query_files.csv "
            "and database_files.csv"
        )
    where = [Path(annotations)] if annotations is not None else [root, root / "annotations"]
    found = []
    for name in ("query_files.csv", "database_files.csv"):
        path = next((d / name for d in where if (d / name).is_file()), None)
        if path is None:
            looked = ", ".join(str(d / name) for d in where)
            raise DatasetLayoutError(
                f"i-CIR {name} not found; looked for {looked}. Check --root, or pass --annotations FOLDER."
            )
        found.append(path)
    return found[0], found[1]


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    if options:
        raise DatasetLayoutError(f"benchmark 'icir' has no options; got {', '.join(options)}")
    root = Path(root)
    qfile, dfile = _files(root, annotations)
    q_rows, d_rows = _rows(qfile), _rows(dfile)
    database = [r[0] for r in d_rows]
    database_group = [r[2] for r in d_rows]
    members: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (_, text, instance, _n) in enumerate(d_rows):
        members[(instance, text)].append(i)
    instances = set(database_group)
    queries, positives = [], []
    for image, text, instance, n in q_rows:
        if instance not in instances:
            raise DatasetLayoutError(
                f"{qfile}: row {n} names instance {instance!r}, which has no database images"
            )
        qi = len(queries)
        queries.append(
            Query(
                id=f"{instance}/{Path(image).stem}/{text}",
                reference=image,
                text=text,
                group=instance,
                subgroup=text,
                db_group=instance,
            )
        )
        positives.extend((qi, d) for d in members[(instance, text)])
    check_unique_ids([q.id for q in queries], str(qfile), [f"row {r[3]}" for r in q_rows], what="query")
    return checked_benchmark(
        "icir",
        root,
        "i-CIR",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE,
        images=dict.fromkeys(database + [q.reference for q in queries]),
        database_group=database_group,
        places=[f"{dfile}:{r[3]}" for r in d_rows],
        options={"query_files": str(qfile), "database_files": str(dfile)},
    )
