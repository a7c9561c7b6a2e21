"""Reference captions keyed by image, for scoring a captioning run with reference-based metrics. The accepted
layouts (JSON list, JSON object, JSONL) are in docs/evaluate.md."""

from __future__ import annotations

from pathlib import Path

from preference_data import _io
from preference_data.schema import PreferenceFormatError, normalize_space
from recon_score.textfiles import json_objects, read_json

_LIST_KEYS = ("captions", "references", "refs")


def _entry(path: Path, where: int | None, obj: dict) -> tuple[str, list[str]]:
    image = obj.get("image")
    if not isinstance(image, str) or not image:
        raise PreferenceFormatError(path, where, "each entry needs an 'image' string")
    key = next((k for k in _LIST_KEYS if k in obj), None)
    if key is None:
        raise PreferenceFormatError(path, where, f"entry for {image!r} has none of {', '.join(_LIST_KEYS)}")
    return image, _io.references_value(path, where, obj[key])


def load_references(path: str | Path) -> dict[str, list[str]]:
    """image -> reference captions (whitespace-normalised). Duplicate images are an error."""
    path = Path(path)
    out: dict[str, list[str]] = {}

    def add(where: int | None, image: str, refs: list[str]) -> None:
        if image in out:
            raise PreferenceFormatError(path, where, f"image {image!r} is listed twice")
        out[image] = [normalize_space(r) for r in refs]

    if path.suffix.lower() in (".jsonl", ".ndjson"):
        for lineno, obj in json_objects(path):
            add(lineno, *_entry(path, lineno, obj))
        return out
    data = read_json(path)
    if isinstance(data, dict):
        for image, refs in data.items():
            add(None, image, _io.references_value(path, None, refs))
    elif isinstance(data, list):
        for i, obj in enumerate(data):
            if not isinstance(obj, dict):
                raise PreferenceFormatError(path, None, f"entry {i} is not an object")
            add(None, *_entry(path, None, obj))
    else:
        raise PreferenceFormatError(path, None, "expected a JSON list or object of references")
    return out
