"""Every command shown in README.md and docs/*.md is checked: Python blocks run; shell blocks parse against the
real CLI (every option exists for that subcommand, every choice is valid); blocks fenced ```bash offline run."""

from __future__ import annotations

import ast
import itertools
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
    done = _run_offline(block, tmp_path)
    assert done.returncode == 0, f"{page}:\n{block}\n{done.stderr[-3000:]}"
    assert not _untracked_in_a_clone(tmp_path), f"{page}: run in a clone, this leaves files git would show"
    # what the block says it writes is there: a run folder has its run.json, a file is not empty
    for out in re.findall(r"--out\s+(\S+)", block):
        target = tmp_path / out
        assert (target / "run.json").is_file() if target.suffix == "" else target.stat().st_size > 0, (
            page,
            out,
        )


def _untracked_in_a_clone(folder: Path) -> list[str]:
    """What a block wrote into its working folder that the repository's .gitignore does not cover (the folder
    stands for the root of a clone; the links and bin/ are the test's own)."""
    made = [p.name for p in folder.iterdir() if not p.is_symlink() and p.name != "bin"]
    if not made:
        return []
    shown = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", *(f"{name}/x" for name in made)],
        capture_output=True,
        text=True,
    ).stdout.split()
    return [name for name in made if f"{name}/x" not in shown]


def _printed_json_examples() -> list[tuple[str, str, str]]:
    """(page, block, json): a `bash offline` block whose last command ends with --json, and the ```json block
    right after it that shows what it prints."""
    pairs = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fences = list(FENCE.finditer(text))
        for first, second in itertools.pairwise(fences):
            lines = _command_lines(first[3])
            if (
                first[2].split()[:1] == ["offline"]
                and lines
                and lines[-1].endswith("--json")
                and second[1] == "json"
            ):
                pairs.append((page.relative_to(REPO).as_posix(), first[3], second[3]))
    return pairs


@pytest.mark.parametrize(("page", "block", "shown"), _printed_json_examples())
def test_documented_json_is_what_the_command_prints(page, block, shown, tmp_path):
    import json

    done = _run_offline(block, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed, documented = json.loads(done.stdout.strip().splitlines()[-1]), json.loads(shown)
    assert list(printed) == list(documented), page
    assert _close(printed, documented), (page, printed)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


def _run_offline(block: str, tmp_path: Path) -> subprocess.CompletedProcess:
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
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
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


def test_correlate_metric_table_is_the_registry():
    """docs/correlate.md's metric table names exactly the metrics `--metrics` accepts."""
    from eval.metrics import list_metrics

    text = (REPO / "docs" / "correlate.md").read_text(encoding="utf-8")
    table = text.split("## Metrics", 1)[1].split("\n\n", 2)[1]
    names = set()
    for row in table.splitlines()[2:]:
        cell = row.split("|")[1]
        found = re.findall(r"`(\w+)`", cell)
        if len(found) == 2 and "…" in cell:  # `bleu1` … `bleu4`
            stem = found[0].rstrip("0123456789")
            found = [f"{stem}{k}" for k in range(int(found[0][len(stem) :]), int(found[1][len(stem) :]) + 1)]
        names.update(found)
    assert names == {m.name for m in list_metrics()}


def test_python_api_counts_its_ways():
    """The opening sentence of docs/python-api.md counts the sections that follow it."""
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    text = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    intro = text.split("\n\n", 2)[1]
    counts = [words[w.lower()] for w in re.findall(r"\b(\w+) ways\b|\bAll (\w+)\b", intro) for w in w if w]
    assert counts and set(counts) == {len(re.findall(r"^## ", text, re.M))}, counts


def test_correlate_format_table_is_the_registry():
    """docs/correlate.md's format table has one row per `--format` entry, with that entry's headline variant."""
    from eval.preferences import FORMATS

    text = (REPO / "docs" / "correlate.md").read_text(encoding="utf-8")
    table = (
        text.split("## Human-judgment sets (`--format`)", 1)[1].split("| format |", 1)[1].split("\n\n", 1)[0]
    )
    rows = {}
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        rows[cells[1].strip().strip("`")] = cells[-2].strip().strip("*")
    assert rows == {f.name: f"τ-{f.headline}" for f in FORMATS.values()}


def test_models_page_names_every_synthetic_model():
    """docs/models.md's table of synthetic models spells each registry entry as `models list` does."""
    from recon_score.synthetic import MODELS, spelling

    text = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    assert [m.name for m in MODELS.values() if f"`{spelling(m)}`" not in text] == []


def test_retrieval_method_table_is_the_registry():
    """docs/retrieval.md's method table has one row per registered method, and its `needs` column names each
    option that gives the method one of its inputs."""
    from retrieval.methods import METHODS, Input

    text = (REPO / "docs" / "retrieval.md").read_text(encoding="utf-8")
    table = text.split("| method | what it does | hyperparameters (default) | needs |", 1)[1].split(
        "\n\n", 1
    )[0]
    rows = {row.split("|")[1].strip().strip("`"): row.split("|")[-2] for row in table.splitlines()[2:]}
    assert set(rows) == set(METHODS)
    for name, method in METHODS.items():
        for given in (
            i.given_as for i in method.inputs if i.given_as.startswith("--") and i is not Input.ENCODER_TOWERS
        ):
            for option in re.split(r"/(?=--)", given.format(name=name).replace("PATH", "")):
                assert option in rows[name], (name, option)


def test_shell_blocks_run_python_through_the_venv():
    """A bare `python ...` (a heredoc script, a benchmark) would run whatever python is first on the reader's PATH,
    without the repo's packages: shell blocks say `./dev python` (the venv's)."""
    bare = [
        (page.name, line)
        for page in PAGES
        for _, block in _blocks(page, "bash")
        for line in _command_lines(block)
        if re.match(r"(\w+=\S+\s+)*python3?\s", line)
    ]
    assert bare == []
