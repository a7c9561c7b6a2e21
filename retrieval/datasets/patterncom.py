"""PatternCom (Psomas et al., IGARSS 2024; the RS-CIR benchmark paper) in billpsomas/rscir's layout, with the
protocol of rscir's evaluate.py. See docs/retrieval.md, "Benchmarks and their protocols"."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from recon_score.textfiles import read_lines
from retrieval.datasets.base import (
    Benchmark,
    Protocol,
    Query,
    QueryImage,
    check_images,
    images_under,
    parse_options,
    read_csv_rows,
)
from retrieval.errors import DatasetLayoutError

ATTRIBUTES = ("color", "context", "density", "existence", "quantity", "shape")
CLASS_MERGES = {
    "denseresidential": "residential",
    "sparseresidential": "residential",
    "closedroad": "road",
    "intersection": "road",
    "bridge": "roadpass",
    "overpass": "roadpass",
    "ferryterminal": "pier",
    "harbor": "pier",
    "parkingspace": "parking",
    "parkinglot": "parking",
}
PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(5, 10, 15, 20),
    headline=("ap",),
    group_order=ATTRIBUTES,
    source="billpsomas/rscir evaluate.py + utils.py (class merging); the RS-CIR benchmark paper Sec. 4.1, Tables 1-2",
)
QUERY_IMAGE = QueryImage(
    "kept",
    "billpsomas/rscir evaluate.py:185,199 (the query's own feature features[idx] is ranked against all of "
    "`features`, the whole PatternNet) and :57 (its text is another value of its attribute, so it is never "
    "relevant)",
)
_HEADER_CELLS = {"image", "filename", "file", "path", "image_filename", "query"}
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp"}


@dataclass(frozen=True)
class PatternComOptions:
    # the RS-CIR benchmark paper A.6 rephrasings, e.g. "being {value}", "having {value} color"
    text_template: str = "{value}"
    attributes: str = ",".join(ATTRIBUTES)

    def __post_init__(self):
        try:  # formatted here, so a stray field ({object}) or brace is a usage error, not a KeyError later
            filled = self.text_template.format(value="\0")
        except (KeyError, IndexError, ValueError, AttributeError):
            filled = ""
        if "\0" not in filled:
            raise ValueError(
                f"text_template must contain {{value}} and no other field (a literal brace is written "
                f"{{{{ or }}}}), got {self.text_template!r}"
            )
        unknown = set(self.attributes.split(",")) - set(ATTRIBUTES)
        if unknown:
            raise ValueError(f"unknown attributes {sorted(unknown)}; choose from {', '.join(ATTRIBUTES)}")


def file_class(filename: str) -> str:
    """Merged class of a PatternNet file name (rscir: ``re.split(r'\\d', path)[0]`` + class_mapping)."""
    raw = re.split(r"\d", Path(filename).name)[0]
    return CLASS_MERGES.get(raw, raw)


def _base(root: Path) -> Path:
    nested = root / "PatternNet"
    if not (root / "PatternCom").is_dir() and (nested / "PatternCom").is_dir():
        return nested
    return root


def _database(base: Path, notes: list[str]) -> list[str]:
    listing = base / "patternnet.csv"
    if listing.is_file():
        paths = []
        for _, line in read_lines(listing):
            line = line.strip()
            if not line:
                continue
            first = line.split(",")[0] if ("," in line and " " not in line) else line.split()[0]
            paths.append(first)
        return paths
    images = base / "images"
    if not images.is_dir():
        raise DatasetLayoutError(
            f"PatternCom: neither {listing} nor {images}/ exists; expected rscir's layout (images/, patternnet.csv, "
            "PatternCom/*.csv) under --root"
        )
    notes.append("patternnet.csv not found: the database is every image under images/, sorted by path")
    return images_under(base, _IMAGE_SUFFIXES)


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    opts = parse_options(PatternComOptions, options, benchmark="patterncom")
    base = _base(Path(root))
    notes: list[str] = []
    database = _database(base, notes)
    check_images(base, database, "PatternCom database")
    by_name: dict[str, int] = {}
    for i, rel in enumerate(database):
        name = Path(rel).name
        if name in by_name:
            raise DatasetLayoutError(
                f"PatternCom: two database images share the file name {name!r} ({database[by_name[name]]}, {rel}); "
                "rscir matches rows to images by file name"
            )
        by_name[name] = i

    comdir = Path(annotations) if annotations is not None else base / "PatternCom"
    queries: list[Query] = []
    positives: list[tuple[int, int]] = []
    for attribute in opts.attributes.split(","):
        path = comdir / f"{attribute}.csv"
        if not path.is_file():
            raise DatasetLayoutError(
                f"PatternCom: {path} not found (one CSV per attribute type under PatternCom/)"
            )
        rows = read_csv_rows(path)
        if rows and rows[0][0].strip().lower() in _HEADER_CELLS:
            rows = rows[1:]
        value_of: dict[str, str] = {}
        values_of_class: dict[str, set[str]] = defaultdict(set)
        for n, row in enumerate(rows, start=1):
            if len(row) < 3:
                raise DatasetLayoutError(
                    f"{path}: row {n} has {len(row)} columns, expected filename,attribute,value"
                )
            name, value = Path(row[0].strip()).name, row[2].strip()
            if name not in by_name:
                raise DatasetLayoutError(
                    f"{path}: row {n} names {name!r}, which is not in the PatternNet database"
                )
            value_of[name] = value  # a repeated file keeps its last value, as rscir's filename map does
            values_of_class[file_class(name)].add(value)
        members: dict[tuple[str, str], list[int]] = defaultdict(list)
        for name, value in value_of.items():
            members[(file_class(name), value)].append(by_name[name])
        for n, row in enumerate(rows, start=1):
            name, own = Path(row[0].strip()).name, row[2].strip()
            cls = file_class(name)
            for target in sorted(values_of_class[cls] - {own}):
                qi = len(queries)
                queries.append(
                    Query(
                        id=f"{attribute}/{n}/{target}",
                        reference=database[by_name[name]],
                        text=opts.text_template.format(value=target),
                        group=attribute,
                        subgroup=f"{cls}/{target}",  # a (class, value) pair, never the value alone
                        extra={"class": cls, "value": own},
                    )
                )
                positives.extend((qi, d) for d in sorted(members[(cls, target)]))
    return Benchmark(
        name="patterncom",
        root=base,
        queries=queries,
        database=database,
        positives=positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE,
        options={"text_template": opts.text_template, "attributes": opts.attributes},
        notes=notes,
    )
