"""`reconscore describe`: best-of-N captioning with a multimodal LLM (RemoteDescriber). Not implemented yet."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli._common import not_implemented


@click.command("describe")
@click.option(
    "--images",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder or list of images (default: the bundled sample).",
)
@click.option("--preset", default="paper", show_default=True, help="Captioner + ReconScore preset.")
@click.option("--n", type=click.IntRange(min=1), default=10, show_default=True, help="Candidates per image.")
@click.option(
    "--select-by", default="reconscore", show_default=True, help="Metric that picks the best candidate."
)
@click.option(
    "--backend",
    type=click.Choice(["transformers", "vllm", "openai"]),
    default="transformers",
    show_default=True,
    help="Captioner backend.",
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Run folder.")
def command(images, preset, n, select_by, backend, out) -> int:
    """(not implemented yet) Sample N captions per image with a multimodal LLM and keep the best."""
    return not_implemented("describe", "issue 4: Describer")
