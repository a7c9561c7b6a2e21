"""Shared by the annotate tests: the bundled sample's candidates as a table, a study built from it, and exports
written the way the page writes them (for the checks that need no browser)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from preference_data.annotate import LABELS, body_checksum

SAMPLE = Path(__file__).resolve().parents[2] / "recon_score" / "sample"
MODELS = {"0": "reference", "d0": "distractor-a", "d1": "distractor-b"}


def sample_candidates(path: Path, *, limit: int | None = None) -> Path:
    """Per bundled image: its first human caption (model `reference`, scored against the other four) and two
    captions of other images (`distractor-a`, `distractor-b`)."""
    rows = [json.loads(line) for line in (SAMPLE / "captions.jsonl").read_text().splitlines()]
    refs: dict[str, list[str]] = {}
    for r in rows:
        if r["kind"] == "reference" and not r["id"].endswith("#0"):
            refs.setdefault(r["image"], []).append(r["caption"])
    out = []
    for r in rows:
        k = r["id"].split("#")[1]
        if k in MODELS:
            out.append(
                {
                    "image": r["image"],
                    "candidate": r["caption"],
                    "model": MODELS[k],
                    "references": json.dumps(refs[r["image"]]),
                }
            )
    images = list(dict.fromkeys(r["image"] for r in out))[:limit]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, ["image", "candidate", "model", "references"])
        w.writeheader()
        w.writerows(r for r in out if r["image"] in images)
    return path


def page_data(page: Path) -> dict:
    """The JSON a page embeds (what its script reads)."""
    text = page.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="study-data">') + len(
        '<script type="application/json" id="study-data">'
    )
    return json.loads(text[start : text.index("</script>", start)])


def write_export(path: Path, data: dict, ranks: dict[str, dict[str, int]], *, missing=(), **head) -> Path:
    """An export as the page writes it (header, then one line per ranked item); `head` overrides header fields."""
    body = [json.dumps({"item": i, "ranks": r, "note": ""}, separators=(",", ":")) for i, r in ranks.items()]
    header = {
        "study": data["study"],
        "checksum": data["checksum"],
        "annotator": data["annotator"],
        "round": data["round"],
        "exported": "2026-12-02T12:00:00.000Z",
        "ranked": len(body),
        "missing": list(missing),
        "body_sha256": body_checksum(body),
        **head,
    }
    path.write_text("\n".join([json.dumps(header), *body]) + "\n", encoding="utf-8")
    return path


def in_order(data: dict, order) -> dict[str, dict[str, int]]:
    """Ranks by label for every item: order(item) -> candidate positions on the page, best first."""
    out = {}
    for it in data["items"]:
        out[it["id"]] = {LABELS[pos]: k + 1 for k, pos in enumerate(order(it))}
    return out
