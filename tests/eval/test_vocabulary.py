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


def test_old_metric_name_still_resolves_and_warns_once():
    import warnings

    from eval.metrics import registry
    from recon_score import errors
    from recon_score.errors import ReconScoreWarning

    errors._renamed_warned.discard(("metric", "reconscore"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert registry.parse_metric_names("bleu4,reconscore,recon_score") == ["bleu4", "recon_score"]
        assert registry.get_metric_info("reconscore").name == "recon_score"
    msgs = [str(w.message) for w in seen if issubclass(w.category, ReconScoreWarning)]
    assert msgs == ["metric 'reconscore' is now 'recon_score'; the old name will be removed"]


def test_old_metric_name_on_the_command_line(tmp_path):
    """`--metrics reconscore` means recon_score, with one plain `warning:` line (not Python's file:line); the
    run then stops on the paper preset's missing model, which is not the point here."""
    import subprocess
    import sys

    from tests.eval.report_runs import REPO

    example = REPO / "preference_data" / "examples" / "ranking_example.jsonl"
    argv = [
        "correlate",
        "--preferences",
        str(example),
        "--format",
        "ranking",
        "--metrics",
        "bleu4,reconscore",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "eval", *argv, "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines.count("warning: metric 'reconscore' is now 'recon_score'; the old name will be removed") == 1
    assert "ReconScoreWarning" not in r.stderr  # the plain form, not Python's file:line: Category: ...


def test_old_select_by_name(tmp_path):
    import json

    out = tmp_path / "d"
    argv = ["describe", "--preset", "smoke", "--n", "2", "--limit", "1", "--select-by", "reconscore"]
    assert main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["selection"]["metric"] == "recon_score"
    cands = [json.loads(x) for x in (out / "candidates.jsonl").read_text().splitlines()]
    assert all(c["selection_score"] is not None and "reconscore" not in c for c in cands)


def test_python_jobs_use_the_cli_names_and_keep_the_old_ones():
    """Job fields use the CLI's names (`inputs`: what describe captions; `images_root`: the --images folder);
    the old field `images` still works, with a warning, meaning what it meant."""
    import warnings
    from pathlib import Path

    from eval.add_metrics import AddMetricsJob
    from eval.correlate import CorrelateJob
    from recon_score import errors
    from recon_score.errors import ReconScoreWarning

    errors._renamed_warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c = CorrelateJob(Path("p.jsonl"), "ranking", "bleu4", Path("o"), images=Path("imgs"))
        a = AddMetricsJob(Path("run"), "bleu4", images=Path("imgs"))
    assert c.images_root == Path("imgs") and a.images_root == Path("imgs")
    msgs = sorted(str(w.message) for w in seen if issubclass(w.category, ReconScoreWarning))
    assert msgs == [
        "AddMetricsJob field 'images' is now 'images_root'; the old name will be removed",
        "CorrelateJob field 'images' is now 'images_root'; the old name will be removed",
    ]
