"""The `reconscore` command line. One module per subcommand (`eval/cli/<name>.py` defines `command`); they are
imported only when needed and import torch & co. only inside their callbacks, so `--help` stays instant.
"""

from __future__ import annotations

import errno
import logging
import os
import sys

import click

from recon_score.registry import Entry, Registry


def _row(name: str, summary: str) -> Entry:
    """A subcommand: `eval/cli/<name>.py`'s `command` (imported only when it runs) and the one-line summary
    `reconscore --help` lists without importing any subcommand module."""
    return Entry(name, f"eval.cli.{name.replace('-', '_')}:command", summary)


SUBCOMMANDS: Registry[Entry] = Registry(
    "subcommand",
    (
        _row("score", "Score captions by reconstruction (ReconScore, reference-free)."),
        _row(
            "describe",
            "Sample N captions per image with a multimodal LLM and keep the best (RemoteDescriber).",
        ),
        _row("pairs", "Build DPO preference pairs from scored describe candidates."),
        _row("correlate", "Kendall tau-b/tau-c of caption metrics against human judgments."),
        _row("retrieve", "Run composed image retrieval methods on a benchmark (mAP, Recall@K)."),
        _row(
            "retrieve-eval", "Evaluate one composed retrieval method on your own embeddings (a .npz bundle)."
        ),
        _row("report", "Render runs as a static HTML report."),
        _row("evaluate", "Evaluate a captioning model's output on a dataset split."),
        _row("study", "The ReconScore paper's experiments (its tables and figures)."),
        _row("generate", "Generate paraphrased, perturbed or length-controlled captions with a text LLM."),
        _row("models", "List encoder families and offline fixtures; check where a model's weights are."),
        _row("presets", "List presets or show every value of one."),
        _row("metrics", "List caption metrics; add metric columns to a run's scores.jsonl."),
        _row(
            "annotate",
            "Blind ranking pages for annotators; collect their agreement and a ranking set.",
        ),
    ),
)


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
    def make_context(self, info_name, args, parent=None, **extra):
        # Off a terminal help is laid out at the fixed content width, never at whatever COLUMNS or a fallback
        # says, so a log or a test sees the same lines everywhere; subcommands inherit it.
        if parent is None and not sys.stdout.isatty():
            extra.setdefault("terminal_width", self.context_settings.get("max_content_width", 110))
        return super().make_context(info_name, args, parent=parent, **extra)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return SUBCOMMANDS[name].load() if name in SUBCOMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(s.name, s.help) for s in SUBCOMMANDS.values()])


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("reconscore")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """Looked up only when asked: importlib.metadata scans every installed distribution."""
    if value and not ctx.resilient_parsing:
        click.echo(f"reconscore, version {_version()}")
        ctx.exit()


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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
    if no_follow_symlinks:
        _command_env("RECONSCORE_FOLLOW_SYMLINKS", "0")
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG), format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        for noisy in ("httpx", "huggingface_hub", "urllib3", "filelock"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if not sys.stderr.isatty():
        _no_library_bars()
    log = logging.getLogger("reconscore")
    if verbose:
        log.info("reconscore %s, Python %s, argv %s", _version(), sys.version.split()[0], sys.argv[1:])
    shown = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # never a token
    log.debug(
        "settings from the environment: %s",
        {
            k: v
            for k, v in os.environ.items()
            if k in shown
            or (k.startswith("RECONSCORE_") and not any(w in k for w in ("TOKEN", "KEY", "SECRET")))
        },
    )


def _command_env(name: str, value: str) -> None:
    """Set `name` for this command (an environment variable: the worker processes it starts inherit it) and
    restore it when the command ends: a second `main` in the same process starts from the caller's setting."""
    before = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

    click.get_current_context().call_on_close(restore)


def _no_library_bars() -> None:
    """Off a terminal the libraries' own tqdm bars ("Writing model shards", downloads) would write their
    carriage-return redraws into the log: recon_score.progress prints the plain lines there. Before they are
    imported, the hub's switch is enough (transformers reads it at import); where one is already imported
    (tests), it is told directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    for name in ("transformers.utils.logging", "diffusers.utils.logging"):
        if name in sys.modules:
            sys.modules[name].disable_progress_bar()


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
    except click.exceptions.Abort:  # Ctrl-C; a run folder has said what it keeps (recon_score.run_engine)
        click.echo("aborted (Ctrl-C)", err=True)
        return EXIT_INTERRUPTED
    except ReconScoreError as err:
        click.echo(f"error: {err}", err=True)
        return getattr(err, "exit_code", EXIT_ERROR)  # EmptyInputError: the failed-rows status
    except OSError as err:  # the disk refused a write outside a run's own handling: one line, not a traceback
        from recon_score.atomic_io import DISK_FULL, write_error

        if err.errno not in (*DISK_FULL, errno.EROFS):
            raise
        click.echo(f"error: {write_error(err)}", err=True)
        return EXIT_ERROR
    return rv if isinstance(rv, int) else EXIT_OK


def _plain_warnings() -> None:
    """reconscore's own warnings as one `warning: ...` line, not Python's file:line form; other packages' warnings
    keep theirs."""
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
