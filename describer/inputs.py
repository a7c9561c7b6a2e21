"""Which images to describe: a folder (recursively), one image file, or a list file (.txt paths / .jsonl rows
with `image`, optional `id` and `references`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recon_score.errors import InputError, ReconScoreError
from recon_score.images import resolve_under

IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp", ".webp")
SAMPLE_DIR = Path(__file__).resolve().parent.parent / "recon_score" / "sample"


@dataclass
class ImageItem:
    index: int
    id: str
    image: str  # as given / relative to the root
    path: Path | None
    references: list[str] | None = None
    error: str | None = None
    digest: str | None = None  # sha256 of the file's bytes, set by the run (recon_score.results.FileDigests)

    def key(self) -> str:
        """Resume key: a journaled result is reused only for the same id, path and file bytes."""
        from recon_score.results import resume_key

        return resume_key({"id": self.id, "image": self.image, "image_sha256": self.digest})


def _sample_items() -> list[ImageItem]:
    refs = {e["image"]: e["captions"] for e in json.loads((SAMPLE_DIR / "references.json").read_text())}
    paths = sorted((SAMPLE_DIR / "images").glob("UCM_*.tif"), key=lambda p: int(p.stem.split("_")[1]))
    return [
        ImageItem(i, p.stem, f"images/{p.name}", p, refs.get(f"images/{p.name}")) for i, p in enumerate(paths)
    ]


def discover_images(source: Path | None, *, root: Path | None = None) -> list[ImageItem]:
    """Images to caption, in a stable order (folders: sorted relative paths)."""
    if source is None:
        return _sample_items()
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ReconScoreError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {source}")
        rels = [p.relative_to(source).as_posix() for p in files]
        return [ImageItem(i, rel, rel, p) for i, (rel, p) in enumerate(zip(rels, files))]
    if not source.is_file():
        raise ReconScoreError(f"--inputs {source} does not exist")
    if source.suffix.lower() in IMAGE_SUFFIXES:
        return [ImageItem(0, source.stem, source.name, source)]
    base = Path(root) if root else source.parent
    items: list[ImageItem] = []
    seen: dict[str, int] = {}
    lines = source.read_text(encoding="utf-8").splitlines()
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        refs, rid = None, None
        if source.suffix.lower() in (".jsonl", ".ndjson"):
            try:
                rec = json.loads(raw)
                rel = rec["image"]
                rid = rec.get("id")
                refs = rec.get("references")
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                items.append(
                    ImageItem(
                        len(items),
                        f"line{lineno}",
                        raw[:80],
                        None,
                        error=f"{source.name}:{lineno}: not a JSON object with `image` ({err})",
                    )
                )
                continue
        elif source.suffix.lower() == ".txt":
            rel = raw.strip()
        else:
            raise ReconScoreError(
                f"--images {source}: expected a folder, an image, a .txt list or a .jsonl file"
            )
        item = ImageItem(
            len(items), str(rid) if rid is not None else Path(str(rel)).stem, str(rel), None, refs
        )
        if item.id in seen:
            item.error = f"{source.name}:{lineno}: duplicate id {item.id!r} (first on line {seen[item.id]})"
        else:
            seen[item.id] = lineno
            try:
                item.path = resolve_under(base, str(rel))
            except InputError as err:
                item.error = f"{source.name}:{lineno}: {err}"
        items.append(item)
    return items
