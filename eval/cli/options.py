"""Options several subcommands share, defined once so their names, choices, defaults and help agree.

Kept free of torch imports (`--help` stays instant); tests check the choices against the code that uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import click

LONG_TEXT_CHOICES = ("truncate", "sliding-window")  # eval.metrics.clip.LONG_TEXT_MODES
CLIP_ENCODER = "open_clip:ViT-B-32/openai"  # Hessel et al.'s CLIPScore backbone


def options(*decorators: Callable) -> Callable:
    """Apply several click options as one decorator, in the order given (as they appear in --help)."""

    def wrap(f):
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return wrap


def device(extra: str = "") -> Callable:
    return click.option(
        "--device", default=None, help=f"cpu, cuda, cuda:1 ... (default: cuda if available).{extra}"
    )


def long_text() -> Callable:
    return click.option(
        "--long-text",
        type=click.Choice(LONG_TEXT_CHOICES),
        default="truncate",
        show_default=True,
        help="clipscore/refclipscore on captions over CLIP's 77 tokens: truncate (with a warning) or average "
        "over overlapping word windows.",
    )


def clip_encoder() -> Callable:
    return click.option(
        "--encoder",
        default=CLIP_ENCODER,
        show_default=True,
        help="Encoder spec for clipscore/refclipscore (`reconscore models list`).",
    )


def weights_dir() -> Callable:
    return click.option(
        "--weights-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Local weights for DreamSim & co. (default $RECONSCORE_WEIGHTS).",
    )


def cache(what: str) -> Callable:
    """--cache-dir and --no-cache for the cache of `what`."""
    return options(
        click.option(
            "--cache-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help=f"Folder of the {what} cache (default under $RECONSCORE_CACHE or ~/.cache/reconscore).",
        ),
        click.option("--no-cache", is_flag=True, help=f"Do not read or write the {what} cache."),
    )


def trust_remote_code(what: str) -> Callable:
    return click.option(
        "--trust-remote-code",
        is_flag=True,
        help=f"Run Python code shipped in the folders of {what} (off by default; recorded in run.json).",
    )


def retry_errors(what: str) -> Callable:
    return click.option("--retry-errors", is_flag=True, help=f"On resume, redo {what} that failed before.")


def overwrite() -> Callable:
    return click.option("--overwrite", is_flag=True, help="Discard earlier results in --out and start again.")


# One name per concept across every subcommand (tests/eval/test_vocabulary.py walks them all).
VOCABULARY = {
    "--root": "a dataset folder (annotations + images/), read by a dataset loader or benchmark",
    "--images": "the folder that image paths in the inputs are relative to",
    "--inputs": "what `describe` captions: a folder, one image, a .txt list or a .jsonl",
    "--captions": "a captions table (.jsonl/.csv/.tsv with image and caption)",
    "--annotations": "a dataset annotation file, if not at its default place under --root",
    "--dataset": "a registered caption dataset name",
    "--out": "where the command writes its results",
    "--preset": "a named ReconScore configuration (`reconscore presets list`)",
    "--encoder": "an encoder spec of the one registry (`reconscore models list`)",
    "--device": "where models run",
    "--seed": "the seed the command's randomness derives from",
}

_warned: set[str] = set()


class RenamedOptions(click.Command):
    """A command whose old option spellings still parse, as hidden aliases that warn once per process.

    `renamed = {"--old": "--new"}`: every `--old` / `--old=VALUE` token is rewritten to `--new` before click
    parses, so the old spelling shares the new option's type, checks and default.
    """

    renamed: ClassVar[dict[str, str]] = {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out, rest = [], list(args)
        while rest:
            tok = rest.pop(0)
            if tok == "--":  # everything after is an argument, never an option
                out += [tok, *rest]
                break
            name, eq, value = tok.partition("=")
            new = self.renamed.get(name)
            if new is None:
                out.append(tok)
                continue
            if name not in _warned:
                _warned.add(name)
                click.echo(
                    f"warning: {self.name} {name} is now {new}; the old name will be removed", err=True
                )
            out.append(f"{new}{eq}{value}")
        return super().parse_args(ctx, out)


def renamed(mapping: dict[str, str]) -> type[RenamedOptions]:
    """`@click.command(..., cls=renamed({"--images-dir": "--images"}))`."""
    return type("Renamed", (RenamedOptions,), {"renamed": dict(mapping)})


def images_root(default: str, *, extra: str = "", file_okay: bool = False) -> Callable:
    """--images DIR, the one meaning of VOCABULARY["--images"]; `default` says where paths are relative to
    without it. (`file_okay`: describe's old `--images LIST` still parses, with a warning.)"""
    return click.option(
        "--images",
        "images_root",
        type=click.Path(file_okay=file_okay, path_type=Path),
        default=None,
        help=f"Folder that image paths are relative to (default: {default}).{extra}",
    )


def recon_seeds() -> Callable:
    return click.option(
        "--seeds",
        "recon_seeds",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="reconscore: K renders per caption (the preset's seed, then derived ones); the value is the mean "
        "over seeds and the 95% bootstrap CI over images and seeds is printed beside it.",
    )


class _RunFolder(click.Path):
    """`--out DIR`: a folder to create or resume. An existing file there means the run cannot start (exit 1,
    as documented), not a usage error (click's 2, which reconscore uses for "some rows failed")."""

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value, param, ctx):
        path = Path(super().convert(value, param, ctx))
        if path.exists() and not path.is_dir():
            from recon_score.errors import ReconScoreError

            raise ReconScoreError(
                f"--out {path} is a file, not a folder; choose another --out (a run folder)"
            )
        return path


RUN_FOLDER = _RunFolder()


def _parse_bands(ctx, param, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        bands = tuple(int(b) for b in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected band numbers like 4,3,2, got {value!r}") from None
    if len(bands) not in (1, 3) or min(bands) < 1:
        raise click.BadParameter(f"expected 1 or 3 band numbers counted from 1 (e.g. 4,3,2), got {value!r}")
    return bands


def bands() -> Callable:
    """--bands for multi-band rasters, read by recon_score.images.load_image (docs/images.md)."""
    return click.option(
        "--bands",
        callback=_parse_bands,
        default=None,
        metavar="B[,G,B]",
        help="Raster bands shown as R,G,B, counted from 1 (e.g. 4,3,2 for NIR false colour; one band: gray). "
        "Default: bands 1-3. See docs/images.md.",
    )
