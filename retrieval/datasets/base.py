"""What every benchmark loader returns (queries, a database of image paths under the root, positives, its paper's
protocol) and the helpers the loaders share; every image is checked to exist when the benchmark is loaded, so a
misspelt row fails before any feature is extracted."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recon_score import textfiles
from recon_score.atomic_io import sha256_json
from recon_score.images import resolve_under
from retrieval.choices import check_choice, from_text
from retrieval.errors import DatasetLayoutError


@dataclass(frozen=True)
class Protocol:
    """How a benchmark's paper evaluates."""

    ap: str  # retrieval.choices.AP_VARIANTS
    ks: tuple[int, ...]  # cut-offs of recall, hit and precision
    headline: tuple[str, ...]  # the seed table's metrics, as per-query names ("ap", "hit@1", "map@5")
    source: str  # where the protocol comes from
    map_at: tuple[int, ...] = ()  # CIRCO's mAP@K cut-offs
    group_order: tuple[str, ...] = ()  # the table's column order
    subgroup_table: bool = False  # also tabulate per subgroup (EDIR's subcategories)
    subset_ks: tuple[int, ...] = ()  # hit@K within each query's subset (CIRR's Recall_subset@K)
    # method -> {field: value}: the benchmark authors' setting of a shared method (i-CIR's rectified product);
    # --set overrides it, run.json records the resulting config
    method_defaults: dict[str, dict[str, str]] = field(default_factory=dict)


QUERY_IMAGE_RULES = {
    "kept": "ranked with the database as a negative (it is never a positive; image-based methods tend to rank "
    "it first)",
    "excluded": "removed from its own query's ranking",
    "absent": "not in the database (query and database images are separate sets)",
}


@dataclass(frozen=True)
class QueryImage:
    """What a benchmark's authors do with a query's own reference image when the database holds it too: `rule`
    (QUERY_IMAGE_RULES) and `source`, the authors' code or text that says so (docs/retrieval.md has the table)."""

    rule: str
    source: str

    def __post_init__(self):
        check_choice("query image rule", self.rule, QUERY_IMAGE_RULES)


@dataclass(frozen=True)
class Query:
    id: str
    reference: str  # image path relative to the root
    text: str
    group: str
    subgroup: str = ""
    db_group: str | None = None  # i-CIR instance, FashionIQ category: the query searches only that database
    extra: dict = field(default_factory=dict)  # kept in the per-query output (target, CIRCO aspects, ...)


