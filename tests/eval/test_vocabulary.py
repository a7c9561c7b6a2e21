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
    helps = {
        path: p.help for path, cmd in _commands() for p in cmd.params if "--images" in getattr(p, "opts", ())
    }
    assert len(helps) >= 10
    assert all(h.startswith("Folder that image paths are relative to (default: ") for h in helps.values()), (
        helps
    )


def _columns(path) -> set[str]:
    import csv
    import json

    import pandas as pd

    if path.suffix == ".jsonl":
        return {k for line in path.read_text().splitlines() if line.strip() for k in json.loads(line)}
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return set(next(csv.reader(f), []))
    return set(pd.read_parquet(path).columns)


def test_output_columns_have_one_name_per_concept(report_runs):
    """ReconScore's value is `recon_score` in every table (score rows, metric tables, describe, evaluate,
    correlate); a caption row's id is `id`, an image's `image_id`; the describe selection value `selection_score`."""
    files = []
    for kind, run in report_runs.items():
        found = (
            [run]
            if run.is_file()
            else [p for p in run.rglob("*") if p.suffix in (".jsonl", ".csv", ".parquet")]
        )
        files += [(kind, p) for p in found if "journal" not in p.parts]
    assert len(files) > 10
    cols = {(kind, p.name): _columns(p) for kind, p in files}
    old = {
        f: sorted(c for c in cs if c == "reconscore" or c.startswith("reconscore_")) for f, cs in cols.items()
    }
    assert not {f: c for f, c in old.items() if c}, old
    assert {"id", "recon_score"} <= cols[("score", "scores.jsonl")]
    assert {"id", "recon_score", "clipscore"} <= cols[("metrics", "scores.metrics.jsonl")]
    assert {"image_id", "recon_score", "selection_score"} <= cols[("describe", "captions.jsonl")]
    assert {"image_id", "selection_score", "selection_cosine"} <= cols[("describe", "candidates.jsonl")]
    assert {"image_id", "recon_score", "recon_score_cosine"} <= cols[("evaluate", "per_image.jsonl")]
    assert not any("image_id" in c for (kind, _), c in cols.items() if kind in ("score", "metrics"))


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--images-dir", "X", "--help"],
        ["describe", "--dataset-root", "X", "--help"],
        ["report", "--images", "link", "--help"],
    ],
)
def test_old_option_spellings_are_gone(argv, capsys):
    """0.1.0 has one spelling per option: an old one is a usage error naming it, not a hidden alias."""
    assert main(argv) == 2
    assert f"No such option '{argv[1]}'" in capsys.readouterr().err


def test_old_metric_name_is_unknown_with_a_suggestion(capsys):
    from eval.metrics import parse_metric_names
    from recon_score.registry import UnknownNameError

    with pytest.raises(
        UnknownNameError, match=r"unknown metric 'reconscore' \(did you mean 'recon_score'\?\)"
    ):
        parse_metric_names("bleu4,reconscore")


def test_python_jobs_have_no_old_field_names():
    from pathlib import Path

    from eval.add_metrics import AddMetricsJob
    from eval.correlate import CorrelateJob

    for job in (AddMetricsJob, CorrelateJob):
        with pytest.raises(TypeError, match="images"):
            job(Path("p"), "bleu4", images=Path("imgs"))
