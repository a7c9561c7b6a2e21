"""docs/retrieval.md's examples run as written: its Python blocks execute, its shell blocks run through the CLI."""

import re
import shlex
from pathlib import Path

from eval.cli import main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "retrieval.md").read_text(encoding="utf-8")


def test_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "docs/retrieval.md", "exec"), {})


def test_shell_blocks_run(capsys):
    blocks = re.findall(r"```bash\n(.*?)```", DOC, re.S)
    assert blocks
    for block in blocks:
        for line in block.strip().splitlines():
            argv = shlex.split(line)
            assert argv[0] == "reconscore"
            assert main(argv[1:]) == 0, line
    assert "RemoteCLIP" in capsys.readouterr().out
