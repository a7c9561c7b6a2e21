"""`reconscore presets`: list the named configurations, or print one exactly as it runs."""

from __future__ import annotations

import click


@click.group("presets")
def command() -> None:
    """List presets or show every value of one."""


@command.command("list")
def list_presets() -> int:
    """One line per preset."""
    from describer.presets import DESCRIBER_PRESETS
    from recon_score.presets import PRESETS

    click.echo("ReconScore presets (reconscore score --preset NAME):")
    for name, p in PRESETS.items():
        click.echo(f"  {name:12s} {p.t2i_model} + {p.encoder}, {p.steps} steps. {p.description}")
    click.echo("\nDescriber presets (reconscore describe --preset NAME):")
    for name, p in DESCRIBER_PRESETS.items():
        click.echo(
            f"  {name:12s} {p.captioner} ({p.backend}), N={p.n}, select by {p.select_by} with ReconScore "
            f"preset '{p.recon_preset}'. {p.description}"
        )
    return 0


@command.command("show")
@click.argument("name")
@click.option(
    "--describer", is_flag=True, help="Show the describer preset NAME (with its ReconScore preset)."
)
def show(name: str, describer: bool) -> int:
    """Print every value of preset NAME as JSON (what run.json records)."""
    import json

    from recon_score.presets import get_preset

    if describer:
        from describer.presets import get_describer_preset

        d = get_describer_preset(name)
        click.echo(
            json.dumps(
                {**d.to_dict(), "recon": get_preset(d.recon_preset).to_dict()}, indent=2, sort_keys=True
            )
        )
        return 0
    click.echo(get_preset(name).to_json())
    return 0
