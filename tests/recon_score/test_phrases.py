"""The phrase split rule (recon_score.explain.split_phrases) on tricky captions written from real remote-sensing
captions (UCM, RSICD and Sydney test captions, with the numbers, abbreviations, hyphens and brackets that break a
naive split added), and the documented examples in docs/explain.md checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recon_score.explain import split_phrases, without

DOCS = Path(__file__).resolve().parents[2] / "docs" / "explain.md"

# (caption, expected phrases); the source each is written from in the comment
TRICKY = [
    # numbers: digits on both sides of , : . never cut
    (
        "3,000 cars are parked in the parking lot .",
        ["3,000 cars are parked in the parking lot"],
    ),  # UCM parking
    ("about 1,250 trees, a road", ["about 1,250 trees", "a road"]),
    ("a 2.5 km runway with a terminal", ["a 2.5 km runway", "with a terminal"]),  # RSICD airport
    ("the train leaves at 12:30, dense buildings", ["the train leaves at 12:30", "dense buildings"]),
    (
        "a railway station with about 20 railway lines, 1,000 houses around it",
        ["a railway station", "with about 20 railway lines", "1,000 houses around it"],
    ),  # RSICD railwaystation
    ("2 red industrial zones in blue industrial zone", ["2 red industrial zones in blue industrial zone"]),
    ("a runway of 3.2 km. many planes", ["a runway of 3.2 km", "many planes"]),
    ("scale 1:5,000: many houses", ["scale 1:5,000", "many houses"]),
    ("two planes, 3, 4 cars", ["two planes", "3", "4 cars"]),  # a space after the comma: a real cut
    ("10,5 ha of farmland and a river", ["10,5 ha of farmland", "and a river"]),
    # abbreviations: the closed list, any letter case
    ("St. Louis airport with many planes .", ["St. Louis airport", "with many planes"]),
    ("U.S. Route 66 crosses the desert and a farm", ["U.S. Route 66 crosses the desert", "and a farm"]),
    ("many buildings, e.g., a school and a church .", ["many buildings", "e.g., a school", "and a church"]),
    ("a stadium, i.e. a large oval field", ["a stadium", "i.e. a large oval field"]),
    (
        "approx. 20 tracks between lawns and dense buildings",
        ["approx. 20 tracks between lawns", "and dense buildings"],
    ),  # RSICD railwaystation
    ("a hospital on Main St. next to a parking lot", ["a hospital on Main St. next to a parking lot"]),
    ("the church near st. peter square, some trees", ["the church near st. peter square", "some trees"]),
    ("Mt. Fuji behind a lake", ["Mt. Fuji behind a lake"]),
    ("a harbour near the U.S.", ["a harbour near the U.S."]),  # the abbreviation keeps its dot
    ("No. 3 runway, a terminal", ["No. 3 runway", "a terminal"]),
    ("a campus of Tech Univ. with lawns", ["a campus of Tech Univ.", "with lawns"]),
    ("trees, lawns, etc. and a road", ["trees", "lawns, etc.", "and a road"]),
    ("a beach. St. Kilda pier and waves", ["a beach", "St. Kilda pier", "and waves"]),
    # hyphens and slashes: a connective inside a compound word never splits
    ("a red-and-white roof and a lawn", ["a red-and-white roof", "and a lawn"]),
    (
        "a black-and-white building with a t-shaped roof",
        ["a black-and-white building", "with a t-shaped roof"],
    ),
    ("a large open-air parking lot next to the road .", ["a large open-air parking lot next to the road"]),
    ("trees and/or grass on both sides", ["trees and/or grass on both sides"]),
    ("a drive-through with-cars lane", ["a drive-through with-cars lane"]),
    (
        "a playground is semi-surrounded by yellow bare land and buildings",
        ["a playground is semi-surrounded by yellow bare land", "and buildings"],
    ),  # RSICD playground
    # brackets: a bracketed group is one phrase of its own, no cut inside it
    ("houses (with pools) and a road", ["houses", "(with pools)", "and a road"]),
    ("houses (with pools and gardens), a road .", ["houses", "(with pools and gardens)", "a road"]),
    ("a stadium [top left] with a red track", ["a stadium", "[top left]", "with a red track"]),
    ("(left) a park with trees", ["(left)", "a park", "with trees"]),
    ("a park (left", ["a park (left"]),  # unbalanced: plain text
    ("a lake (blue (dark)) while boats float", ["a lake", "(blue (dark))", "while boats float"]),
    ("a pond(with a fountain)and trees", ["a pond", "(with a fountain)", "and trees"]),
    # the plain rule on real captions
    (
        "A residential area with houses arranged neatly while some roads and railways go through .",
        ["A residential area", "with houses arranged neatly", "while some roads", "and railways go through"],
    ),  # Sydney
    (
        "Waves slapping a white sand beach while some birds flying .",
        ["Waves slapping a white sand beach", "while some birds flying"],
    ),  # Sydney beach
    (
        "the parking apron with plane parked on it is surrounded by terminal buildings and airport runways .",
        [
            "the parking apron",
            "with plane parked on it is surrounded by terminal buildings",
            "and airport runways",
        ],
    ),
    (
        "the set-aside area is close to the set-aside area;",
        ["the set-aside area is close to the set-aside area"],
    ),
    (
        "there are two square buildings and paths with square patterns on the lawn .",
        ["there are two square buildings", "and paths", "with square patterns on the lawn"],
    ),  # UCM
    (
        "the playground sits behind a t-shaped, black building .",
        ["the playground sits behind a t-shaped", "black building"],
    ),  # RSICD: the comma still cuts
    ("Android phones, Oregon roads, Thatcher street", ["Android phones", "Oregon roads", "Thatcher street"]),
    ("farmland: green crops; a road!", ["farmland", "green crops", "a road"]),
    ("green farmland", ["green farmland"]),
]


@pytest.mark.parametrize(("caption", "phrases"), TRICKY, ids=[c[:40] for c, _ in TRICKY])
def test_tricky_captions(caption, phrases):
    got = split_phrases(caption)
    assert [p.text for p in got] == phrases
    assert all(caption[p.start : p.end] == p.text for p in got)  # spans index the caption


def test_the_table_is_large_enough():
    assert len(TRICKY) >= 40


def test_leaving_a_bracketed_phrase_out_removes_its_brackets():
    caption = "houses (with pools), and a road."
    p = split_phrases(caption)
    assert without(caption, p[1]) == "houses, and a road."
    assert (
        without("St. Louis airport, a road", split_phrases("St. Louis airport, a road")[1])
        == "St. Louis airport"
    )


def _documented_examples() -> list[tuple[str, list[str]]]:
    """The rows of docs/explain.md's split-rule example table: `caption` | `phrase` · `phrase` ..."""
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("<!-- split examples -->", 2)[1]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = line.strip().strip("|").split("|")
        rows.append((re.findall(r"`([^`]*)`", cells[0])[0], re.findall(r"`([^`]*)`", cells[1])))
    return rows


def test_the_docs_examples_are_what_the_code_gives():
    examples = _documented_examples()
    assert len(examples) >= 8
    for caption, phrases in examples:
        assert [p.text for p in split_phrases(caption)] == phrases, caption
