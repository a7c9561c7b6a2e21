"""One vocabulary: an option name means one thing in every subcommand (same parameter, same kind of value)."""

from __future__ import annotations

from collections import defaultdict

import click
import pytest

from eval.cli import SUBCOMMANDS, cli, main
from eval.cli.options import VOCABULARY


def _commands():
    ctx = click.Context(cli)
    stack = [(name, cli.get_command(ctx, name)) for name in SUBCOMMANDS]
    while stack:
        path, cmd = stack.pop()
        if isinstance(cmd, click.Group):
            stack += [(f"{path} {n}", cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        else:
            yield path, cmd


def _meaning(param: click.Option) -> tuple[str, str]:
    """The parameter an option fills (plural and `_dir` forms folded) and its kind of value:
    a flag, a number, or text/paths (a file, a folder and NAME=path pairs all name places)."""
    name = param.name.removesuffix("_dir").removesuffix("s")
    t = param.type
    kind = (
        "flag" if param.is_flag else "number" if isinstance(t, click.types._NumberParamTypeBase) else "text"
    )
    return name, kind


def test_an_option_name_has_one_meaning():
    uses = defaultdict(set)
    for path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                for opt in p.opts:
                    if opt.startswith("--"):
                        uses[opt].add((*_meaning(p), path))
    clashes = {}
    for opt, seen in uses.items():
        meanings = {(name, kind) for name, kind, _ in seen}
        if len(meanings) > 1:
            clashes[opt] = sorted(seen)
    assert not clashes, clashes


def test_vocabulary_names_exist_with_their_meaning():
    everywhere = defaultdict(set)
    for _path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option):
                for opt in p.opts:
                    everywhere[opt].add(p.name)
    for opt in VOCABULARY:
        assert opt in everywhere, opt
    assert everywhere["--images"] == {"images_root"} and everywhere["--root"] == {"dataset_root"}


@pytest.mark.parametrize(
    ("argv", "old", "new"),
    [
        (["evaluate", "--images-dir", "X", "--help"], "--images-dir", "--images"),
        (["describe", "--dataset-root", "X", "--help"], "--dataset-root", "--root"),
        (["report", "--images", "link", "--help"], "--images", "--thumbnails"),
    ],
)
def test_old_spellings_still_parse_and_warn(argv, old, new, capsys):
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"{old} is now {new}" in err
