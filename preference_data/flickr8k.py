"""Flickr8K-Expert and Flickr8K-CrowdFlower (Hodosh et al., 2013) from the original annotation files, with the
reference handling of the CLIPScore protocol (Hessel et al., 2021, appendix A; their `flickr8k_example/download.py`,
itself following the SPICE paper). See docs/correlate.md, "Human-judgment sets". Texts are compared exactly
(stripped) when skipping or removing, and whitespace-normalised afterwards, as that code does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pandas as pd

from preference_data import _io
from preference_data.schema import PreferenceFormatError, make_table
from recon_score.textfiles import read_lines

CAPTIONS_FILE = "Flickr8k.token.txt"


def _lines(path: Path):
    for lineno, raw in read_lines(path):
        line = raw.strip()
        if line:
            yield lineno, line


def read_captions(path: str | Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """`Flickr8k.token.txt` -> (caption id -> text, image file name -> its captions in file order)."""
    path = Path(path)
    by_id: dict[str, str] = {}
    by_image: dict[str, list[str]] = defaultdict(list)
    for lineno, line in _lines(path):
        parts = line.split("\t")
        if len(parts) != 2 or "#" not in parts[0] or not parts[1].strip():
            raise PreferenceFormatError(
                path, lineno, "expected '<image>#<k><TAB><caption>' (the Flickr8k.token.txt layout)"
            )
        cid, text = parts
        if cid in by_id:
            raise PreferenceFormatError(path, lineno, f"caption id {cid!r} appears twice")
        by_id[cid] = text
        by_image[cid.split("#", 1)[0]].append(text)
    if not by_id:
        raise PreferenceFormatError(path, None, "no captions found")
    return by_id, dict(by_image)


def _captions_path(annotations: Path, captions: str | Path | None) -> Path:
    what = f"caption file ({CAPTIONS_FILE} from the Flickr8k text release)"
    return _io.companion_file(annotations, captions, CAPTIONS_FILE, what)


def _fields(path: Path, lineno: int, line: str, what: str) -> tuple[str, str, list[float]]:
    parts = line.split("\t")
    if len(parts) != 5:
        raise PreferenceFormatError(
            path, lineno, f"expected 5 tab-separated fields ({what}), got {len(parts)}"
        )
    try:
        values = [float(x) for x in parts[2:]]
    except ValueError:
        raise PreferenceFormatError(path, lineno, f"fields 3-5 must be numbers ({what})") from None
    return parts[0], parts[1], values


def _lookup(path, lineno, cid, image, by_id, by_image) -> tuple[str, list[str]]:
    if cid not in by_id:
        raise PreferenceFormatError(path, lineno, f"caption id {cid!r} is not in {CAPTIONS_FILE}")
    if image not in by_image:
        raise PreferenceFormatError(path, lineno, f"image {image!r} has no captions in {CAPTIONS_FILE}")
    return by_id[cid], by_image[image]


def load_flickr8k_expert(annotations: str | Path, captions: str | Path | None = None) -> pd.DataFrame:
    """`ExpertAnnotations.txt` -> one row per (image, candidate, expert) (the CLIPScore protocol)."""
    path = Path(annotations)
    by_id, by_image = read_captions(_captions_path(path, captions))
    rows, skipped, pairs = [], 0, 0
    what = "image, caption id, expert 1, expert 2, expert 3"
    for lineno, line in _lines(path):
        image, cid, scores = _fields(path, lineno, line, what)
        text, refs = _lookup(path, lineno, cid, image, by_id, by_image)
        for s in scores:
            if not math.isnan(s) and not 1 <= s <= 4:
                raise PreferenceFormatError(path, lineno, f"expert scores range from 1 to 4, got {s:g}")
        if text in refs:  # a reference judged against its own image: skipped (SPICE / CLIPScore protocol)
            skipped += 1
            continue
        pairs += 1
        for k, s in enumerate(scores, start=1):
            if math.isnan(s):
                continue
            rows.append(
                {
                    "image": image,
                    "candidate": text,
                    "references": refs,
                    "judgment": s,
                    "judgment_kind": "rating",
                    "rater": f"expert{k}",
                    "model": None,
                    "candidate_id": cid,
                    "source": f"{path.name}:{lineno}",
                }
            )
    if not rows:
        raise PreferenceFormatError(path, None, "no usable expert judgments")
    notes = [
        f"{pairs} (image, candidate) pairs x 3 experts = {len(rows)} rows; skipped {skipped} candidates that "
        "are among their image's own references"
    ]
    return make_table(rows, fmt="flickr8k-expert", path=path, notes=notes)


def load_flickr8k_crowdflower(annotations: str | Path, captions: str | Path | None = None) -> pd.DataFrame:
    """`CrowdFlowerAnnotations.txt` -> one row per (image, candidate) (the CLIPScore protocol)."""
    path = Path(annotations)
    by_id, by_image = read_captions(_captions_path(path, captions))
    what = "image, caption id, share of yes, yes votes, no votes"
    parsed = []
    remaining: dict[str, list[str]] = {}
    for lineno, line in _lines(path):
        image, cid, (share, n_yes, n_no) = _fields(path, lineno, line, what)
        text, refs = _lookup(path, lineno, cid, image, by_id, by_image)
        if not all(math.isfinite(v) for v in (share, n_yes, n_no)):
            raise PreferenceFormatError(
                path, lineno, "the share of yes and the vote counts must be finite numbers"
            )
        if n_yes < 0 or n_no < 0 or n_yes + n_no == 0 or n_yes != int(n_yes) or n_no != int(n_no):
            raise PreferenceFormatError(path, lineno, "vote counts must be non-negative integers, not both 0")
        if abs(share - n_yes / (n_yes + n_no)) > 1e-5:
            raise PreferenceFormatError(
                path, lineno, f"share of yes {share:g} != {int(n_yes)}/({int(n_yes)}+{int(n_no)})"
            )
        pool = remaining.setdefault(image, list(refs))
        if text in pool:  # every caption rated for an image leaves that image's references
            pool.remove(text)
        parsed.append((lineno, image, cid, text, share))
    if not parsed:
        raise PreferenceFormatError(path, None, "no CrowdFlower judgments")
    rows = [
        {
            "image": image,
            "candidate": text,
            "references": remaining[image],
            "judgment": share,
            "judgment_kind": "yes_fraction",
            "rater": "crowdflower",
            "model": None,
            "candidate_id": cid,
            "source": f"{path.name}:{lineno}",
        }
        for lineno, image, cid, text, share in parsed
    ]
    removed = sum(len(by_image[i]) - len(pool) for i, pool in remaining.items())
    notes = [
        f"{len(rows)} rows over {len(remaining)} images; removed {removed} references that were themselves rated "
        "for their image"
    ]
    return make_table(rows, fmt="flickr8k-crowdflower", path=path, notes=notes)
