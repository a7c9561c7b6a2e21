"""First contact: messages that stay on one line off a terminal, help and argument errors that come at once
(without importing torch), and help laid out the same whatever the terminal."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.cli import SUBCOMMANDS, main
from eval.cli.console import console

REPO = Path(__file__).resolve().parents[2]


def _long_path(tmp_path: Path) -> Path:
    """A path of more than 300 characters (components stay under the 255-byte name limit)."""
    p = tmp_path
    while len(str(p)) <= 300:
        p = p / ("d" * 60)
    return p


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "40", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "eval", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_rich_output_off_a_terminal_never_wraps(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    buf = io.StringIO()
    path = _long_path(tmp_path)
    console(buf).print(f"[bold]{path}[/] is already complete: nothing to do.")
    assert buf.getvalue() == f"{path} is already complete: nothing to do.\n"


def test_an_error_with_a_300_character_path_is_one_line_in_a_pipe(tmp_path):
    missing = _long_path(tmp_path) / "captions.jsonl"
    r = _cli("score", "--preset", "smoke", "--captions", str(missing), "--out", str(tmp_path / "run"))
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stderr.splitlines() if str(missing) in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not found" in lines[0]


def test_summary_line_with_a_long_run_folder_is_one_line(tmp_path, capsys, monkeypatch):
    from eval.cli.options import summary_table

    monkeypatch.setenv("COLUMNS", "40")
    out = _long_path(tmp_path)
    summary_table("ReconScore", out, already_complete=True)
    assert f"{out} is already complete: nothing to do." in capsys.readouterr().out.splitlines()


def test_help_off_a_terminal_ignores_columns(monkeypatch, capsys):
    texts = []
    for columns in ("40", "300"):
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["score", "--help"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1]


def test_top_level_help_imports_no_subcommand_module():
    code = (
        "import sys; from eval.cli import main; main(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith('eval.cli.') or m in ('importlib.metadata', 'torch')),"
        " file=sys.stderr)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert r.returncode == 0
    assert r.stderr.strip().splitlines()[-1] == "[]"
    for sub in SUBCOMMANDS.values():
        assert f"{sub.name}  " in r.stdout and sub.help in r.stdout


def test_input_errors_answer_before_torch_is_imported(tmp_path):
    """A wrong path, field name, image folder, encoder family or missing local weights (offline, an empty
    weights folder) is refused before torch is imported."""
    (tmp_path / "weights").mkdir()
    (tmp_path / "wrong.jsonl").write_text('{"img": "a.png", "text": "a field"}\n')
    (tmp_path / "ok.jsonl").write_text('{"image": "a.png", "caption": "a field"}\n')
    score = ["score", "--preset", "smoke", "--out", str(tmp_path / "run")]
    ranking = str(REPO / "preference_data" / "examples" / "ranking_example.jsonl")
    correlate = ["correlate", "--format", "ranking", "--out", str(tmp_path / "corr")]
    cases = [
        ([*score, "--captions", str(tmp_path / "missing.jsonl")], "not found"),
        ([*score, "--captions", str(tmp_path / "wrong.jsonl")], "no line has the fields image, caption"),
        (
            [*score, "--captions", str(tmp_path / "ok.jsonl"), "--images", str(tmp_path / "no")],
            "is not a folder",
        ),
        ([*score, "--encoder", "dreamsm:ensemble"], "did you mean 'dreamsim'"),
        ([*correlate, "--preferences", str(tmp_path / "no.jsonl"), "--metrics", "bleu4"], "file not found"),
        ([*correlate, "--preferences", ranking, "--metrics", "bleu4,blue"], "did you mean 'bleu4'"),
        (["score", "--preset", "paper", "--out", str(tmp_path / "paper")], "not available here"),
    ]
    code = (
        "import sys; from eval.cli import main; "
        f"rcs = [main(a) for a in {[c for c, _ in cases]!r}]; "
        "heavy = ('torch', 'transformers', 'diffusers', 'open_clip', 'pandas'); "
        "print(rcs, [m for m in heavy if m in sys.modules])"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "HF_HUB_OFFLINE": "1",
            "RECONSCORE_WEIGHTS": str(tmp_path / "weights"),
            "RECONSCORE_DREAMSIM_DIR": "",
        },
        timeout=300,
    )
    assert r.stdout.strip() == "[1, 1, 1, 1, 1, 1, 1] []", r.stderr
    errors = [line for line in r.stderr.strip().splitlines() if not line.startswith((" ", "- ", "`"))]
    # the missing-models error lists each model on lines of its own
    assert len(errors) == len(cases), r.stderr
    for line, (_, needle) in zip(errors, cases):
        assert line.startswith("error: ") and needle in line


def test_a_fifo_is_not_a_regular_file_and_is_never_opened(tmp_path, capsys):
    fifo = tmp_path / "caps.jsonl"
    os.mkfifo(fifo)
    assert main(["score", "--preset", "smoke", "--captions", str(fifo), "--out", str(tmp_path / "r")]) == 1
    assert f"captions file {fifo} is a FIFO (named pipe), not a regular file" in capsys.readouterr().err


def test_typos_get_the_closest_name(capsys, tmp_path):
    assert main(["score", "--preset", "smok", "--out", str(tmp_path / "r")]) == 2
    assert "(did you mean 'smoke'?)" in capsys.readouterr().err
    from recon_score.encoders import check_encoder
    from recon_score.errors import UnknownEncoderError

    with pytest.raises(UnknownEncoderError) as err:  # a typo first, never "not found" / a download
        check_encoder("dreamsim:ensembel")
    assert "choose one of ensemble, " in str(err.value) and "(did you mean 'ensemble'?)" in str(err.value)


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["correlate", "--format", "rankng", "--out", "OUT"], "(did you mean 'ranking'?)"),
        (["retrieve", "--benchmark", "patercom", "--out", "OUT"], "(did you mean 'patterncom'?)"),
        (["retrieve-eval", "--method", "weicomm"], "(did you mean 'weicom'?)"),
        (["report", "RUN", "--thumbnails", "linc", "--out", "OUT"], "(did you mean 'link'?)"),
    ],
)
def test_every_choice_option_suggests_the_closest(argv, hint, capsys, tmp_path):
    """The one suggester (recon_score.errors.did_you_mean) behind every choice option, as behind --preset."""
    argv = [{"RUN": str(tmp_path), "OUT": str(tmp_path / "o")}.get(a, a) for a in argv]
    assert main(argv) == 2
    assert hint in capsys.readouterr().err


def test_no_choice_option_bypasses_the_suggester():
    """Every `Choice` in the CLI is eval.cli.options.Choice: a plain click.Choice would refuse without a hint."""
    plain = [p.name for p in (REPO / "eval" / "cli").glob("*.py") if "click.Choice(" in p.read_text()]
    assert plain == []


def test_an_encoder_typo_names_its_listing_once(tmp_path, capsys):
    argv = ["score", "--preset", "smoke", "--encoder", "smoke:open-clp", "--out", str(tmp_path / "r")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "(did you mean 'smoke:open-clip'?)" in err and err.count("reconscore models list") == 1
    assert ".." not in err


def test_vv_adds_debug_records(tmp_path):
    (tmp_path / "wrong.jsonl").write_text('{"img": "a.png"}\n')
    argv = ["score", "--preset", "smoke", "--captions", str(tmp_path / "wrong.jsonl"), "--out", str(tmp_path)]
    quiet, loud = _cli(*argv), _cli("-vv", *argv)
    assert "DEBUG" not in quiet.stderr and "INFO" not in quiet.stderr
    assert "INFO reconscore: reconscore " in loud.stderr and "DEBUG reconscore: settings" in loud.stderr


def test_constant_ranks_are_quoted_as_written():
    import numpy as np
    import pandas as pd

    from eval.kendall import correlate

    table = pd.DataFrame(
        {"image": ["a", "a"], "candidate": ["x", "y"], "judgment": [1.0, 1.0], "judgment_kind": ["rank"] * 2}
    )
    note = correlate(table, {"m": np.array([1.0, 2.0])}, n_boot=0).note[0]
    assert "every human judgment is the same (1)" in note


def test_ctrl_c_says_what_is_saved_and_the_rerun_counts_it(tmp_path, capsys, monkeypatch):
    from recon_score.scorer import ReconScorer

    real, calls = ReconScorer.score_seeds, []

    def interrupted_on_the_third(self, *a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    out = tmp_path / "run"
    argv = ["score", "--preset", "smoke", "--limit", "4", "--out", str(out), "--no-cache"]
    monkeypatch.setattr(ReconScorer, "score_seeds", interrupted_on_the_third)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert f"interrupted: 2 row(s) finished saved in {out / 'journal'}; run the same command again" in err
    monkeypatch.setattr(ReconScorer, "score_seeds", real)
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(
        line.split() == ["│", "rows", "resumed", "from", "the", "journal", "│", "2", "│"] for line in lines
    )
    assert any(line.split()[1:8] == ["rendered", "now", "/", "from", "cache", "│", "2"] for line in lines)
    rows = [__import__("json").loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len({tuple(r) for r in rows}) == 1  # one schema


def test_a_row_that_failed_before_rendering_has_every_key(tmp_path):
    from recon_score.inputs import InputRow
    from recon_score.run import _row_record

    row = InputRow(index=0, line=1, id="a", image="a.png", caption="x", error="caps.jsonl:1: image not found")
    rec, files = _row_record(row, None, note=None)
    assert files == {} and {k: rec[k] for k in ("width", "height", "truncated")} == dict.fromkeys(
        ("width", "height", "truncated")
    )