@dataclass
class Benchmark:
    name: str
    root: Path
    queries: list[Query]
    database: list[str]  # image paths relative to the root
    positives: list[tuple[int, int]]  # (query index, database index)
    protocol: Protocol
    query_image: QueryImage  # the authors' rule for a reference image that is also a database item
    database_group: list[str] | None = None
    exclude: list[tuple[int, int]] = field(default_factory=list)
    subset: list[tuple[int, int]] = field(default_factory=list)  # (query, database): CIRR's img_set members
    options: dict = field(default_factory=dict)  # the loader options used (recorded in run.json)
    notes: list[str] = field(default_factory=list)

    def limit(self, n: int | None) -> Benchmark:
        """The first `n` queries only (a quick look; the database is unchanged)."""
        if n is None or n >= len(self.queries):
            return self
        keep = lambda pairs: [(q, d) for q, d in pairs if q < n]  # noqa: E731
        return dataclasses.replace(
            self,
            queries=self.queries[:n],
            positives=keep(self.positives),
            exclude=keep(self.exclude),
            subset=keep(self.subset),
        )

    def without_images(self, bad: set[str]) -> Benchmark:
        """The benchmark without the images in `bad` (unreadable files): those database items, and the queries
        whose reference is one of them, are dropped and every index pair is renumbered."""
        if not bad:
            return self
        q_keep = [i for i, q in enumerate(self.queries) if q.reference not in bad]
        d_keep = [i for i, p in enumerate(self.database) if p not in bad]
        q_new = {old: new for new, old in enumerate(q_keep)}
        d_new = {old: new for new, old in enumerate(d_keep)}
        renumber = lambda pairs: [(q_new[q], d_new[d]) for q, d in pairs if q in q_new and d in d_new]  # noqa: E731
        return dataclasses.replace(
            self,
            queries=[self.queries[i] for i in q_keep],
            database=[self.database[i] for i in d_keep],
            database_group=[self.database_group[i] for i in d_keep]
            if self.database_group is not None
            else None,
            positives=renumber(self.positives),
            exclude=renumber(self.exclude),
            subset=renumber(self.subset),
        )

    def image_paths(self) -> list[str]:
        """Every image the run needs (database, then references not in the database), each once."""
        seen = dict.fromkeys(self.database)
        for q in self.queries:
            seen.setdefault(q.reference)
        return list(seen)

    def reference_items(self) -> list[tuple[int, int]]:
        """(query, database item) for every query whose reference image is an item of the database it searches
        (the same path; within its database group where there are groups)."""
        index = {p: i for i, p in enumerate(self.database)}
        groups = self.database_group
        pairs = []
        for qi, q in enumerate(self.queries):
            d = index.get(q.reference)
            if d is not None and (groups is None or q.db_group is None or groups[d] == q.db_group):
                pairs.append((qi, d))
        return pairs

    def query_image_facts(self) -> dict:
        """The rule, its source, and how many queries it touched here (recorded in run.json, said on the report)."""
        pairs = self.reference_items()
        excluded = set(self.exclude)
        return {
            "rule": self.query_image.rule,
            "meaning": QUERY_IMAGE_RULES[self.query_image.rule],
            "source": self.query_image.source,
            "queries": len(self.queries),
            "references_in_database": len(pairs),
            "excluded": sum(p in excluded for p in pairs),
        }

    def texts(self) -> list[str]:
        return list(dict.fromkeys(q.text for q in self.queries))

    def content_digest(self) -> str:
        """sha256 of everything a method's result is computed from besides the images and the settings (each
        query's id, reference, text, group, subgroup and database group; the database; positives, exclusions,
        subsets): a run's item key hashes it, so an edited annotation recomputes instead of keeping stale
        results (the counts in `summary` alone miss a swapped target or a reworded query)."""
        return sha256_json(
            {
                "queries": [
                    [q.id, q.reference, q.text, q.group, q.subgroup, q.db_group] for q in self.queries
                ],
                "database": self.database,
                "database_group": self.database_group,
                "positives": self.positives,
                "exclude": self.exclude,
                "subset": self.subset,
            }
        )[:24]

    def extra_digest(self) -> str:
        """sha256 of the queries' extra fields: they reach the per-query tables only, not any result."""
        return sha256_json({"extra": [q.extra for q in self.queries]})[:24]

    def summary(self) -> dict:
        return {
            "benchmark": self.name,
            "root": str(self.root),
            "queries": len(self.queries),
            "database": len(self.database),
            "positives": len(self.positives),
            "groups": list(dict.fromkeys(q.group for q in self.queries)),
            "options": self.options,
            "protocol": dataclasses.asdict(self.protocol),
            "query_image": self.query_image_facts(),
            "notes": self.notes,
        }


# -- helpers shared by the loaders --------------------------------------------------------------------------------
def find_file(root: Path, candidates: Sequence[str], what: str, *, given: Path | None = None) -> Path:
    """The first existing candidate under root (or `given`); an error listing every place looked at."""
    if given is not None:
        if not given.is_file():
            raise DatasetLayoutError(f"{what}: {given} does not exist")
        return given
    for c in candidates:
        p = root / c
        if p.is_file():
            return p
    looked = ", ".join(str(root / c) for c in candidates)
    raise DatasetLayoutError(
        f"{what} not found; looked for {looked}. Check --root, or pass --annotations FILE."
    )


