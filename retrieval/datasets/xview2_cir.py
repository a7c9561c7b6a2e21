"""xView2-CIR (the RS-CIR benchmark paper, Sec. 4.1 and A.1 Table 5): a pre-disaster image plus "post <disaster>"
retrieves the post-disaster image of the same location, its single positive. See docs/retrieval.md, "Benchmarks
and their protocols"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retrieval.choices import check_choice
from retrieval.datasets.base import (
    Benchmark,
    Protocol,
    Query,
    QueryImage,
    checked_benchmark,
    find_file,
    parse_options,
    read_csv_rows,
)
from retrieval.errors import DatasetLayoutError

DISASTERS = ("hurricane", "wildfire", "flood", "tsunami", "earthquake", "volcano")
_ALIASES = {"fire": "wildfire"}
COLUMNS = ("image", "query_default", "query_alt1", "query_alt2", "target")
PROTOCOL = Protocol(
    ap="non-interpolated",
    ks=(1, 5, 10),
    headline=("ap",),
    group_order=DISASTERS,
    source="the RS-CIR benchmark paper Sec. 4.1, Table 3 (per-disaster mAP, Avg. = macro, Total = overall); rscir's AP",
)
# the authors' code (billpsomas/rscir) evaluates PatternCom only; the rule is the RS-CIR benchmark paper's text
QUERY_IMAGE = {
    "pre+post": QueryImage(
        "kept",
        'the RS-CIR benchmark paper Sec. 3 (xView2-CIR): "All remaining images are treated as negatives, '
        'including ... images from the same location that do not match the target post-event state"',
    ),
    "post": QueryImage("absent", "option database=post: post-event images only (no pre-event reference)"),
}


@dataclass(frozen=True)
class XView2Options:
    phrasing: str = "default"
    database: str = "pre+post"

    def __post_init__(self):
        check_choice("phrasing", self.phrasing, ("default", "alt1", "alt2"))
        check_choice("database", self.database, ("pre+post", "post"))


def disaster(default_query: str) -> str:
    word = default_query.strip().lower().removeprefix("post").strip(" -_")
    return _ALIASES.get(word, word)


def load(root: Path, *, annotations: Path | None = None, **options) -> Benchmark:
    opts = parse_options(XView2Options, options, benchmark="xview2-cir")
    root = Path(root)
    table = find_file(root, ["xview2_cir.csv"], "xView2-CIR query table", given=annotations)
    rows = read_csv_rows(table)
    if not rows or [c.strip() for c in rows[0][:5]] != list(COLUMNS):
        raise DatasetLayoutError(f"{table}: expected the header {','.join(COLUMNS)}")
    rows = rows[1:]
    column = COLUMNS.index(f"query_{opts.phrasing}")
    index: dict[str, int] = {}  # database path -> row, rows numbered in first-seen order
    queries, positives = [], []
    for n, row in enumerate(rows, start=2):
        if len(row) < 5:
            raise DatasetLayoutError(f"{table}: line {n} has {len(row)} columns, expected 5")
        pre, target = row[0].strip(), row[4].strip()
        if opts.database == "pre+post":
            index.setdefault(pre, len(index))
        positives.append((len(queries), index.setdefault(target, len(index))))
        queries.append(
            Query(
                id=Path(pre).stem,
                reference=pre,
                text=row[column].strip(),
                group=disaster(row[1]),
                extra={"target": target},
            )
        )
    database = list(index)
    return checked_benchmark(
        "xview2-cir",
        root,
        "xView2-CIR",
        queries,
        database,
        positives,
        protocol=PROTOCOL,
        query_image=QUERY_IMAGE[opts.database],
        images=database + [q.reference for q in queries],
        options={"phrasing": opts.phrasing, "database": opts.database, "annotations": str(table)},
    )
