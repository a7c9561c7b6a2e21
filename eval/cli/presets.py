"""`reconscore presets`: list the named configurations, or print one exactly as it runs."""

from __future__ import annotations

import click


@click.group("presets")
def command() -> None:
    """List presets or show every value of one."""


@command.command("list")
def list_presets() -> int:
    """One line per preset."""
    from recon_score.presets import PRESETS

    for name, p in PRESETS.items():
        click.echo(f"{name:12s} {p.t2i_model} + {p.encoder}, {p.steps} steps. {p.description}")
    return 0


@command.command("show")
@click.argument("name")
def show(name: str) -> int:
    """Print every value of preset NAME as JSON (what run.json records)."""
    from recon_score.presets import get_preset

    click.echo(get_preset(name).to_json())
    return 0