def check_unique_database(
    database: Sequence[str], groups: Sequence[str] | None, what: str, places: Sequence[str] | None = None
) -> None:
    """A database image listed twice (within its database group) is refused: the loaders' path -> index maps
    keep one copy, so the other would rank as a negative of its own queries."""
    where = places if places is not None else [f"entry {i + 1}" for i in range(len(database))]
    seen: dict[tuple[str, str | None], int] = {}
    for i, path in enumerate(database):
        key = (path, groups[i] if groups is not None else None)
        if key in seen:
            group = f" in database group {key[1]!r}" if key[1] is not None else ""
            raise DatasetLayoutError(
                f"{what}: database image {path!r} is listed twice{group} ({where[seen[key]]} and {where[i]}); "
                "list each once"
            )
        seen[key] = i


def check_images(root: Path, paths: Iterable[str], what: str) -> None:
    """Every path must exist under root; the error names the first missing ones."""
    missing = []
    for rel in paths:
        try:
            p = resolve_under(root, rel)
        except Exception as err:
            raise DatasetLayoutError(f"{what}: {rel!r} {err}") from err
        if not p.is_file():
            missing.append(rel)
            if len(missing) >= 5:
                break
    if missing:
        raise DatasetLayoutError(
            f"{what}: image(s) not found under {root}: {', '.join(missing)}. Check --root (images are read "
            "relative to it) or the annotation file."
        )


def images_under(root: Path, suffixes: set[str]) -> list[str]:
    """Every file under root/images/ with one of `suffixes`, relative to root and sorted: the database of a
    benchmark whose listing file is absent."""
    return sorted(
        str(p.relative_to(root)) for p in (root / "images").rglob("*") if p.suffix.lower() in suffixes
    )


def read_csv_rows(path: Path) -> list[list[str]]:
    """Non-blank rows; a BOM (Excel's) is dropped, so it never glues itself to the first column name."""
    return [row for _, row in textfiles.csv_rows(path) if any(cell.strip() for cell in row)]


def parse_options(cls: type, values: dict[str, Any], *, benchmark: str) -> Any:
    """A loader's option dataclass from `--option KEY=VALUE` strings, with an error listing the valid keys."""
    fields = {f.name for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out = {}
    for key, raw in values.items():
        if key not in fields:
            raise DatasetLayoutError(
                f"benchmark {benchmark!r} has no option {key!r}; its options are: {', '.join(sorted(fields)) or '(none)'}"
            )
        try:
            out[key] = from_text(raw, hints[key])
        except ValueError:
            wanted = "true or false" if hints[key] is bool else "an integer"
            raise DatasetLayoutError(
                f"benchmark {benchmark!r}: option {key} expects {wanted}, got {raw!r}"
            ) from None
    try:
        return cls(**out)
    except ValueError as err:
        raise DatasetLayoutError(f"benchmark {benchmark!r}: {err}") from err


def checked_benchmark(
    name: str,
    root: Path,
    what: str,
    queries: list[Query],
    database: list[str],
    positives: list[tuple[int, int]],
    *,
    protocol: Protocol,
    query_image: QueryImage,
    images: Iterable[str] | None = None,
    places: Sequence[str] | None = None,
    **fields: Any,
) -> Benchmark:
    """The loaded benchmark, built only once every image it names exists under root (`images`: the paths to
    check, the database when None) and no database entry is repeated (`places`: where each entry was read,
    for the error), so a misspelt row fails before any feature is extracted. Under the ``excluded`` rule each
    query's reference item is removed from its ranking here, the one place that does."""
    check_unique_database(database, fields.get("database_group"), what, places)
    check_images(root, database if images is None else images, what)
    bench = Benchmark(name, root, queries, database, positives, protocol, query_image, **fields)
    if query_image.rule == "excluded":
        bench.exclude = [*bench.exclude, *bench.reference_items()]
    return bench
