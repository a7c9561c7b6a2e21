"""Which images to describe: a folder (recursively), one image file, or a list file (.txt paths / .jsonl rows
with `image`, optional `id` and `references`). See docs/describer.md, "Inputs, backends, outputs": the default
ids and the `LIST:LINE:` prefix of a listed image's errors."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from recon_score.errors import EmptyInputError, InputError, ReconScoreError
from recon_score.images import IMAGE_SUFFIXES, resolve_under
from recon_score.textfiles import file_problem, parse_json, read_lines, safe_text, unencodable

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "recon_score" / "sample"


@dataclass
class ImageItem:
    index: int
    id: str
    image: str  # as given / relative to the root
    path: Path | None
    references: list[str] | None = None
    error: str | None = None
    # sha256 of the file's bytes, set by the run (recon_score.atomic_io.file_digest)
    digest: str | None = None
    origin: str | None = None  # where it was listed ("list.txt:3"), for its errors
    root: Path | None = None  # the folder `image` was resolved against (run.json's images_root)

    def located(self, message: str) -> str:
        """`message` (why this image cannot be used) prefixed with where it was listed."""
        if self.origin is None or message.startswith(f"{self.origin}:"):
            return message
        return f"{self.origin}: {message}"


def _sample_items() -> list[ImageItem]:
    """The bundled sample's tiles in the order references.json lists them (it names every tile)."""
    refs = {e["image"]: e["captions"] for e in json.loads((SAMPLE_DIR / "references.json").read_text())}
    return [
        ImageItem(i, Path(rel).stem, rel, SAMPLE_DIR / rel, captions, root=SAMPLE_DIR)
        for i, (rel, captions) in enumerate(refs.items())
    ]


def _check_references(refs: object) -> str | None:
    """Why `references` cannot be used (None if it can): a list of non-empty strings, or absent."""
    if refs is None or (isinstance(refs, list) and all(isinstance(r, str) and r.strip() for r in refs)):
        return None
    return f"`references` must be a list of non-empty strings, got {safe_text(refs)!r}"[:300]


def _list_id(rel: str, base: Path, *, keep_suffix: bool = False) -> str:
    """The path relative to the root, without its suffix unless `keep_suffix`: unique where two folders hold the
    same file name."""
    full, top = os.path.abspath(base / rel), os.path.abspath(base)
    inside = os.path.commonpath([full, top]) == top
    path = PurePosixPath(Path(os.path.relpath(full, top)).as_posix() if inside else rel)
    return path.as_posix() if keep_suffix else path.with_suffix("").as_posix()


def _auto_ids(rels: dict[int, str], base: Path) -> dict[int, str]:
    """Line -> automatic id of the rows without one: the stem path, or the path with its extension where two
    different files share that stem."""
    ids = {n: (_list_id(rel, base), _list_id(rel, base, keep_suffix=True)) for n, rel in rels.items()}
    files = defaultdict(set)  # stem -> the different paths that share it
    for stem, full in ids.values():
        files[stem].add(full)
    return {n: full if len(files[stem]) > 1 else stem for n, (stem, full) in ids.items()}


def discover_images(source: Path | None, *, root: Path | None = None) -> list[ImageItem]:
    """Images to caption, in a stable order (folders: sorted relative paths)."""
    if source is None:
        return _sample_items()
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            # the same status as an empty list (EmptyInputError): nothing to caption either way
            raise EmptyInputError(
                f"--inputs {source}: no images ({', '.join(IMAGE_SUFFIXES)}) under it; nothing to do"
            )
        items = []
        for i, p in enumerate(files):
            rel = p.relative_to(source).as_posix()
            item = ImageItem(i, rel, rel, p, root=source)
            try:  # the one symlink policy: a link leaving the folder is refused with --no-follow-symlinks
                item.path = resolve_under(source, rel)
            except InputError as err:
                item.path, item.error = None, f"{source.name}/{rel}: {err}"
            items.append(item)
        return items
    if problem := file_problem(source):
        raise ReconScoreError(f"--inputs {source} {problem}")
    if source.suffix.lower() in IMAGE_SUFFIXES:
        return [ImageItem(0, source.stem, source.name, source, root=source.parent)]
    kind = source.suffix.lower()
    if kind not in (".jsonl", ".ndjson", ".txt"):
        raise ReconScoreError(f"--inputs {source}: expected a folder, an image, a .txt list or a .jsonl file")
    items = _list_items(source, Path(root) if root else source.parent, kind)
    if not items:
        raise EmptyInputError(f"--inputs {source}: no images listed (only blank or # lines); nothing to do")
    return items


def _listed_paths(lines: list, parsed: dict, kind: str) -> dict[int, str]:
    """Line -> the path of each row that states no id (for its automatic id)."""
    if kind == ".txt":
        return dict(lines)
    return {
        n: rec["image"]
        for n, (rec, why) in parsed.items()
        if why is None
        and isinstance(rec, dict)
        and rec.get("id") is None
        and isinstance(rec.get("image"), str)
        and rec["image"].strip()
    }


def _list_items(source: Path, base: Path, kind: str) -> list[ImageItem]:
    """The rows of a .txt or .jsonl list, each with its error (if any) prefixed by `LIST:LINE:`."""
    items: list[ImageItem] = []
    seen: dict[str, int] = {}
    lines = [(n, raw) for n, raw in read_lines(source) if raw.strip() and not raw.lstrip().startswith("#")]
    parsed = {n: parse_json(raw) for n, raw in lines} if kind != ".txt" else {}
    explicit = {str(v["id"]) for v, _ in parsed.values() if isinstance(v, dict) and v.get("id") is not None}
    auto = _auto_ids(_listed_paths(lines, parsed, kind), base)
    for lineno, raw in lines:
        where = f"{source.name}:{lineno}"
        refs, rid, problem = None, None, None
        if kind == ".txt":
            rel = raw  # the path as given: "a.png " is not a.png
        else:
            rec, why = parsed[lineno]
            if why is None and not (isinstance(rec, dict) and "image" in rec):
                why = f"not a JSON object with `image` (got {type(rec).__name__})"
            if why is not None:
                bad = ImageItem(
                    len(items), f"line{lineno}", raw[:80], None, error=f"{where}: {why}", origin=where
                )
                items.append(bad)
                continue
            rel, rid, refs = rec["image"], rec.get("id"), rec.get("references")
            problem = unencodable(rec, "the row") or _check_references(refs)
            if problem:
                rel, rid, refs = safe_text(rel), safe_text(rid), None
        if not isinstance(rel, str) or not rel.strip():
            problem = problem or f"`image` must be a non-empty path, got {rel!r}"
            rel = str(rel)
        rid = str(rid) if rid is not None else ""
        item = ImageItem(len(items), rid, rel, None, refs, origin=where, root=base)
        if problem is not None:
            auto.pop(lineno, None)  # the row's text is not usable as an id
        else:
            try:
                item.path = resolve_under(base, rel)
            except InputError as err:
                problem = str(err)
        if not item.id:
            item.id = auto.get(lineno) or (_list_id(rel, base) if rel.strip() else f"line{lineno}")
            if item.id in explicit:  # an automatic id never takes an id another row states
                item.id = f"{item.id}~line{lineno}"
        if problem is None and item.id in seen:
            problem = f"duplicate id {item.id!r} (first on line {seen[item.id]})"
        seen.setdefault(item.id, lineno)
        if problem is not None:
            item.path, item.error = None, f"{where}: {problem}"
        items.append(item)
    return items
