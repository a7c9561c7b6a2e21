"""Reading an annotator's export back: every check that keeps a wrong file out of the collected set.

An export is JSONL. Line 1, the header: {"study", "checksum" (the study's, or its consensus pass's), "annotator",
"round" ("main" | "consensus"), "exported", "ranked", "missing" (item ids not ranked), "body_sha256"}; then one
line per ranked image: {"item", "ranks": {label: rank, ...}, "note"}. `body_sha256` is the SHA-256 of the lines
after the header joined by "\\n", so an edited ranking or checksum is caught.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from preference_data import _io
from preference_data.annotate.study import LABELS
from preference_data.schema import PreferenceFormatError
from recon_score.textfiles import parse_json, read_lines

HEADER_KEYS = ("study", "checksum", "annotator", "round", "exported", "ranked", "missing", "body_sha256")
# what collect reads of a header: each must be there (the page writes every one of HEADER_KEYS)
NEEDED = ("study", "checksum", "annotator", "round", "missing", "body_sha256")
TEXT_KEYS = ("study", "checksum", "annotator", "body_sha256")
LINE_KEYS = ("item", "ranks", "note")
ROUNDS = ("main", "consensus")


@dataclass(frozen=True)
class Round:
    """What an export of one round must match: the study's id, the round's checksum, who may export it, and
    each item's number of candidates."""

    study: str
    checksum: str
    annotators: tuple[str, ...]
    sizes: dict[str, int]  # item id -> candidates
    ties: bool


@dataclass
class Export:
    path: Path
    annotator: str
    round: str
    exported: str
    ranks: dict[str, dict[str, int]] = field(default_factory=dict)  # item -> label -> rank
    notes: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # item -> line
    missing: list[str] = field(default_factory=list)


def body_checksum(lines: list[str]) -> str:
    """What an export's header must carry as `body_sha256` (the page computes the same in JavaScript)."""
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _loads(path: Path, lineno: int, text: str) -> object:
    value, why = parse_json(text)
    if why is not None:
        raise PreferenceFormatError(path, lineno, why)
    return value


def _lines(path: Path) -> list[tuple[int, str]]:
    lines = read_lines(path, what="annotation export")
    while lines and not lines[-1][1].strip():
        lines.pop()
    if not lines:
        raise PreferenceFormatError(path, None, "is empty: not an annotation export")
    return lines


def read_header(path: Path) -> tuple[dict, list[tuple[int, str]]]:
    """The header and the body lines of an export (only its shape is checked here: every field collect reads is
    there, so no later check meets a missing one)."""
    lines = _lines(path)
    head, _ = parse_json(lines[0][1])
    if not isinstance(head, dict) or "study" not in head or "body_sha256" not in head:
        raise PreferenceFormatError(path, 1, "is not a reconscore annotation export (no study header)")
    _io.check_keys(path, 1, head, HEADER_KEYS)
    absent = [k for k in NEEDED if k not in head]
    if absent:
        raise PreferenceFormatError(
            path, 1, f"the header has no {absent[0]!r}: not an export as the page writes it"
        )
    for key in TEXT_KEYS:
        if not isinstance(head[key], str):
            raise PreferenceFormatError(path, 1, f"{key!r} must be a string, got {head[key]!r}")
    if head.get("round") not in ROUNDS:
        raise PreferenceFormatError(
            path, 1, f"'round' must be one of {', '.join(ROUNDS)}, got {head.get('round')!r}"
        )
    return head, lines[1:]


def read_export(path: Path, head: dict, body: list[tuple[int, str]], expect: Round) -> Export:
    """Checks an export against its round: study id, checksum, annotator, body checksum, each ranking, and that
    every item is ranked or listed as missing. Raises PreferenceFormatError naming file:line."""
    if head["study"] != expect.study:
        raise PreferenceFormatError(
            path, 1, f"is an export of another study ({head['study']!r}); this study is {expect.study!r}"
        )
    if head["checksum"] != expect.checksum:
        what = "the consensus pass" if head["round"] == "consensus" else "the study"
        raise PreferenceFormatError(
            path,
            1,
            f"is stale: it was exported from another build of {what} (checksum {head['checksum']!r}; the current "
            f"one is {expect.checksum!r}); export again from the current page",
        )
    if head["annotator"] not in expect.annotators:
        raise PreferenceFormatError(
            path, 1, f"annotator {head['annotator']!r} is not one of {', '.join(expect.annotators)}"
        )
    if body_checksum([text for _, text in body]) != head["body_sha256"]:
        raise PreferenceFormatError(
            path, 1, "body_sha256 does not match the judgments below it: the file was edited after export"
        )
    out = Export(path, head["annotator"], head["round"], str(head.get("exported")))
    for lineno, text in body:
        _judgment(path, lineno, _loads(path, lineno, text), expect, out)
    _coverage(path, head, expect, out)
    return out


