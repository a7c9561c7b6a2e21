"""The bundled sample's reference-vs-distractor check: labels, provenance, and the summary arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

from recon_score.sanity import references_vs_distractors

SAMPLE = Path(__file__).resolve().parents[2] / "recon_score" / "sample"
SHARED_CAPTIONS = Path(__file__).resolve().parents[3] / "shared" / "data" / "captions"


def test_summary_on_a_constructed_table():
    rows = [
        {"image": "a", "kind": "reference", "recon_score": 80.0},
        {"image": "a", "kind": "reference", "recon_score": 70.0},
        {"image": "a", "kind": "distractor", "recon_score": 60.0},
        {"image": "b", "kind": "reference", "recon_score": 50.0},
        {"image": "b", "kind": "distractor", "recon_score": 55.0},
        {"image": "b", "kind": "distractor", "recon_score": None, "error": "x"},  # failed rows never count
        {"image": "c", "kind": "reference", "recon_score": 90.0},  # no distractor: not in the share
        {"image": "d", "recon_score": 10.0},  # no kind: ignored
    ]
    s = references_vs_distractors(rows)
    assert s["reference_mean"] == (80 + 70 + 50 + 90) / 4 and s["distractor_mean"] == (60 + 55) / 2
    assert (s["images"], s["images_all_references_above_distractors"]) == (2, 1)
    assert s["share_all_references_above_distractors"] == 0.5
    assert references_vs_distractors([{"image": "a", "recon_score": 1.0}]) is None


def test_sample_has_references_and_distractors_of_other_scenes():
    rows = [json.loads(x) for x in (SAMPLE / "captions.jsonl").read_text(encoding="utf-8").splitlines()]
    refs = {e["image"]: e["captions"] for e in json.loads((SAMPLE / "references.json").read_text())}
    assert {r["kind"] for r in rows} == {"reference", "distractor"}
    for image, captions in refs.items():
        mine = [r for r in rows if r["image"] == image]
        assert [r["caption"] for r in mine if r["kind"] == "reference"] == captions
        distractors = [r for r in mine if r["kind"] == "distractor"]
        assert len(distractors) >= 2 and not {r["caption"] for r in distractors} & set(captions)
    assert len({r["id"] for r in rows}) == len(rows)
    caps_file = SHARED_CAPTIONS / "ucm_test_caps.txt"
    if caps_file.exists():  # each distractor is the UCM-captions sentence its `source` names
        lines = caps_file.read_text(encoding="utf-8").splitlines()
        for r in (r for r in rows if r["kind"] == "distractor"):
            n = int(r["source"].rsplit("line ", 1)[1])
            assert lines[n - 1].strip() == r["caption"]
            assert "(agricultural)" not in r["source"]  # never the farmland tiles' own scene
