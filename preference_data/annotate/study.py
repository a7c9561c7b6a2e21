"""A blind ranking study: the candidates table it is built from, the study it makes (items, each annotator's
shuffled order, the key that unblinds it) and the files of its folder, as `{name: bytes}` for the run engine to
write.

The files themselves are named by the run engine's output table (recon_score.run_outputs); this module only
computes what goes in them, so it stays free of the run engine (which this package may not import).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from preference_data import _io
from preference_data.schema import PreferenceFormatError, normalize_space
from recon_score.textfiles import json_objects

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TABLE_KEYS = ("image", "candidate", "caption", "model", "references")
# a `ranking` file's judgments: its candidates can be ranked again
IGNORED = ("rank", "rater", "candidate_id")

# the ReconScore paper's UCM-preference criteria, shown on every page as guidance
CRITERIA = (
    ("Object completeness and factual accuracy", "Every key object is named, and nothing is invented."),
    ("Fine-grained attributes", "Quantity, colour, material, shape and size are right and specific."),
    ("Spatial relationships", "Positions and relative positions of the objects are right."),
)


@dataclass(frozen=True)
class CandidateRow:
    image: str  # the image's name relative to the images folder
    candidate: str
    model: str
    references: tuple[str, ...]
    source: str  # file:line


@dataclass(frozen=True)
class Item:
    """One image to rank: its candidates in table order and the model of each."""

    id: str
    image: str
    candidates: tuple[str, ...]
    models: tuple[str, ...]
    references: tuple[str, ...]


@dataclass(frozen=True)
class StudySettings:
    annotators: int
    seed: int  # the shuffles: numpy default_rng([seed, annotator index, item index]).permutation(n)
    ties: bool  # whether a page lets an annotator tie candidates
    per_image: int | None  # draw this many candidates per image at random (the paper: 3 of 6), else all
    title: str


def annotator_names(n: int) -> list[str]:
    return [f"annotator-{k}" for k in range(1, n + 1)]


def read_candidates(path: Path) -> list[CandidateRow]:
    """A candidates table (.csv or .jsonl): `image`, `candidate` (or `caption`), `model`, optionally
    `references` (a JSON list); a `ranking` CSV's own columns (rank, rater) are ignored. Raises
    PreferenceFormatError naming file:line."""
    path = Path(path)
    if _io.suffix_format(path) == "jsonl":
        records = list(json_objects(path))
        for lineno, obj in records:
            _io.check_keys(path, lineno, obj, TABLE_KEYS)
    else:
        records = list(_io.csv_records(path, required=("image", "model"), optional=TABLE_KEYS + IGNORED))
    rows = []
    for lineno, rec in records:
        text = rec.get("candidate") if rec.get("candidate") not in (None, "") else rec.get("caption")
        rows.append(
            CandidateRow(
                image=_io.text_field(path, lineno, rec.get("image"), "image"),
                candidate=normalize_space(_io.text_field(path, lineno, text, "candidate")),
                model=_io.text_field(path, lineno, rec.get("model"), "model"),
                references=tuple(_io.references_value(path, lineno, rec.get("references"))),
                source=f"{path}:{lineno}",
            )
        )
    if not rows:
        raise PreferenceFormatError(path, None, "no candidates found")
    return rows


def make_items(rows: list[CandidateRow], *, per_image: int | None, seed: int) -> list[Item]:
    """Candidates grouped by image in the table's order, a row repeating one (image, model, candidate) dropped (a
    ranking CSV has one per rater); a model with two captions for one image, an image with fewer
    than two candidates (or than `per_image`: every image is ranked among as many), or more shown than there are
    labels (A-Z: an export of it could never be read back), is refused naming the row."""
    by_image: dict[str, list[CandidateRow]] = {}
    for row in rows:
        group = by_image.setdefault(row.image, [])
        twice = next((r for r in group if r.model == row.model), None)
        if twice is not None and twice.candidate == row.candidate:
            continue  # the same candidate again: a ranking CSV repeats it for each rater
        if twice is not None:
            raise PreferenceFormatError(
                row.source,
                None,
                f"model {row.model!r} already has a candidate for {row.image!r} ({twice.source})",
            )
        group.append(row)
    items = []
    for k, (image, group) in enumerate(by_image.items()):
        if len(group) < 2:
            raise PreferenceFormatError(
                group[0].source, None, f"image {image!r} has one candidate; ranking needs 2+"
            )
        shown = per_image if per_image is not None else len(group)
        if shown > len(LABELS):
            raise PreferenceFormatError(
                group[0].source,
                None,
                f"image {image!r} has {len(group)} candidates; a page shows at most {len(LABELS)} per image "
                f"(labels A-Z): give --per-image {len(LABELS)} or fewer",
            )
        if per_image is not None and len(group) < per_image:
            raise PreferenceFormatError(
                group[0].source,
                None,
                f"image {image!r} has {len(group)} candidates; --per-image asks for {per_image}",
            )
        if per_image is not None and len(group) > per_image:
            keep = np.sort(
                np.random.default_rng([seed, 0xC0FFEE, k]).choice(len(group), per_image, replace=False)
            )
            group = [group[j] for j in keep]
        refs = next((r.references for r in group if r.references), ())
        items.append(
            Item(
                id=f"i{k + 1:04d}",
                image=image,
                candidates=tuple(r.candidate for r in group),
                models=tuple(r.model for r in group),
                references=refs,
            )
        )
    return items


def shuffles(items: list[Item], settings: StudySettings) -> dict[str, dict[str, list[int]]]:
    """annotator -> item id -> the candidate (table index) shown under each label A, B, C, ..."""
    out: dict[str, dict[str, list[int]]] = {}
    for a, name in enumerate(annotator_names(settings.annotators)):
        out[name] = {
            it.id: [
                int(j) for j in np.random.default_rng([settings.seed, a, k]).permutation(len(it.candidates))
            ]
            for k, it in enumerate(items)
        }
    return out


def checksum(obj: object) -> str:
    """sha256 (first 16 hex digits) of canonical JSON: what the study's exports must carry."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def study_record(study_id: str, items: list[Item], settings: StudySettings, images: dict[str, str]) -> dict:
    """study.json: everything but the key. `images`: item image -> its file under pages/."""
    body = {
        "study": study_id,
        "settings": asdict(settings),
        "annotators": annotator_names(settings.annotators),
        "items": [
            {
                "id": it.id,
                "image": it.image,
                "file": images[it.image],
                "candidates": list(it.candidates),
                "references": list(it.references),
            }
            for it in items
        ],
    }
    return {**body, "checksum": checksum({**body, "key": key_body(items, settings)})}


def key_body(items: list[Item], settings: StudySettings) -> dict:
    return {"models": {it.id: list(it.models) for it in items}, "orders": shuffles(items, settings)}


def read_selections(path: Path) -> list[tuple[str, str, str, str]]:
    """A metric's selections (.csv or .jsonl): `image`, `caption` (or `candidate`), optionally `metric` (several
    metrics may share a file) -> (metric, image, caption, file:line)."""
    path = Path(path)
    keys = ("image", "caption", "candidate", "metric")
    if _io.suffix_format(path) == "jsonl":
        records = list(json_objects(path))
        for lineno, obj in records:
            _io.check_keys(path, lineno, obj, keys)
    else:
        records = list(_io.csv_records(path, required=("image",), optional=keys))
    out = []
    for lineno, rec in records:
        text = rec.get("caption") if rec.get("caption") not in (None, "") else rec.get("candidate")
        out.append(
            (
                _io.optional_text(path, lineno, rec.get("metric"), "metric") or "selection",
                _io.text_field(path, lineno, rec.get("image"), "image"),
                _io.text_field(path, lineno, text, "caption"),
                f"{path}:{lineno}",
            )
        )
    return out
