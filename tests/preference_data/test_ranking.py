"""Ranking format (UCM-preference style), JSONL and CSV: the example files, validation, malformed lines."""

import ast
import json
from pathlib import Path

import pandas as pd
import pytest

import preference_data
from eval.preferences import load_preferences
from preference_data import COLUMNS, PreferenceFormatError, load_ranking
from recon_score.textfiles import TextFileError

PKG = Path(preference_data.__file__).parent
EXAMPLES = PKG / "examples"


def test_jsonl_and_csv_examples_load_to_the_same_table():
    a = load_ranking(EXAMPLES / "ranking_example.jsonl")
    b = load_ranking(EXAMPLES / "ranking_example.csv")
    assert list(a.columns) == list(COLUMNS)
    cols = ["image", "candidate", "references", "judgment", "judgment_kind", "rater", "model"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert len(a) == 9 and a["image"].nunique() == 3
    assert a["judgment"].tolist() == [1.0, 2.0, 3.0] * 3 and (a["judgment_kind"] == "rank").all()
    assert a["model"].iloc[0] == "Qwen3-VL-8B" and a["rater"].iloc[0] == "consensus"
    assert a["references"].iloc[0][0] == "There is a piece of farmland ."
    assert a["source"].iloc[3] == "ranking_example.jsonl:2" and b["source"].iloc[3] == "ranking_example.csv:5"


def test_example_images_exist_under_the_documented_root():
    root = PKG.parent / "recon_score" / "sample"
    for image in load_ranking(EXAMPLES / "ranking_example.jsonl")["image"].unique():
        assert (root / image).is_file()


def _line(**over):
    obj = {
        "image": "a.png",
        "references": ["a farm"],
        "candidates": [{"caption": "fields", "rank": 1, "model": "m1"}, {"caption": "a city", "rank": 2}],
    }
    obj.update(over)
    return json.dumps(obj)


def test_ties_raters_and_optional_fields(tmp_path):
    p = tmp_path / "r.jsonl"
    lines = [
        _line(rater="r1"),
        _line(rater="r2", candidates=[{"caption": "fields", "rank": 1}, {"caption": "a city", "rank": 1}]),
        json.dumps(
            {"image": "b.png", "candidates": [{"caption": "x", "rank": 2}, {"caption": "y", "rank": 1}]}
        ),
    ]
    p.write_text("\n".join(lines) + "\n\n")
    df = load_ranking(p)
    assert len(df) == 6  # each rater's ranking is its own rows: no averaging
    assert df["rater"].tolist() == ["r1", "r1", "r2", "r2", None, None]
    assert df["judgment"].tolist() == [1, 2, 1, 1, 2, 1]
    assert df["references"].iloc[4] == [] and df["model"].iloc[1] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (_line(image=""), "'image' must be a non-empty string"),
        (_line(candidates=[{"caption": "a", "rank": 1}]), "at least 2"),
        (_line(candidates=[{"caption": "a", "rank": 0}, {"caption": "b", "rank": 1}]), "whole number >= 1"),
        (_line(candidates=[{"caption": "a", "rank": 1.5}, {"caption": "b", "rank": 1}]), "whole number"),
        (_line(candidates=[{"caption": "a"}, {"caption": "b", "rank": 1}]), "rank"),
        (_line(candidates=[{"caption": "", "rank": 1}, {"caption": "b", "rank": 2}]), "caption"),
        (_line(candidates="a, b"), "must be a list"),
        (_line(refrences=["x"]), "did you mean 'references'"),
        (_line(references="a farm"), "JSON array"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, content, message):
    p = tmp_path / "ranks.jsonl"
    p.write_text(_line(image="first.png") + "\n" + content + "\n")
    with pytest.raises(TextFileError, match=message) as err:
        load_ranking(p)
    assert str(err.value).startswith(f"{p}:2:")


def test_duplicate_ranking_and_conflicting_references(tmp_path):
    p = tmp_path / "dup.jsonl"
    p.write_text(_line() + "\n" + _line() + "\n")
    with pytest.raises(PreferenceFormatError, match="already ranked at line 1") as err:
        load_ranking(p)
    assert f"{p}:2:" in str(err.value)
    p.write_text(_line(rater="a") + "\n" + _line(rater="b", references=["other"]) + "\n")
    with pytest.raises(PreferenceFormatError, match="differ from those at line 1"):
        load_ranking(p)


@pytest.mark.parametrize(
    ("content", "message", "line"),
    [
        ("image,caption\na.png,x\n", "missing rank", 1),
        ("image,caption,rank,score\n", "unknown column 'score'", 1),
        ("image,caption,rank\na.png,x,1\na.png,y,2,extra\n", "more fields", 3),
        ("image,caption,rank\na.png,x,1\na.png,y,two\n", "'rank' must be a number", 3),
        ('image,caption,rank,references\na.png,x,1,"[1]"\na.png,y,2,\n', "list of non-empty strings", 2),
        ("image,caption,rank\na.png,x,1\nb.png,y,2\n", "at least 2", 2),
    ],
)
def test_malformed_csv_names_file_and_line(tmp_path, content, message, line):
    p = tmp_path / "ranks.csv"
    p.write_text(content)
    with pytest.raises(PreferenceFormatError, match=message) as err:
        load_ranking(p)
    assert f"{p}:{line}:" in str(err.value)


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(PreferenceFormatError, match="suffix"):
        load_ranking(tmp_path / "r.txt")
    with pytest.raises(TextFileError, match="file not found"):
        load_preferences(tmp_path / "r.jsonl", "ranking")
    with pytest.raises(
        ValueError, match=r"unknown preference format 'rankings' \(did you mean 'ranking'\?\)"
    ):
        load_preferences(EXAMPLES / "ranking_example.jsonl", "rankings")


def test_preference_data_imports_only_the_text_policy_of_reconscore():
    """preference_data is pure data loading: of the other packages it imports only `recon_score.textfiles`, the
    project's one policy for reading text files (strict UTF-8, lines by "\\n", JSON, CSV), rather than a copy."""
    banned = ("recon_score", "describer", "retrieval", "eval")
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                ok = name == "recon_score.textfiles"
                assert ok or name.split(".")[0] not in banned, f"{path.name} imports {name}"
