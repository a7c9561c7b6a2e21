"""`reconscore models`: what the encoder registry knows, and whether a model's weights are here."""

from __future__ import annotations

import json

import click

from eval.cli import SuggestingGroup


@click.group("models", cls=SuggestingGroup)
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
    from retrieval.methods.learned import RELEASES as LEARNED

    backbones = list_backbones()
    if as_json:
        payload = {
            "encoders": encoders,
            "t2i_models": t2i,
            "synthetic": synthetic,
            "retrieval_backbones": backbones,
            "retrieval_methods": {n: {"paper": p, "release": w} for n, (p, w, _) in LEARNED.items()},
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
    click.echo(
        "\nComposed-retrieval backbones of the RS-CIR benchmark paper (WEIGHTS = where you put the downloaded file):"
    )
    for b in backbones:
        click.echo(f"  {b['name']}\n      {b['spec']}\n      weights: {b['weights']}")
        if b["note"]:
            click.echo(f"      note: {b['note']}")
    click.echo("\nLearned composed-retrieval methods (weights per run: --checkpoint METHOD=PATH):")
    for name, (paper, where, _) in LEARNED.items():
        click.echo(f"  {name:10s} {paper}; {where}")
    click.echo("\nSynthetic models (random weights, no download; numbers are meaningless):")
    for prefix, entry in PREFIXES.items():
        click.echo(f"  {prefix}: {entry.help}")
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
    build) or a learned retrieval method with a release check (e.g. magiclens: its release and whether it can be
    read here).
    Downloads nothing. Exit 0 if available, 1 if not."""
    from recon_score.encoders import FAMILIES, check_encoder
    from recon_score.hub import locate
    from recon_score.registry import load_target
    from retrieval.methods import METHODS

    if spec in METHODS and METHODS[spec].status:
        ok, lines = load_target(METHODS[spec].status)()
        click.echo(f"{spec}: {'available' if ok else 'NOT available'}")
        for line in lines:
            click.echo(f"  {line}")
        return 0 if ok else 1
    family = spec.partition(":")[0]
    info = check_encoder(spec, weights_dir=weights_dir) if family in FAMILIES else locate(spec)
    if family not in FAMILIES and info.available:
        from dataclasses import replace
        from pathlib import Path

        from recon_score.render import pipeline_format

        folder = Path(info.location)
        if (folder / "model_index.json").is_file():
            problem, note = pipeline_format(folder)
            if problem:
                info = replace(info, available=False, detail=f"not loadable by diffusers: {problem}")
            elif note:
                info = replace(info, detail=note)
    click.echo(f"{spec}: {'available' if info.available else 'NOT available'}")
    for key in ("location", "source", "detail"):
        if getattr(info, key):
            click.echo(f"  {key}: {getattr(info, key)}")
    return 0 if info.available else 1


@command.group("convert")
def convert() -> None:
    """Convert a released checkpoint once into safetensors."""


@convert.command("magiclens")
@click.argument("src", type=click.Path(dir_okay=False, path_type=str))
@click.argument("dst", type=click.Path(dir_okay=False, path_type=str))
def convert_magiclens(src: str, dst: str) -> int:
    """SRC: a released magic_lens_clip_*.pkl (read without unpickling); DST: a .safetensors file that
    `--checkpoint magiclens=DST` loads without msgpack."""
    from retrieval.magiclens import convert as convert_release

    if not dst.endswith(".safetensors"):
        raise click.BadParameter(f"{dst!r} must end in .safetensors", param_hint="DST")
    cfg = convert_release(src, dst)
    click.echo(
        f"{dst}: MagicLens {cfg.embed_dim}-d, CLIP ViT width {cfg.vision_width} /{cfg.patch_size} at "
        f"{cfg.image_size} px, {cfg.head_layers} fusion layers"
    )
    return 0