def _judgment(path: Path, lineno: int, obj: object, expect: Round, out: Export) -> None:
    if not isinstance(obj, dict):
        raise PreferenceFormatError(path, lineno, "each judgment must be a JSON object {item, ranks, note}")
    _io.check_keys(path, lineno, obj, LINE_KEYS)
    item = obj.get("item")
    if not isinstance(item, str):
        raise PreferenceFormatError(path, lineno, f"'item' must be an item id (a string), got {item!r}")
    if item not in expect.sizes:
        raise PreferenceFormatError(path, lineno, f"item {item!r} is not an image of this round")
    if item in out.lines:
        raise PreferenceFormatError(
            path, lineno, f"item {item!r} was already ranked at line {out.lines[item]}"
        )
    ranks = obj.get("ranks")
    labels = list(LABELS[: expect.sizes[item]])
    if not isinstance(ranks, dict) or sorted(ranks) != labels:
        raise PreferenceFormatError(
            path,
            lineno,
            f"item {item!r}: 'ranks' must give each of {', '.join(labels)} a rank, got {ranks!r}",
        )
    values = [ranks[k] for k in labels]
    for label, v in zip(labels, values):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= len(labels):
            raise PreferenceFormatError(
                path,
                lineno,
                f"item {item!r}: the rank of {label} must be a whole number 1-{len(labels)}, got {v!r}",
            )
    _check_ranks(path, lineno, item, dict(zip(labels, values)), ties=expect.ties)
    out.ranks[item], out.lines[item] = dict(zip(labels, values)), lineno
    note = obj.get("note")
    if note not in (None, ""):
        out.notes[item] = _io.optional_text(path, lineno, note, "note") or ""


def _check_ranks(path: Path, lineno: int, item: str, ranks: dict[str, int], *, ties: bool) -> None:
    """Without ties a ranking is a permutation of 1..n; with ties, a standard competition ranking (1, 1, 3)."""
    for rank in sorted(set(ranks.values())):
        holders = [k for k, v in ranks.items() if v == rank]
        if len(holders) > 1 and not ties:
            raise PreferenceFormatError(
                path,
                lineno,
                f"item {item!r}: rank {rank} is given twice ({' and '.join(holders)}); this study allows no ties",
            )
        below = sum(v < rank for v in ranks.values())
        if rank != below + 1:
            raise PreferenceFormatError(
                path,
                lineno,
                f"item {item!r}: rank {rank} follows {below} better candidate(s); expected {below + 1}",
            )


def _coverage(path: Path, head: dict, expect: Round, out: Export) -> None:
    missing = head.get("missing")
    if not isinstance(missing, list) or not all(isinstance(m, str) for m in missing):
        raise PreferenceFormatError(path, 1, "'missing' must be a list of item ids")
    for item in missing:
        if item in out.lines:
            raise PreferenceFormatError(
                path, 1, f"item {item!r} is listed as missing and ranked at line {out.lines[item]}"
            )
        if item not in expect.sizes:
            raise PreferenceFormatError(
                path, 1, f"item {item!r} listed as missing is not an image of this round"
            )
    absent = [i for i in expect.sizes if i not in out.lines and i not in missing]
    if absent:
        raise PreferenceFormatError(
            path,
            1,
            f"image {absent[0]!r} is neither ranked nor listed as missing ({len(absent)} such image(s))",
        )
    out.missing = list(missing)


def check_unique(exports: list[Export]) -> None:
    """One export per annotator and round: a second one (a duplicate, or an older export beside a newer one) is
    refused naming both files."""
    seen: dict[tuple[str, str], Export] = {}
    for ex in exports:
        key = (ex.annotator, ex.round)
        if key in seen:
            first = seen[key]
            raise PreferenceFormatError(
                ex.path,
                1,
                f"{ex.annotator}'s {ex.round} judgments were already given by {first.path} (exported "
                f"{first.exported}; this one {ex.exported}): give one export per annotator, the newest",
            )
        seen[key] = ex
