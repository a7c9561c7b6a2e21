"""The shell commands of docs/describer.md and docs/seeds.md run as written (smoke preset, offline)."""

import re
import shlex
from pathlib import Path

import pytest

from eval.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("doc", ["describer.md", "seeds.md"])
def test_doc_commands_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    commands = [
        c for block in re.findall(r"```bash\n(.*?)```", text, re.S) for c in block.strip().splitlines()
    ]
    assert commands
    for line in commands:
        argv = shlex.split(line)
        assert argv[0] == "reconscore" and "smoke" in argv
        assert main([*argv[1:], "--device", "cpu"]) == 0, line
