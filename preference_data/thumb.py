"""THumB 1.0 (Kasai et al., NAACL 2022): human scores for 5 systems' captions of 500 MSCOCO (Karpathy test)
images; the judgment is `human_score`, the system the row's model. See docs/correlate.md, "Human-judgment sets".
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from preference_data import _io
from preference_data.schema import PreferenceFormatError, make_table
from recon_score.textfiles import json_objects

REFERENCES_FILE = "mscoco_references.json"
SCORE_KEYS = ("P", "R", "Fl", "Inc", "Con", "human_score")


def read_thumb_references(path: str | Path) -> dict[str, list[str]]:
    path = Path(path)
    out: dict[str, list[str]] = {}
    for lineno, obj in json_objects(path):
        seg = obj.get("seg_id")
        if seg is None:
            raise PreferenceFormatError(path, lineno, "missing 'seg_id'")
        refs = _io.references_value(path, lineno, obj.get("refs"))
        if not refs:
            raise PreferenceFormatError(path, lineno, "missing or empty 'refs'")
        out[str(seg)] = refs
    return out


def load_thumb(path: str | Path, references: str | Path | None = None) -> pd.DataFrame:
    """THumB 1.0 jsonl -> the tidy table (judgment kind `score`, model = system, rater = None)."""
    path = Path(path)
    what = f"references file ({REFERENCES_FILE} from THumB)"
    ref_path = _io.companion_file(path, references, REFERENCES_FILE, what)
    refs = read_thumb_references(ref_path)
    rows = []
    for lineno, obj in json_objects(path):
        for key in ("SYS", "seg_id", "hyp", "image", "human_score"):
            if obj.get(key) in (None, ""):
                raise PreferenceFormatError(path, lineno, f"missing {key!r} (THumB 1.0 layout)")
        seg = str(obj["seg_id"])
        if seg not in refs:
            raise PreferenceFormatError(path, lineno, f"seg_id {seg!r} has no references in {ref_path.name}")
        for key in SCORE_KEYS:
            if key in obj:
                _io.number(path, lineno, obj[key], key)
        rows.append(
            {
                "image": _io.text_field(path, lineno, obj["image"], "image"),
                "candidate": _io.text_field(path, lineno, obj["hyp"], "hyp"),
                "references": refs[seg],
                "judgment": float(obj["human_score"]),
                "judgment_kind": "score",
                "rater": None,
                "model": str(obj["SYS"]),
                "candidate_id": f"{seg}/{obj['SYS']}",
                "source": f"{path.name}:{lineno}",
            }
        )
    if not rows:
        raise PreferenceFormatError(path, None, "no THumB rows")
    systems = sorted({r["model"] for r in rows})
    notes = [f"{len(rows)} captions of {len({r['image'] for r in rows})} images by {', '.join(systems)}"]
    return make_table(rows, fmt="thumb", path=path, notes=notes)
