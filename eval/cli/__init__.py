"""The `reconscore` command line. One module per subcommand (`eval/cli/<name>.py` defines `command`); they are
imported only when needed and import torch & co. only inside their callbacks, so `--help` stays instant.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys

import click

SUBCOMMANDS = {
    "score": "eval.cli.score",
    "describe": "eval.cli.describe",
    "pairs": "eval.cli.pairs",
    "correlate": "eval.cli.correlate",
    "retrieve": "eval.cli.retrieve",
    "retrieve-eval": "eval.cli.retrieve_eval",
    "report": "eval.cli.report",
    "evaluate": "eval.cli.evaluate",
    "study": "eval.cli.study",
    "generate": "eval.cli.generate",
    "models": "eval.cli.models",
    "presets": "eval.cli.presets",
    "metrics": "eval.cli.metrics",
}


class SuggestingGroup(click.Group):
    """A group that answers a mistyped subcommand as click answers a mistyped option: with the closest name."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)


class LazyGroup(SuggestingGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = SUBCOMMANDS.get(name)
        return importlib.import_module(module).command if module else None


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("reconscore")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(_version(), "--version", prog_name="reconscore")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.option(
    "--no-follow-symlinks",
    is_flag=True,
    help="Refuse input paths that are symlinks to files outside their data root (default: follow links on "
    "disk; textual escapes such as '..' are always refused).",
)
def cli(verbose: int, no_follow_symlinks: bool) -> None:
    """Judge remote-sensing image captions by what they let you see.

    \b
    Quick start (offline, tiny models, meaningless numbers):
      reconscore score --preset smoke --out runs/sample
    With real models (Z-Image + DreamSim, the ReconScore paper's protocol):
      reconscore score --preset paper --captions captions.jsonl --out runs/mine
    """
    if no_follow_symlinks:  # an environment variable, so accelerate's worker processes inherit it
        os.environ["RECONSCORE_FOLLOW_SYMLINKS"] = "0"
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG), format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        for noisy in ("httpx", "huggingface_hub", "urllib3", "filelock"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (tests call it in-process)."""
    from recon_score.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, ReconScoreError

    try:
        rv = cli.main(args=argv, prog_name="reconscore", standalone_mode=False)
    except click.exceptions.Exit as err:
        return err.exit_code
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_INTERRUPTED
    except ReconScoreError as err:
        click.echo(f"error: {err}", err=True)
        return getattr(err, "exit_code", EXIT_ERROR)  # EmptyInputError: the failed-rows status
    except (
        OSError
    ) as err:  # a write refused by the disk outside a run's own handling: one line, not a traceback
        from recon_score.atomic_io import DISK_FULL, write_error

        if err.errno not in (*DISK_FULL, errno.EROFS):
            raise
        click.echo(f"error: {write_error(err)}", err=True)
        return EXIT_ERROR
    return rv if isinstance(rv, int) else EXIT_OK


def _plain_warnings() -> None:
    """reconscore's own warnings as one `warning: ...` line, not Python's
    file:line form; other packages' warnings keep theirs."""
    import warnings

    from recon_score.errors import ReconScoreWarning

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ReconScoreWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def run() -> None:
    """The console entry point (`reconscore`, `python -m eval`); tests call `main` in-process."""
    _plain_warnings()
    sys.exit(main())


if __name__ == "__main__":
    run()
