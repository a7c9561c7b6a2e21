"""`reconscore report`: a static HTML page of runs. Not implemented yet."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli._common import not_implemented


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="HTML file to write."
)
def command(run_dirs, out) -> int:
    """(not implemented yet) Render score/describe/correlate runs as one self-contained HTML page."""
    return not_implemented("report", "issue 7: studies and HTML report")
