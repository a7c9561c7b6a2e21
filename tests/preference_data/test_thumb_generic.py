"""THumB 1.0 (excerpt of the real files), the generic scored CSV, and the references reader."""

import json
import shutil
from pathlib import Path

import pytest

from eval.preferences import load_preferences
from preference_data import (
    PreferenceFormatError,
    load_references,
    load_scores_csv,
    load_thumb,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "thumb"
SAMPLE_REFS = Path(__file__).resolve().parents[2] / "recon_score" / "sample" / "references.json"


def test_thumb_excerpt():
    df = load_thumb(DATA / "mscoco_THumB-1.0.jsonl")
    assert len(df) == 25 and df["image"].nunique() == 5
    assert set(df["model"]) == {"Up-Down", "Unified-VLP", "VinVL-base", "VinVL-large", "Human"}
    first = df.iloc[0]
    assert first["judgment"] == 3.5 and first["judgment_kind"] == "score"  # (P 4 + R 3) / 2
    assert first["candidate"] == "A group of people riding on the back of an elephant."
    assert first["references"][1] == "A group of people ride atop of an elephant."
    assert len(first["references"]) == 4


def test_thumb_errors_name_file_and_line(tmp_path):
    shutil.copy(DATA / "mscoco_THumB-1.0.jsonl", tmp_path / "t.jsonl")
    with pytest.raises(PreferenceFormatError, match=r"mscoco_references\.json"):
        load_thumb(tmp_path / "t.jsonl")
    lines = (DATA / "mscoco_THumB-1.0.jsonl").read_text().splitlines()
    obj = json.loads(lines[2])
    obj.pop("hyp")
    lines[2] = json.dumps(obj)
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(PreferenceFormatError, match="missing 'hyp'") as err:
        load_preferences(tmp_path / "t.jsonl", "thumb", references=DATA / "mscoco_references.json")
    assert f"{tmp_path / 't.jsonl'}:3:" in str(err.value)


def test_generic_csv(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(
        'image,caption,score,references,rater\na.png,  a  farm ,3.5,"[""fields""]",r1\nb.png,city,-1,,\n'
    )
    df = load_scores_csv(p)
    assert df["candidate"].tolist() == ["a farm", "city"]
    assert df["judgment"].tolist() == [3.5, -1.0] and (df["judgment_kind"] == "score").all()
    assert df["references"].tolist() == [["fields"], []] and df["rater"].tolist() == ["r1", None]
    p.write_text("image,caption,score\na.png,x,high\n")
    with pytest.raises(PreferenceFormatError, match="'score' must be a number") as err:
        load_scores_csv(p)
    assert f"{p}:2:" in str(err.value)
    p.write_text("image,caption,score\n")
    with pytest.raises(PreferenceFormatError, match="no rows"):
        load_scores_csv(p)


def test_references_layouts(tmp_path):
    refs = load_references(SAMPLE_REFS)
    assert len(refs) == 9 and refs["images/UCM_1.tif"][0] == "There is a piece of farmland ."
    (tmp_path / "r.json").write_text(json.dumps({"a.png": ["x  y", "z"]}))
    assert load_references(tmp_path / "r.json") == {"a.png": ["x y", "z"]}
    (tmp_path / "r.jsonl").write_text(
        '{"image": "a.png", "references": ["x"]}\n{"image": "a.png", "refs": ["y"]}\n'
    )
    with pytest.raises(PreferenceFormatError, match="listed twice") as err:
        load_references(tmp_path / "r.jsonl")
    assert ":2:" in str(err.value)
