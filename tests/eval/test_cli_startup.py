"""First contact: messages that stay on one line off a terminal, help and argument errors that come at once
(without importing torch), and help laid out the same whatever the terminal."""

import io
import os
import subprocess
import sys
from pathlib import Path

from eval.cli import SUBCOMMANDS, SUMMARIES, main
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
    console_, _ = summary_table("ReconScore", out, already_complete=True)
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
    for name, summary in SUMMARIES.items():
        assert f"{name}  " in r.stdout and summary in r.stdout


def test_every_listed_summary_is_its_commands_own(capsys):
    assert set(SUMMARIES) == set(SUBCOMMANDS)
    for name, summary in SUMMARIES.items():
        assert main([name, "--help"]) == 0
        first = " ".join(capsys.readouterr().out.split("\n\n")[1].split())
        assert first.split()[0] == summary.split()[0], (name, first)
