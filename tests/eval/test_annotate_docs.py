"""docs/annotate.md's walk-through, run in order: its `bash walkthrough` blocks, from a describe run to a
correlation table. The describe run is the shared one of the report tests (built with the very argv the docs
show); the annotators' exports are written as the page writes them (the browser test drives the real page)."""

from __future__ import annotations

import os
from pathlib import Path

from eval.cli import main
from recon_score.run_outputs import CORRELATIONS, read_frame
from tests.eval.annotate_helpers import in_order, page_data, write_export
from tests.smoke_cli import smoke
from tests.test_docs import FENCE, REPO, _command_lines, _reconscore_argv

DOC = REPO / "docs" / "annotate.md"


def walkthrough() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    blocks = [m[3] for m in FENCE.finditer(text) if m[1] == "bash" and m[2].split()[:1] == ["walkthrough"]]
    return [_reconscore_argv(line) for block in blocks for line in _command_lines(block)]


def _exports(study: Path, names: list[str]) -> None:
    """Each annotator's export where the docs expect it: annotator-1 ranks every image in page order,
    annotator-2 (and the consensus pass) in reverse, so every image is contested."""
    (Path("exports")).mkdir(exist_ok=True)
    for name in names:
        data = page_data(study / "pages" / f"{name}.html")
        order = (lambda it: range(len(it["captions"]))) if name == "annotator-1" else None
        ranks = in_order(data, order or (lambda it: reversed(range(len(it["captions"])))))
        write_export(Path("exports") / f"{name}.jsonl", data, ranks)


def test_the_walkthrough_runs_from_a_describe_run_to_a_correlation_table(report_runs, tmp_path, monkeypatch):
    commands = walkthrough()
    assert [c[:2] for c in commands][:3] == [
        ["describe", "--preset"],
        ["annotate", "build"],
        ["annotate", "collect"],
    ]
    assert commands[-2][0] == "correlate" and commands[-1][0] == "report"
    describe = commands[0]
    out = describe[describe.index("--out") + 1]
    # the shared describe run was made with exactly the docs' command (its folder aside)
    assert describe == smoke("describe", out, "--n", "2", "--limit", "2")
    monkeypatch.chdir(tmp_path)
    for name in ("recon_score", "preference_data"):
        os.symlink(REPO / name, name)
    Path(out).parent.mkdir(parents=True)
    os.symlink(report_runs["describe"], out)
    for argv in commands[1:]:
        if argv[:2] == ["annotate", "collect"]:
            names = [Path(a).stem for a in argv if a.startswith("exports/")]
            _exports(Path(argv[2]), names)
        assert main(argv) == 0, argv
    table = read_frame(tmp_path / "runs" / "my-analysts", CORRELATIONS)
    assert len(table) == 2 and table["metric"].notna().all(), table
    assert (tmp_path / "report.html").stat().st_size > 0
