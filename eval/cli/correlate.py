"""`reconscore correlate`: metric agreement with human judgments. Not implemented yet."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli._common import not_implemented


@click.command("correlate")
@click.option("--preferences", type=click.Path(path_type=Path), required=True, help="Human judgment file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["ranking", "flickr8k-expert", "flickr8k-crowdflower", "thumb", "csv"]),
    required=True,
    help="Layout of --preferences.",
)
@click.option(
    "--metrics",
    required=True,
    help="Comma-separated metric names (bleu1..4, meteor, rouge, cider, "
    "spice, clipscore, refclipscore, reconscore).",
)
@click.option("--images", type=click.Path(file_okay=False, path_type=Path), default=None, help="Image root.")
@click.option("--preset", default="paper", show_default=True, help="Preset for model-based metrics.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Run folder.")
def command(preferences, fmt, metrics, images, preset, out) -> int:
    """(not implemented yet) Kendall tau-b/tau-c of caption metrics against human judgments."""
    return not_implemented("correlate", "issue 5: caption metrics and agreement with humans")
