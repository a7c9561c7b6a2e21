"""The report's view of an explanation and `study explain`'s tables, on hand-made explained rows."""

from __future__ import annotations

import json
import math

import pytest

from eval.report.explain import explain_view, segments
from eval.studies.explain import explained_phrases, kinds_table, worst_table
from recon_score.explain import split_phrases


def _phrase(caption: str, text: str, delta, significant, kind="object", **extra) -> dict:
    start = caption.index(text)
    return {"text": text, "start": start, "end": start + len(text), "kind": kind, "delta": delta,
            "significant": significant, "se": 0.1, **extra}  # fmt: skip


def test_segments_cover_the_caption_in_order_and_colour_by_sign():
    caption = "a farmland, a red barn and <b>three</b> silos"
    phrases = [
        _phrase(caption, "a farmland", 2.0, True),
        _phrase(caption, "a red barn", -1.0, True, kind="colour"),
        _phrase(caption, "and <b>three</b> silos", 0.1, False, kind="count"),
    ]
    segs = segments(caption, phrases)
    assert "".join(s.text for s in segs) == caption
    by_text = {s.text: s for s in segs if s.phrase}
    assert "46,160,67" in by_text["a farmland"].style and by_text["a farmland"].significant
    assert "215,58,73" in by_text["a red barn"].style and "delta -1.000" in by_text["a red barn"].title
    assert not by_text["and <b>three</b> silos"].significant
    # a span that does not fit the caption is dropped, the text is still whole
    bad = [{**phrases[0], "end": 999}]
    assert "".join(s.text for s in segments(caption, bad)) == caption


def test_view_names_the_worst_phrase_and_survives_hostile_values():
    caption = "a farmland, a road"
    ex = {"caption": caption, "phrases": [_phrase(caption, "a road", -0.5, True), "junk", {"start": "x"}],
          "worst_phrase": "a road", "worst_delta": -0.5, "skipped_phrases": 2, "maps_note": None}  # fmt: skip
    view = explain_view(ex, "data:image/png;base64,AAAA")
    assert view.worst == "a road (-0.500)" and view.heatmap.startswith("data:")
    assert "2 phrase(s)" in view.notes[0]
    assert explain_view({"caption": 5, "worst_delta": math.nan}, None).segments == []


@pytest.fixture
def explained_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for i, (caption, deltas, sigs) in enumerate(
        [
            ("a farmland, a red barn and two silos", [3.0, -2.0, 0.5], [True, True, False]),
            ("many trees, a blue lake, on the left", [1.0, -0.2, -1.5], [True, False, True]),
        ]
    ):
        phrases = [
            {"text": p.text, "start": p.start, "end": p.end, "kind": p.kind, "delta": d, "significant": s}
            for p, d, s in zip(split_phrases(caption), deltas, sigs)
        ]
        rows.append({"id": f"r{i}", "caption": caption, "recon_score": 90.0, "explain": {"phrases": phrases}})
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_study_explain_counts_hurtful_kinds(explained_run):
    phrases = explained_phrases({"sys": explained_run})
    assert len(phrases) == 6
    kinds = kinds_table(phrases)
    assert kinds.loc["colour", "phrases"] == 2 and kinds.loc["colour", "negative delta"] == 2
    assert kinds.loc["colour", "hurt (significant)"] == 1  # "a blue lake" is within the noise
    assert kinds.loc["spatial", "hurt (significant)"] == 1  # "on the left", -1.5, significant
    assert kinds.loc["count", "negative delta"] == 0 and kinds.loc["count", "phrases"] == 2
    assert list(kinds.index[:2]) == ["spatial", "colour"]  # 100% hurt, then 50%
    worst = worst_table(phrases, n=2)
    assert list(worst["phrase"]) == ["a red barn", "on the left"]


def test_study_explain_refuses_a_run_without_explanations(tmp_path):
    from recon_score.errors import ReconScoreError

    (tmp_path / "scores.jsonl").write_text(json.dumps({"id": "a", "caption": "x"}) + "\n")
    with pytest.raises(ReconScoreError, match="no explained rows"):
        explained_phrases({"s": tmp_path})
