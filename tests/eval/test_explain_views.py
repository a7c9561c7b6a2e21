"""The report's view of an explanation and `study explain`'s tables, on hand-made explained rows."""

from __future__ import annotations

import json
import math

import pytest

from eval.cli import main
from eval.report.explain import explain_view, segments
from eval.studies.explain import explained_phrases, kinds_table, worst_table
from recon_score.explain import split_phrases
from tests.smoke_cli import assert_restored


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
    found = explained_phrases({"sys": explained_run})
    phrases = found.phrases
    assert len(phrases) == 6 and found.rows == 2 and found.problems == []
    kinds = kinds_table(phrases)
    assert kinds.loc["colour", "phrases"] == 2 and kinds.loc["colour", "negative delta"] == 2
    assert kinds.loc["colour", "hurt (significant)"] == 1  # "a blue lake" is within the noise
    assert kinds.loc["spatial", "hurt (significant)"] == 1  # "on the left", -1.5, significant
    assert kinds.loc["count", "negative delta"] == 0 and kinds.loc["count", "phrases"] == 2
    assert list(kinds.index[:2]) == ["spatial", "colour"]  # 100% hurt, then 50%
    worst = worst_table(phrases, n=2)
    assert list(worst["phrase"]) == ["a red barn", "on the left"] and list(worst.index) == [1, 2]
    helped = worst_table(phrases)  # only the phrases whose removal helped: negative deltas
    assert list(helped["phrase"]) == ["a red barn", "on the left", "a blue lake"]
    assert helped.index.name == "rank"


def test_study_tables_print_counts_as_integers_and_no_negative_zero(explained_run):
    from eval.studies.common import markdown_table

    kinds = kinds_table(explained_phrases({"sys": explained_run}).phrases)
    kinds.loc["object", "mean delta"] = -0.001
    md = markdown_table(kinds)
    count_row = next(line for line in md.splitlines() if line.startswith("| count |"))
    assert count_row.split("|")[2].strip() == "2"  # an integer, not 2.00
    object_row = next(line for line in md.splitlines() if line.startswith("| object |"))
    assert "-0.00" not in object_row and " 0.00 " in object_row


def _write_rows(folder, rows) -> None:
    folder.mkdir()
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(
    ("phrases", "why"),
    [
        ("a farmland", "explain.phrases is str, not a list"),
        (None, "explain.phrases is NoneType, not a list"),
        ([1], "a phrase is int 1, not an object"),
        ([{"text": "a road", "kind": "object", "delta": "-0.5", "significant": True}], "not a finite number"),
        (
            [{"text": "a road", "kind": "object", "delta": 1e308, "significant": True}],
            "outside the score's +-100",
        ),
        ([{"text": "a road", "kind": "object", "delta": float("nan"), "significant": True}], "not a finite"),
        ([{"text": "a road", "kind": "nonsense", "delta": -0.5, "significant": True}], "not valid"),
    ],
)
def test_study_explain_names_a_malformed_record_and_reads_the_rest(tmp_path, phrases, why):
    good = {"id": "ok", "caption": "a farmland, a road", "explain": {"phrases": [
        {"text": "a road", "start": 12, "end": 18, "kind": "object", "delta": -1.0, "significant": True}]}}  # fmt: skip
    bad = {"id": "bad", "caption": "a farmland", "explain": {"phrases": phrases}}
    _write_rows(tmp_path / "run", [good, bad])
    found = explained_phrases({"s": tmp_path / "run"})
    assert list(found.phrases["id"]) == ["ok"]
    (line,) = found.problems
    assert line.startswith(f"{tmp_path / 'run' / 'scores.jsonl'}:2: ") and why in line


def _unattributed(folder) -> None:
    """A score run whose one explained caption has one phrase: nothing to leave it out against."""
    only = {
        "text": "a farmland",
        "start": 0,
        "end": 10,
        "kind": "object",
        "delta": None,
        "error": "only phrase",
    }
    _write_rows(folder, [{"id": "a", "caption": "a farmland", "explain": {"phrases": [only]}}])


def test_study_explain_command_says_when_nothing_was_attributed(tmp_path, capsys):
    _unattributed(tmp_path / "run")
    assert main(["study", "explain", "--run", f"s={tmp_path / 'run'}", "--out", str(tmp_path / "study")]) == 0
    assert "nothing was attributed: 1 explained row(s)" in capsys.readouterr().out


def test_study_explain_command_reports_a_bad_line_and_exits_partial(tmp_path, capsys):
    rows = [
        {"id": "a", "caption": "x, y", "explain": {"phrases": [
            {"text": "y", "start": 3, "end": 4, "kind": "object", "delta": -2.0, "significant": True}]}},
        {"id": "b", "caption": "x", "explain": {"phrases": "x"}},
    ]  # fmt: skip
    _write_rows(tmp_path / "run", rows)
    argv = ["study", "explain", "--run", f"s={tmp_path / 'run'}", "--out", str(tmp_path / "study")]
    assert main(argv) == 3
    out, err = capsys.readouterr()
    assert "scores.jsonl:2: explain.phrases is str, not a list; row skipped" in err
    assert "Traceback" not in out + err and "| y " in out
    assert_restored(argv, tmp_path / "study", code=3)


def test_study_explain_refuses_a_run_without_explanations(tmp_path):
    from recon_score.errors import ReconScoreError

    (tmp_path / "scores.jsonl").write_text(json.dumps({"id": "a", "caption": "x"}) + "\n")
    with pytest.raises(ReconScoreError, match="no explained rows"):
        explained_phrases({"s": tmp_path})


def test_phrases_within_the_noise_are_grey_and_the_view_says_no_phrase_hurt():
    from eval.report.explain import LEGEND, NOISE_STYLE

    caption = "a farmland, a red barn"
    phrases = [_phrase(caption, "a farmland", 2.0, False), _phrase(caption, "a red barn", -3.0, None)]
    segs = [s for s in segments(caption, phrases) if s.phrase]
    assert all(s.noise and s.style == NOISE_STYLE and not s.significant for s in segs)
    view = explain_view({"caption": caption, "phrases": phrases, "worst_phrase": None,
                         "worst_note": "no phrase hurt"}, None)  # fmt: skip
    assert view.worst is None and view.verdict == "no phrase hurt"
    assert [cls for cls, _, _ in LEGEND] == ["sig helps", "sig hurts", "noise"]


def test_a_study_of_smoke_runs_says_so_beside_its_own_finding(tmp_path, capsys):
    """A study's note (explain's finding) and the smoke warning are two facts: the record's `meaningless` decides
    the warning, on stderr and in the report's banner, and the finding is kept beside it."""
    from recon_score.presets import SMOKE_NOTE

    _unattributed(tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text(json.dumps({"command": "score", "meaningless": True}))
    study = tmp_path / "study"
    assert main(["study", "explain", "--run", f"s={tmp_path / 'run'}", "--out", str(study)]) == 0
    out, err = capsys.readouterr()
    assert "nothing was attributed" in out and err.strip().splitlines()[-1] == f"{SMOKE_NOTE}."
    assert main(["report", str(study), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert SMOKE_NOTE in page and "nothing was attributed: 1 explained row(s)" in page
