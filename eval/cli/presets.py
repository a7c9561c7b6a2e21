"""`reconscore presets`: list the named configurations, or print one exactly as it runs."""

from __future__ import annotations

import click

from eval.cli import SuggestingGroup


@click.group("presets", cls=SuggestingGroup)
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
    "--describer", is_flag=True, help="Show the describer preset NAME (with its ReconScore preset), as JSON."
)
@click.option("--json", "as_json", is_flag=True, help="JSON exactly as run.json records it, without sources.")
def show(name: str, describer: bool, as_json: bool) -> int:
    """Print every value of preset NAME with its source (`key: value  # source`), or as JSON."""
    import json

    from describer.presets import DESCRIBER_PRESETS
    from recon_score.presets import PRESETS, format_preset, get_preset
    from recon_score.registry import UnknownNameError

    try:  # a name on the command line: an unknown one is a usage error (exit 2), as for --preset
        preset = (DESCRIBER_PRESETS if describer else PRESETS)[name]
    except UnknownNameError as err:
        raise click.BadParameter(str(err), param_hint="NAME") from None
    if describer:
        recon = get_preset(preset.recon_preset).to_dict()
        click.echo(json.dumps({**preset.to_dict(), "recon": recon}, indent=2, sort_keys=True))
        return 0
    click.echo(preset.to_json() if as_json else format_preset(preset))
    return 0
