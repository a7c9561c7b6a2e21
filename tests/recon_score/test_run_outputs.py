"""The readers of each kind's outputs (recon_score.run_outputs), the one way other commands read a run: a missing
file is named, a garbled line is named file:line, a FIFO or a folder where the file belongs is refused at once
(never a hang), and what a reader returns is what the writer wrote."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from recon_score import run_outputs as outputs
from recon_score.errors import InputError, ReconScoreError
from recon_score.textfiles import TextFileError
from tests.timeouts import no_hang

# the outputs the readers read, by file name
JSONL_OUTPUTS = (outputs.SCORES, outputs.CAPTIONS, outputs.CANDIDATES, outputs.PER_IMAGE, outputs.GENERATED)
FRAME_OUTPUTS = (
    outputs.CORRELATIONS,
    outputs.SUMMARY_CSV,
    outputs.STUDY_TABLE_CSV,
    outputs.PER_QUERY,
    outputs.TOPK,
)
ALL_OUTPUTS = sorted({*JSONL_OUTPUTS, *FRAME_OUTPUTS, outputs.PER_ITEM})


def _read(name: str, folder):
    return outputs.read_rows(folder, name) if name.endswith(".jsonl") else outputs.read_frame(folder, name)


def test_kind_outputs_are_the_declared_names():
    assert outputs.KIND_OUTPUTS["retrieve"][:2] == (outputs.PER_QUERY_CSV, outputs.PER_QUERY)
    assert outputs.KIND_OUTPUTS["evaluate"] == (outputs.PER_IMAGE, "summary.csv", "summary.md")
    assert outputs.KIND_OUTPUTS["study"] == outputs.table_files(outputs.STUDY_TABLE)
    assert outputs.metric_table_file("recall@10") == "table_recall_at_10.csv"
    assert outputs.metric_table_file("map@5", "subgroup") == "table_map_at_5_by_subgroup.csv"
    assert outputs.method_files("basic") == ("methods/basic.parquet", "methods/basic.topk.npz")


@pytest.mark.parametrize("name", ALL_OUTPUTS)
def test_a_missing_output_is_named(tmp_path, name):
    with pytest.raises(ReconScoreError, match=re.escape(f"{name} not found")):
        _read(name, tmp_path)


@pytest.mark.parametrize("name", ALL_OUTPUTS)
def test_a_fifo_where_an_output_belongs_is_refused_not_waited_on(tmp_path, name):
    os.mkfifo(tmp_path / name)
    with no_hang(), pytest.raises(TextFileError, match="FIFO"):
        _read(name, tmp_path)


@pytest.mark.parametrize("name", ALL_OUTPUTS)
def test_a_folder_where_an_output_belongs_is_refused(tmp_path, name):
    (tmp_path / name).mkdir()
    with pytest.raises(TextFileError, match="is a folder, not a regular file"):
        _read(name, tmp_path)


@pytest.mark.parametrize("name", JSONL_OUTPUTS)
def test_a_garbled_jsonl_line_is_named_file_and_line(tmp_path, name):
    path = tmp_path / name
    path.write_text('{"id": "a", "recon_score": 80.0}\n\n{"id": "b", "recon_sc\n')
    with pytest.raises(TextFileError, match=re.escape(f"{path.name}:3: invalid JSON")):
        _read(name, tmp_path)
    path.write_text('{"id": "a"}\n[1, 2]\n')
    with pytest.raises(TextFileError, match=re.escape(f"{path.name}:2: expected a JSON object")):
        _read(name, tmp_path)


def test_a_score_that_is_not_a_number_is_named_file_and_line(tmp_path):
    (tmp_path / outputs.SCORES).write_text(
        '{"id": "a", "recon_score": 1}\n{"id": "b", "recon_score": "80"}\n'
    )
    with pytest.raises(TextFileError, match=r"scores\.jsonl:2: `recon_score` is '80', not a number"):
        outputs.read_rows(tmp_path, outputs.SCORES)


def test_jsonl_rows_come_back_as_written_from_a_folder_or_the_file(tmp_path):
    rows = [{"id": "a", "recon_score": 81.5, "caption": "two planes"}, {"id": "b", "error": "x"}]
    (tmp_path / outputs.SCORES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert outputs.read_rows(tmp_path, outputs.SCORES) == rows
    assert outputs.read_rows(tmp_path / outputs.SCORES, outputs.SCORES) == rows
    assert outputs.read_rows(tmp_path, outputs.CAPTIONS, missing_ok=True) == []
    (tmp_path / outputs.GENERATED).write_text(json.dumps(rows[0]) + "\n")
    assert outputs.read_rows(tmp_path / outputs.GENERATED, outputs.GENERATED) == [rows[0]]


def test_csv_outputs_come_back_as_written_and_garbled_ones_are_named(tmp_path):
    table = pd.DataFrame({"metric": ["bleu4", "cider"], "tau_b": [30.5, 41.25], "n": [10, 9]})
    (tmp_path / outputs.CORRELATIONS).write_text(table.to_csv(index=False))
    pd.testing.assert_frame_equal(outputs.read_frame(tmp_path, outputs.CORRELATIONS), table)
    assert outputs.table_rows(tmp_path, outputs.CORRELATIONS) == [
        ["metric", "tau_b", "n"],
        ["bleu4", "30.5", "10"],
        ["cider", "41.25", "9"],
    ]
    (tmp_path / outputs.SUMMARY_CSV).write_text('label,bleu4\nmine,"12.5\n')  # a quote never closed
    with pytest.raises(TextFileError, match=r"summary\.csv: not a CSV table reconscore wrote"):
        outputs.read_frame(tmp_path, outputs.SUMMARY_CSV, index_col=0)
    with pytest.raises(TextFileError, match=r"summary\.csv:2: malformed CSV"):
        outputs.table_rows(tmp_path, outputs.SUMMARY_CSV)


def test_parquet_outputs_come_back_as_written_and_garbled_ones_are_named(tmp_path):
    frame = pd.DataFrame({"method": ["basic", "basic"], "query_index": [0, 1], "ap": [0.5, 1.0]})
    frame.to_parquet(tmp_path / outputs.PER_QUERY, index=False)
    pd.testing.assert_frame_equal(outputs.read_frame(tmp_path, outputs.PER_QUERY), frame)
    (tmp_path / outputs.TOPK).write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(TextFileError, match=r"topk\.parquet: not a Parquet file reconscore wrote"):
        outputs.read_frame(tmp_path, outputs.TOPK)


def test_candidate_lines_keep_going_past_a_bad_line_and_name_it(tmp_path):
    """`pairs` reads candidates line by line: a bad line is reported with file:line, the good ones are kept."""
    (tmp_path / outputs.CANDIDATES).write_text('{"image": "a.png"}\n\n{"image": \n[3]\n')
    table = outputs.candidates_table(tmp_path)
    assert table == tmp_path / outputs.CANDIDATES
    got = list(outputs.candidate_lines(table))
    assert [w for w, _, _ in got] == [f"{table}:1", f"{table}:3", f"{table}:4"]
    assert got[0][1:] == ({"image": "a.png"}, None) and got[2][1:] == ([3], None)
    assert got[1][1] is None and got[1][2].startswith("invalid JSON")
    (tmp_path / "sub").mkdir()
    with pytest.raises(
        InputError, match=r"no candidates\.jsonl \(expected a `reconscore describe` run folder\)"
    ):
        outputs.candidates_table(tmp_path / "sub")
    os.mkfifo(tmp_path / "pipe.jsonl")
    with no_hang(), pytest.raises(TextFileError, match="FIFO"):
        list(outputs.candidate_lines(outputs.candidates_table(tmp_path / "pipe.jsonl")))


def test_score_prints_references_vs_distractors_from_the_run_not_from_disk(tmp_path, sample_dir, capsys):
    """The CLI prints what the run returns (ScoreSummary.kinds, the record's summary), on the first run and on a
    rerun that finds the run complete."""
    from eval.cli import main
    from recon_score.run_engine import load_record
    from tests.smoke_cli import smoke

    rows = [json.loads(x) for x in (sample_dir / "captions.jsonl").read_text().splitlines()]
    pick = [
        next(r for r in rows if r["kind"] == k and r["image"] == rows[0]["image"])
        for k in ("reference", "distractor")
    ]
    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(json.dumps(r) + "\n" for r in pick))
    out = tmp_path / "run"
    argv = smoke("score", out, "--captions", str(caps), "--images", str(sample_dir))
    assert main(argv) == 0
    kinds = load_record(out)["summary"]["references_vs_distractors"]
    line = f"{kinds['reference_mean']:.2f} vs {kinds['distractor_mean']:.2f}"
    assert kinds["references"] == kinds["distractors"] == kinds["images"] == 1
    first = capsys.readouterr().out
    assert "references vs distractors (mean)" in first and line in first
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "already complete" in again and line in again
