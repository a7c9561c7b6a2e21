"""PatternCom (Psomas et al., IGARSS 2024; the RS-CIR benchmark paper), in billpsomas/rscir's layout::

    ROOT/                      (or ROOT/PatternNet/)
      images/<class>/<file>    PatternNet, 38 classes x 800 images: the whole database
      patternnet.csv           one image per line, "images/<class>/<file> <index> <class>" (space-separated)
      PatternCom/{color,context,density,existence,quantity,shape}.csv   rows: filename, attribute, value

Protocol of rscir's evaluate.py (with utils.py's class merging, commit 25a1206):
- A file's class is its name up to the first digit ("swimmingpool123.jpg" -> "swimmingpool"), merged by
  ``CLASS_MERGES`` (dense/sparse residential -> residential, closed road/intersection -> road, bridge/overpass
  -> roadpass, ferry terminal/harbor -> pier, parking space/lot -> parking).
- Every row of an attribute file is a query image; its text queries are the *other* values of that attribute
  for its (merged) class, one composed query each.
- Relevant: a database image listed in the same attribute file, of the same merged class, whose value equals
  the text. Images not listed in the file are never relevant (the query image itself stays a negative).
- group = attribute type, subgroup = the (merged class, target value) pair, written "class/value" (the RS-CIR benchmark paper
  Table 4 lists such pairs; "white" of airplanes and "white" of crosswalks are two subgroups). mAP per
  attribute = mean AP over its (query, value) pairs, macro = mean over the 6 attributes: rscir's evaluate.py,
  which produced its README table (``group_mean="queries"``). The papers' captions average per subgroup, then
  per attribute, then across attributes (``group_mean="subgroups"``); docs/retrieval.md has a worked example.

rscir rounds each AP to two decimals (in percent) before averaging; we do not (a difference below 0.005
points). rscir skips query rows whose image is not in the database and then misaligns the remaining rows; we refuse
such a row instead, naming it. The rscir code merges classes for the category key only inside the attributes
that need it; applying the merge everywhere is equivalent on the released files (no other attribute has a
merged class).
"""

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
        if "{value}" not in self.text_template:
            raise ValueError(f"text_template must contain {{value}}, got {self.text_template!r}")
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
    return sorted(str(p.relative_to(base)) for p in images.rglob("*") if p.suffix.lower() in _IMAGE_SUFFIXES)


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
