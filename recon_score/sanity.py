"""Reference-vs-distractor check: does the metric rank an image's human captions (`kind: reference`) above
real captions of other scene classes (`kind: distractor`)? The bundled sample has both.
"""

from __future__ import annotations

import statistics
from collections import defaultdict


def references_vs_distractors(rows: list[dict], score: str = "recon_score") -> dict | None:
    """Mean score per kind and the share of images (those with a scored reference and distractor) where
    min(references) > max(distractors); None when no row has a `kind` of reference/distractor."""
    by_image: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"reference": [], "distractor": []})
    seen = False
    for r in rows:
        kind = r.get("kind")
        if kind not in ("reference", "distractor"):
            continue
        seen = True
        if r.get(score) is not None and not r.get("error"):
            by_image[str(r.get("image"))][kind].append(float(r[score]))
    if not seen:
        return None
    refs = [s for d in by_image.values() for s in d["reference"]]
    dis = [s for d in by_image.values() for s in d["distractor"]]
    paired = [d for d in by_image.values() if d["reference"] and d["distractor"]]
    separated = sum(min(d["reference"]) > max(d["distractor"]) for d in paired)
    return {
        "reference_mean": statistics.fmean(refs) if refs else None,
        "distractor_mean": statistics.fmean(dis) if dis else None,
        "references": len(refs),
        "distractors": len(dis),
        "images": len(paired),
        "images_all_references_above_distractors": separated,
        "share_all_references_above_distractors": separated / len(paired) if paired else None,
    }
