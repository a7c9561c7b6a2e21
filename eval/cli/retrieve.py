"""`reconscore retrieve`: composed image retrieval benchmarks. Not implemented yet."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli._common import not_implemented


@click.command("retrieve")
@click.option(
    "--benchmark", required=True, help="patterncom | xview2-cir | icir | edir | circo | cirr | fashioniq."
)
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), required=True, help="Dataset root.")
@click.option("--encoder", required=True, help="Encoder spec (`reconscore models list`).")
@click.option(
    "--methods", default="text,image,sum,product,weicom", show_default=True, help="Comma-separated."
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Run folder.")
def command(benchmark, root, encoder, methods, out) -> int:
    """(not implemented yet) Run composed image retrieval methods on a benchmark and report mAP/recall."""
    return not_implemented("retrieve", "issue 6: composed image retrieval")
