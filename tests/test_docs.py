"""Every command shown in README.md and docs/*.md is checked: Python blocks run; shell blocks parse against the
real CLI (every option exists for that subcommand, every choice is valid); blocks fenced ```bash offline run."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from eval.cli import cli

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
ENTRY = ("reconscore", "./dev reconscore", "python -m eval")


def _blocks(page: Path, lang: str) -> list[tuple[str, str]]:
    langs = ("bash", "shell", "sh") if lang == "bash" else (lang,)
    return [(m[2].strip(), m[3]) for m in FENCE.finditer(page.read_text(encoding="utf-8")) if m[1] in langs]


def _command_lines(block: str) -> list[str]:
    """Shell lines of a block with continuations joined, comments and heredoc bodies dropped."""
    lines, heredoc, buf = [], None, ""
    for raw in block.splitlines():
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*'?(\w+)'?", raw)
        if m:
            heredoc = m[1]
        buf += raw.rstrip("\\").rstrip() + " " if raw.rstrip().endswith("\\") else raw
        if not raw.rstrip().endswith("\\"):
            lines.append(buf.strip())
            buf = ""
    return [line for line in lines if line and not line.startswith("#")]


def _reconscore_argv(line: str) -> list[str] | None:
    line = re.sub(r"^(\w+=\S+\s+)+", "", line)  # leading VAR=value assignments
    for entry in ENTRY:
        if line.startswith(entry + " "):
            return shlex.split(line[len(entry) :], comments=True)
    m = re.search(r"-m eval (.*)$", line)  # accelerate launch ... -m eval score ...
    return shlex.split(m[1], comments=True) if m else None


def _check_argv(argv: list[str]) -> None:
    """Walk the tokens like click would: subcommands, then options with their values and choices."""
    cmd: click.Command = cli
    ctx = click.Context(cli)
    args = list(argv)
    while args:
        tok = args.pop(0)
        if tok in ("-h", "--help", "--version"):
            return
        if tok.startswith("-") and tok != "-":
            name, eq, value = tok.partition("=")
            opts = {
                o: p for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)
            }
            if name.startswith("-v") and set(name[1:]) == {"v"}:
                continue
            assert name in opts, f"{cmd.name}: no option {name} (have {sorted(opts)})"
            param = opts[name]
            if param.is_flag or param.count:
                continue
            value = value if eq else args.pop(0)
            if isinstance(param.type, click.Choice):
                assert value in param.type.choices, (
                    f"{cmd.name} {name}: {value!r} not in {param.type.choices}"
                )
            continue
        if isinstance(cmd, click.Group):
            sub = cmd.get_command(ctx, tok)
            assert sub is not None, f"no subcommand {tok!r}"
            cmd = sub
            continue
        arg = next((p for p in cmd.params if isinstance(p, click.Argument)), None)
        assert arg is not None, f"{cmd.name}: unexpected argument {tok!r}"
        if isinstance(arg.type, click.Choice):
            assert tok in arg.type.choices, f"{cmd.name}: {tok!r} not in {arg.type.choices}"


def _all_command_lines() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for _info, block in _blocks(page, "bash"):
            out += [(page.relative_to(REPO).as_posix(), line) for line in _command_lines(block)]
    return out


@pytest.mark.parametrize(("page", "line"), _all_command_lines())
def test_shell_commands_parse(page, line):
    argv = _reconscore_argv(line)
    if argv is None:
        first = shlex.split(line)[0]
        assert (
            first in ("python", "python3", "pip", "accelerate", "cd", "./dev", "export", "bash")
            or "=" in first
        ), f"{page}: unknown command {line!r}"
        if first == "./dev":
            assert shlex.split(line)[1] in ("test", "lint", "python", "reconscore"), line
        return
    _check_argv(argv)


def _offline_blocks() -> list[tuple[str, str]]:
    return [
        (page.relative_to(REPO).as_posix(), block)
        for page in PAGES
        for info, block in _blocks(page, "bash")
        if info.split()[:1] == ["offline"]
    ]


@pytest.mark.parametrize(("page", "block"), _offline_blocks())
def test_offline_blocks_run(page, block, tmp_path):
    """`bash offline` blocks run as written in a scratch folder that sees the repo's bundled files."""
    for name in ("recon_score", "preference_data", "retrieval"):
        (tmp_path / name).symlink_to(REPO / name)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "reconscore").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m eval "$@"\n')
    (shim / "reconscore").chmod(0o755)
    for name in ("python", "python3"):  # a script, not a link: a linked venv python would lose its packages
        (shim / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (shim / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
    }
    script = block.replace("./dev reconscore", "reconscore").replace("./dev python", "python")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{page}:\n{script}\n{done.stderr[-3000:]}"
    # what the block says it writes is there: a run folder has its run.json, a file is not empty
    for out in re.findall(r"--out\s+(\S+)", script):
        target = tmp_path / out
        assert (target / "run.json").is_file() if target.suffix == "" else target.stat().st_size > 0, (
            page,
            out,
        )


# docs/python-api.md has its own test with assertions on the results (tests/test_docs_python_api.py)
@pytest.mark.parametrize(
    "page", [p for p in PAGES if _blocks(p, "python") and p.name != "python-api.md"], ids=lambda p: p.name
)
def test_python_blocks_run(page, monkeypatch):
    """Each block runs and checks its own result: a block without an `assert` would pass whatever it computed."""
    monkeypatch.chdir(REPO)
    namespace: dict = {}
    for _, code in _blocks(page, "python"):
        tree = ast.parse(code)
        assert any(isinstance(n, ast.Assert) for n in ast.walk(tree)), f"{page.name}: a block asserts nothing"
        exec(compile(tree, str(page.relative_to(REPO)), "exec"), namespace)


def test_every_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"README does not link docs/{page.name}"


def test_no_example_path_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/" not in text, page.name
