"""An export's rankings against its round's rules (ties only where the study allows them), and the study's items:
candidates drawn per image, shuffles recorded by their seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preference_data import PreferenceFormatError
from preference_data.annotate import (
    CandidateRow,
    Round,
    StudySettings,
    body_checksum,
    make_items,
    read_export,
    read_header,
    shuffles,
)


def _export(path: Path, ranks: dict, *, ties: bool) -> tuple[Path, Round]:
    body = [json.dumps({"item": "i0001", "ranks": ranks, "note": ""})]
    head = {
        "study": "s",
        "checksum": "c",
        "annotator": "annotator-1",
        "round": "main",
        "exported": "t",
        "ranked": 1,
        "missing": [],
        "body_sha256": body_checksum(body),
    }
    path.write_text("\n".join([json.dumps(head), *body]) + "\n")
    return path, Round("s", "c", ("annotator-1",), {"i0001": 3}, ties)


def _read(path: Path, expect: Round):
    head, body = read_header(path)
    return read_export(path, head, body, expect)


def test_ties_are_competition_ranks_where_the_study_allows_them(tmp_path):
    path, expect = _export(tmp_path / "e.jsonl", {"A": 1, "B": 1, "C": 3}, ties=True)
    assert _read(path, expect).ranks == {"i0001": {"A": 1, "B": 1, "C": 3}}
    path, expect = _export(tmp_path / "e.jsonl", {"A": 1, "B": 1, "C": 2}, ties=True)
    with pytest.raises(PreferenceFormatError, match=r"e.jsonl:2: item 'i0001': rank 2 follows 2 better"):
        _read(path, expect)
    path, expect = _export(tmp_path / "e.jsonl", {"A": 1, "B": 1, "C": 3}, ties=False)
    with pytest.raises(PreferenceFormatError, match="rank 1 is given twice"):
        _read(path, expect)


@pytest.mark.parametrize(
    ("ranks", "message"),
    [
        ({"A": 1, "B": 2}, "must give each of A, B, C a rank"),
        ({"A": 1, "B": 2, "C": 4}, "the rank of C must be a whole number 1-3"),
        ({"A": 1, "B": 2, "C": True}, "the rank of C must be a whole number"),
    ],
)
def test_a_ranking_that_is_not_one_is_named(tmp_path, ranks, message):
    path, expect = _export(tmp_path / "e.jsonl", ranks, ties=False)
    with pytest.raises(PreferenceFormatError, match=message):
        _read(path, expect)


def test_not_an_export(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"image": "a.png"}\n')
    with pytest.raises(PreferenceFormatError, match=r"x\.jsonl:1: is not a reconscore annotation export"):
        read_header(path)


def test_candidates_drawn_per_image_and_shuffles_repeat_with_their_seed():
    rows = [
        CandidateRow(f"im{k}.png", f"caption {m}", f"model-{m}", (), f"t:{k}")
        for k in range(5)
        for m in range(6)
    ]
    items = make_items(rows, per_image=3, seed=1)
    assert all(len(it.candidates) == 3 for it in items)
    assert items == make_items(rows, per_image=3, seed=1) and items != make_items(rows, per_image=3, seed=2)
    settings = StudySettings(2, 0, False, 3, "t")
    a = shuffles(items, settings)
    assert a == shuffles(items, settings) and a["annotator-1"] != a["annotator-2"]
    assert all(sorted(order) == [0, 1, 2] for orders in a.values() for order in orders.values())
