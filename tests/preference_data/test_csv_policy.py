"""One CSV policy for every reader: the caption tables (`recon_score.textfiles.csv_dicts`), the preference tables
(`preference_data`, whose field checks sit on top of `csv_dicts`),
header-less lists (`csv_rows`) and the paradigm map: a field of any length, strict quoting, and the line where the
record starts."""

from __future__ import annotations

import pytest

from preference_data import _io
from preference_data.ranking import load_ranking
from recon_score.textfiles import TextFileError, csv_dicts, csv_rows

LONG = "x" * 200_000  # over the csv module's default field limit (131,072)
HEADER = "image,caption,rank\n"
# name -> (body after the header, expected [(line, caption)] or the line of the first error)
CASES = {
    "long field on line 2": (f"a.png,{LONG},1\nb.png,short,2\n", [(2, LONG), (3, "short")]),
    "long quoted field on line 3": (f'a.png,ok,1\nb.png,"{LONG}",2\n', [(2, "ok"), (3, LONG)]),
    "record spanning lines": ('a.png,"two\nlines",1\nb.png,c,2\n', [(2, "two\nlines"), (4, "c")]),
    "blank lines and CRLF": ("\r\na.png,ok,1\r\n\r\nb.png,c,2\r\n", [(3, "ok"), (5, "c")]),
    "unclosed quote": ('a.png,ok,1\nb.png,"never closed,2\n', 3),
    "text after a closing quote": ('a.png,"big" trees,1\n', 2),
}


def _pref(path):
    return [
        (line, rec["caption"])
        for line, rec in _io.csv_records(path, required=("image", "caption", "rank"), optional=())
    ]


def _caps(path):
    return [(line, rec["caption"]) for line, rec in csv_dicts(path)[1]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_caption_and_preference_readers_give_the_same_records_and_lines(tmp_path, name):
    body, expected = CASES[name]
    path = tmp_path / "t.csv"
    path.write_bytes((HEADER + body).encode())
    if isinstance(expected, list):
        assert _caps(path) == expected
        assert _pref(path) == expected
        return
    with pytest.raises(TextFileError, match=rf"t\.csv:{expected}: malformed CSV"):
        _caps(path)
    with pytest.raises(TextFileError, match=rf"t\.csv:{expected}: malformed CSV"):
        _pref(path)


def test_a_200k_character_field_reaches_the_ranking(tmp_path):
    """What `correlate --preferences longfield.csv` reads: the long caption is a candidate, not
    'longfield.csv:1: malformed CSV (field larger than field limit)'."""
    path = tmp_path / "longfield.csv"
    path.write_text(f"image,caption,rank\na.png,{LONG},1\na.png,short,2\n", encoding="utf-8")
    captions = sorted(load_ranking(path)["candidate"].tolist(), key=len)
    assert captions == ["short", LONG]


def test_headerless_rows_and_the_paradigm_map_follow_the_policy(tmp_path):
    from eval.studies.paradigms import parse_paradigms

    rows = tmp_path / "rows.csv"
    rows.write_text(f'a,"two\nlines"\nb,{LONG}\n', encoding="utf-8")
    assert csv_rows(rows) == [(1, ["a", "two\nlines"]), (3, ["b", LONG])]
    rows.write_text('a,b\nc,"open\n', encoding="utf-8")
    with pytest.raises(TextFileError, match=r"rows\.csv:2: malformed CSV"):
        csv_rows(rows)
    para = tmp_path / "para.csv"
    para.write_text(f"\ufeffmodel,paradigm\nm1,zero-shot\n{LONG},fine-tuned\n", encoding="utf-8")
    assert parse_paradigms(str(para)) == {"m1": "zero-shot", LONG: "fine-tuned"}


def test_a_json_paradigm_map_is_read_by_the_one_text_policy(tmp_path):
    """A .json map naming a model twice is refused naming the file and the model (json.loads kept the later
    paradigm silently); so are bytes that are not UTF-8."""
    from eval.studies.paradigms import parse_paradigms

    para = tmp_path / "para.json"
    para.write_text('{"m1": "zero-shot", "m2": "fine-tuned"}', encoding="utf-8")
    assert parse_paradigms(str(para)) == {"m1": "zero-shot", "m2": "fine-tuned"}
    para.write_text('{"m1": "zero-shot", "m1": "fine-tuned"}', encoding="utf-8")
    with pytest.raises(TextFileError, match=r"para\.json: key 'm1' appears twice"):
        parse_paradigms(str(para))
    para.write_bytes(b'{"m1": "zero-shot\xff"}')
    with pytest.raises(TextFileError, match=r"para\.json"):
        parse_paradigms(str(para))


def test_a_paradigm_map_names_each_model_once_in_every_form(tmp_path):
    """A model given twice, inline or in a CSV, is refused naming it (the later paradigm won silently); the inline
    form strips spaces as every KEY=VALUE option does."""
    from eval.studies.paradigms import parse_paradigms
    from recon_score.errors import ReconScoreError

    assert parse_paradigms(" m1 = zero-shot , m2=fine-tuned,") == {"m1": "zero-shot", "m2": "fine-tuned"}
    with pytest.raises(ReconScoreError, match="--paradigms: key 'm1' given twice"):
        parse_paradigms("m1=zero-shot,m1=fine-tuned")
    para = tmp_path / "para.csv"
    para.write_text("model,paradigm\nm1,zero-shot\nm1,fine-tuned\n", encoding="utf-8")
    with pytest.raises(ReconScoreError, match=r"para\.csv:3: model 'm1' given twice"):
        parse_paradigms(str(para))
