"""`reconscore models`: what the encoder registry knows, and whether a model's weights are here."""

from __future__ import annotations

import json

import click


@click.group("models")
def command() -> None:
    """List encoder families and offline fixtures; check where a model's weights are."""


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_models(as_json: bool) -> int:
    """Encoder families with example specs, T2I presets' models and the synthetic (random-weight) models."""
    from recon_score.encoders import list_encoders
    from recon_score.presets import PRESETS
    from recon_score.synthetic import PREFIXES
    from recon_score.synthetic import list_models as list_synthetic
    from retrieval.backbones import list_backbones

    encoders = list_encoders()
    t2i = sorted({p.t2i_model for p in PRESETS.values()})
    synthetic = list_synthetic()
    backbones = list_backbones()
    if as_json:
        payload = {
            "encoders": encoders,
            "t2i_models": t2i,
            "synthetic": synthetic,
            "retrieval_backbones": backbones,
        }
        click.echo(json.dumps(payload, indent=2))
        return 0
    click.echo("Encoders (spec = FAMILY:NAME):")
    for row in encoders:
        click.echo(f"  {row['family']:10s} {row['description']}")
        for ex in row["examples"]:
            click.echo(f"      {ex}")
    click.echo(
        "\nT2I models used by presets (any diffusers pipeline id or local folder works with --t2i-model):"
    )
    for m in t2i:
        click.echo(f"  {m}")
    click.echo("\nComposed-retrieval backbones of seed 000 (WEIGHTS = where you put the downloaded file):")
    for b in backbones:
        click.echo(f"  {b['name']}\n      {b['spec']}\n      weights: {b['weights']}")
        if b["note"]:
            click.echo(f"      note: {b['note']}")
    click.echo("\nSynthetic models (random weights, no download; numbers are meaningless):")
    for prefix, entry in PREFIXES.items():
        click.echo(f"  {prefix}: {entry.description}")
        for row in (r for r in synthetic if r["prefix"] == prefix):
            what = row["description"] + (f" (encoder, {row['encoder']} family)" if row["encoder"] else "")
            click.echo(f"      {row['name']:26s} {what}")
    return 0


@command.command("check")
@click.argument("spec")
@click.option("--weights-dir", default=None, help="Local weights folder (default $RECONSCORE_WEIGHTS).")
def check(spec: str, weights_dir: str | None) -> int:
    """Is SPEC available here? SPEC is an encoder spec (dreamsim:ensemble, open_clip:ViT-B-32/openai, ...), a
    T2I model (hub id, local folder, smoke:NAME, shapes:NAME; a folder is also checked for a format the installed diffusers can
    build) or a learned retrieval method that cannot run here (compodiff, magiclens: the reason is printed).
    Downloads nothing. Exit 0 if available, 1 if not."""
    from recon_score.encoders import FAMILIES, check_encoder
    from recon_score.hub import check_model

    if spec in ("compodiff", "magiclens"):
        from retrieval.methods.learned import REFUSALS, RELEASES

        paper, where, _ = RELEASES[spec]
        click.echo(f"{spec}: NOT available")
        click.echo(f"  source: {where} ({paper})")
        click.echo(f"  detail: {REFUSALS[spec]}")
        return 1
    family = spec.partition(":")[0]
    info = (
        check_encoder(spec, weights_dir=weights_dir)
        if family in FAMILIES
        else {"spec": spec, **check_model(spec)}
    )
    if family not in FAMILIES and info["available"]:
        from pathlib import Path

        from recon_score.render import pipeline_format

        folder = Path(info["location"])
        if (folder / "model_index.json").is_file():
            problem, note = pipeline_format(folder)
            if problem:
                info = {**info, "available": False, "detail": f"not loadable by diffusers: {problem}"}
            elif note:
                info = {**info, "detail": note}
    status = "available" if info["available"] else "NOT available"
    click.echo(f"{spec}: {status}")
    for key in ("location", "source", "detail"):
        if info.get(key):
            click.echo(f"  {key}: {info[key]}")
    return 0 if info["available"] else 1
