"""Pieces shared by subcommands."""

from __future__ import annotations

import click


def not_implemented(name: str, issue: str) -> int:
    """Subcommands whose issue has not landed say so and exit 2 instead of pretending."""
    click.echo(f"reconscore {name}: not implemented yet ({issue}).", err=True)
    return 2
