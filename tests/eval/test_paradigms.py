"""Table 6 (the ReconScore paper): wins, preference share and mean ReconScore per model paradigm, on a hand-made example."""

import json

import pandas as pd
import pytest

from eval.cli import main
from tests.smoke_cli import assert_restored

RANKINGS = [
    {
        "image": "a.png",
        "rater": "r1",
        "candidates": [
            {"caption": "a one", "rank": 1, "model": "Qwen"},
            {"caption": "a two", "rank": 2, "model": "GeoChat"},
            {"caption": "a three", "rank": 3, "model": "Falcon"},
        ],
    },
    {
        "image": "a.png",
        "rater": "r2",
        "candidates": [
            {"caption": "a one", "rank": 2, "model": "Qwen"},
            {"caption": "a two", "rank": 1, "model": "GeoChat"},
            {"caption": "a three", "rank": 3, "model": "Falcon"},
        ],
    },
    {
        "image": "b.png",
        "candidates": [
            {"caption": "b one", "rank": 1, "model": "Qwen"},
            {"caption": "b two", "rank": 1, "model": "Falcon"},  # a tie at the top: half a win each
            {"caption": "b three", "rank": 3, "model": "GeoChat"},
        ],
    },
    {
        "image": "c.png",
        "candidates": [
            {"caption": "c one", "rank": 1, "model": "RemoteReasoner"},
            {"caption": "c two", "rank": 2, "model": "GeoChat"},
        ],
    },
]
SCORES = {
    "a one": 80,
    "a two": 70,
    "a three": 60,
    "b one": 90,
    "b two": 50,
    "b three": 65,
    "c one": 85,
    "c two": 75,
}
MAP = "Qwen=Zero-Shot,RemoteReasoner=Zero-Shot,GeoChat=Fine-Tuned,Falcon=Fine-Tuned"


@pytest.fixture
def inputs(tmp_path):
    ranking = tmp_path / "ranking.jsonl"
    ranking.write_text("".join(json.dumps(r) + "\n" for r in RANKINGS))
    run = tmp_path / "scores"
    run.mkdir()
    rows = [{"image": f"{cap[0]}.png", "caption": cap, "recon_score": v} for cap, v in SCORES.items()]
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ranking, run


def test_paradigms_table(inputs, tmp_path):
    ranking, run = inputs
    out = tmp_path / "t6"
    args = ["study", "paradigms", "--ranking", str(ranking), "--paradigms", MAP, "--scores", str(run)]
    assert main([*args, "--out", str(out)]) == 0
    assert_restored([*args, "--out", str(out)], out)
    df = pd.read_csv(out / "table.csv", index_col=0)
    assert list(df.index) == ["Zero-Shot", "Fine-Tuned"]  # order of first appearance
    assert list(df.columns) == ["ReconScore", "Wins", "Proportion (%)"]
    # by hand: 4 rankings; Zero-Shot wins r1@a, half of b, c = 2.5; Fine-Tuned r2@a + half of b = 1.5
    assert df.loc["Zero-Shot", "Wins"] == 2.5 and df.loc["Fine-Tuned", "Wins"] == 1.5
    assert df.loc["Zero-Shot", "Proportion (%)"] == pytest.approx(62.5)
    assert df.loc["Fine-Tuned", "Proportion (%)"] == pytest.approx(37.5)
    # distinct candidates ("a one" is ranked twice, counted once): (80+90+85)/3 and (70+60+50+65+75)/5
    assert df.loc["Zero-Shot", "ReconScore"] == pytest.approx(85.0)
    assert df.loc["Fine-Tuned", "ReconScore"] == pytest.approx(64.0)
    assert "| Model Paradigm | ReconScore | Wins | Proportion (%) |" in (out / "table.md").read_text()
    assert json.loads((out / "run.json").read_text())["details"]["rankings"] == 4


def test_paper_proportions():
    """Table 6: 55 and 291 wins of 346 are 15.90 % and 84.10 %."""
    from eval.studies.paradigms import paradigms_table

    rows = []
    for i in range(346):
        win = "FT" if i < 55 else "ZS"
        lose = "ZS" if win == "FT" else "FT"
        for model, rank in ((win, 1), (lose, 2)):
            rows.append(
                {
                    "image": f"i{i}",
                    "rater": None,
                    "candidate": f"{model}{i}",
                    "judgment": rank,
                    "model": model,
                }
            )
    rows = pd.DataFrame(rows).assign(source="x")
    df, _ = paradigms_table(rows, {"FT": "Fine-Tuned", "ZS": "Zero-Shot"}, {})
    assert round(df.loc["Fine-Tuned", "Proportion (%)"], 2) == 15.90
    assert round(df.loc["Zero-Shot", "Proportion (%)"], 2) == 84.10
    assert df.loc["Zero-Shot", "Wins"] == 291


def test_unmapped_model_is_named(inputs, tmp_path, capsys):
    ranking, run = inputs
    args = [
        "study",
        "paradigms",
        "--ranking",
        str(ranking),
        "--paradigms",
        "Qwen=Zero-Shot",
        "--scores",
        str(run),
    ]
    assert main([*args, "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "ranking.jsonl:1" in err and "'GeoChat'" in err and "no paradigm" in err
