"""Options several subcommands share, defined once so their names, choices, defaults and help agree; choices come
from the registries they name (importable without torch), so `--help` stays instant and offers what the code has."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path

import click


def options(*decorators: Callable) -> Callable:
    """Apply several click options as one decorator, in the order given (as they appear in --help)."""

    def wrap(f):
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return wrap


def positive_int(*names: str, default: int | None, help: str) -> Callable:
    """An option taking an integer of at least 1 (a size, a count, a limit); its default shown unless None."""
    return click.option(
        *names, type=click.IntRange(min=1), default=default, show_default=default is not None, help=help
    )


def choice(*names: str, choices, default: str | None, help: str | None = None) -> Callable:
    """An option taking one of `choices` (a mistyped one is answered with the closest), its default shown."""
    return click.option(*names, type=Choice(list(choices)), default=default, show_default=True, help=help)


def explain(what: str, seeds: str) -> Callable:
    """--explain, --explain-seeds and --explain-max-phrases (recon_score.explain), spelt once for score and
    describe; `seeds` says which seeds the explanation's K are."""
    from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS

    return options(
        click.option(
            "--explain",
            is_flag=True,
            help=f"{what}: gap maps from the encoder's patch tokens and each phrase's effect (left out, re-rendered "
            "with the same seeds); docs/explain.md. Costs (phrases + 1) x K renders per caption (K = "
            "--explain-seeds), said before it starts.",
        ),
        click.option(
            "--explain-seeds",
            type=click.IntRange(min=2),
            default=DEFAULT_EXPLAIN_SEEDS,
            show_default=True,
            help=f"With --explain: K seeds of its own ({seeds}). The default finds a phrase costing 4 points "
            'with >= 80% power (docs/explain.md, "How many seeds"); K >= 2 (one seed tests nothing).',
        ),
        positive_int(
            "--explain-max-phrases",
            default=8,
            help="With --explain: attribute at most the first N phrases of a caption (bounds the cost).",
        ),
    )


def pop_explain(given: dict):
    """--explain's options, taken out of a command's keyword arguments (None without --explain)."""
    from recon_score.explain import ExplainOptions

    seeds, max_phrases = given.pop("explain_seeds"), given.pop("explain_max_phrases")
    return ExplainOptions(max_phrases=max_phrases, seeds=seeds) if given.pop("explain") else None


def bootstrap(default: int, *, at_least: int) -> Callable:
    """--bootstrap (resamples of every CI, into `n_boot`) and --seed (the bootstrap's seed, non-negative: numpy's
    generator refuses a negative one), spelt once for the commands whose CIs come from recon_score.bootstrap."""
    return options(
        click.option(
            "--bootstrap",
            "n_boot",
            type=click.IntRange(min=at_least),
            default=default,
            show_default=True,
            help="Bootstrap resamples of every CI.",
        ),
        click.option(
            "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Bootstrap seed."
        ),
    )


def optional_file(*names: str, help: str) -> Callable:
    """An option naming a file (not a folder) that the command reads when given; None when not."""
    return click.option(*names, type=click.Path(dir_okay=False, path_type=Path), default=None, help=help)


def device(extra: str = "") -> Callable:
    return click.option(
        "--device", default=None, help=f"cpu, cuda, cuda:1 ... (default: cuda if available).{extra}"
    )


def long_text() -> Callable:
    from eval.metrics.clip import LONG_TEXT_MODES

    return choice(
        "--long-text",
        choices=LONG_TEXT_MODES,
        default="truncate",
        help="clipscore/refclipscore on captions over CLIP's 77 tokens: truncate (with a warning) or average "
        "over overlapping word windows.",
    )


def benchmark_root(default: str | None = None) -> Callable:
    """--benchmark NAME (a retrieval registry name) and --root DIR (its dataset folder, required)."""
    from retrieval.datasets import BENCHMARKS

    return options(
        click.option(
            "--benchmark",
            type=Choice(list(BENCHMARKS)),
            required=default is None,
            default=default,
            show_default=default is not None,
            help="Benchmark: " + "; ".join(f"{b.name}: {b.help}" for b in BENCHMARKS.values()) + ".",
        ),
        click.option(
            "--root",
            "dataset_root",
            type=click.Path(file_okay=False, path_type=Path),
            required=True,
            help="Dataset folder (annotations + images).",
        ),
    )


def clip_encoder() -> Callable:
    from eval.metrics.clip import DEFAULT_ENCODER

    return click.option(
        "--encoder",
        default=DEFAULT_ENCODER,
        show_default=True,
        help="Encoder spec for clipscore/refclipscore (`reconscore models list`).",
    )


class Choice(click.Choice):
    """click's Choice, whose refusal also names the closest choice (`--preset smok` -> did you mean 'smoke'?)."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as err:
            from recon_score.errors import did_you_mean

            hint = did_you_mean(str(value), [str(c) for c in self.choices])
            if not hint:
                raise
            self.fail(f"{err.message}{hint}", param, ctx)


def preset(names, help: str = "", *, default: str = "paper") -> Callable:
    """--preset NAME, one of the registry `names` (an unknown name is a usage error, exit 2)."""
    return choice(
        "--preset",
        choices=names,
        default=default,
        help=f"{help}`reconscore presets list` describes them.".lstrip(),
    )


def preset_flags(cls: type, example, *, only: tuple[str, ...] = (), what: str = "") -> Callable:
    """One flag per overridable field of the preset dataclass `cls` (`--max-side` for `max_side`; default None =
    the preset's value), typed and described by `cls.OVERRIDES`; `example` (a preset) shows its values."""
    hints = typing.get_type_hints(cls)
    flags = []
    for f in dataclasses.fields(cls):
        if f.name in cls.FIXED or (only and f.name not in only):
            continue
        o, flag = cls.OVERRIDES[f.name], "--" + f.name.replace("_", "-")
        value = getattr(example, f.name)
        shown = f" ({example.name}: {value})" if value is not None and len(str(value)) <= 40 else ""
        help = f"{what}{o.help}{shown}"
        kind = next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not types.NoneType)
        if kind is bool:
            flags.append(click.option(f"{flag}/--no-{flag[2:]}", f.name, default=None, help=help))
            continue
        t = (
            Choice(o.choices)
            if o.choices
            else {int: click.INT, float: click.FLOAT}.get(kind, click.STRING)
            if o.min is None
            else click.IntRange(min=o.min)
            if kind is int
            else click.FloatRange(min=o.min, min_open=o.min_open)
        )
        check = _parsed_by(o.parse) if o.parse else None
        flags.append(click.option(flag, f.name, type=t, default=None, help=help, callback=check))
    return options(*flags)


def _parsed_by(parse: Callable) -> Callable:
    """A click callback checking a flag's value with its preset field's parser: a refused value is a usage error
    naming the flag (exit 2), not a traceback."""

    def check(ctx, param, value):
        try:
            return None if value is None else parse(value)
        except ValueError as err:  # recon_score.errors.InputError is a ValueError too
            raise click.BadParameter(str(err)) from None

    return check


def pop_overrides(cls: type, given: dict) -> dict:
    """The values of `cls`'s override flags, taken out of a command's keyword arguments."""
    return {f.name: given.pop(f.name) for f in dataclasses.fields(cls) if f.name in given}


def dataset_split(what: str, *, required: bool = False, annotations: bool = True) -> Callable:
    """--dataset NAME (a registry name), --root DIR, --split, [--annotations FILE]: a dataset split as input;
    `what` says what the command does with it."""
    from eval.datasets import DATASETS

    annotation_file = optional_file(
        "--annotations", help="Dataset annotation file, if not at its default place under --root."
    )
    return options(
        click.option(
            "--dataset",
            type=Choice(list(DATASETS)),
            required=required,
            help=f"{what} (needs --root): "
            + "; ".join(f"{d.name}: {d.help}" for d in DATASETS.values())
            + ".",
        ),
        click.option(
            "--root",
            "dataset_root",
            type=click.Path(file_okay=False, path_type=Path, exists=required),
            required=required,
            help="Dataset folder (annotations + images/).",
        ),
        click.option(
            "--split", default="test", show_default=True, help="Dataset split ('all' for every split)."
        ),
        *([annotation_file] if annotations else []),
    )


def dataset_root(dataset: str | None, root: Path | None) -> None:
    """The check that goes with `dataset_split`'s options (click cannot tie one option to another): a --dataset
    without --root is refused before anything is read, in the same words by every command."""
    if dataset and root is None:
        raise click.UsageError(
            f"--dataset {dataset} needs --root DIR (the dataset's folder: annotations + images/)"
        )


def method_sets(values: tuple[str, ...], *, only: str | None = None) -> dict[str, dict[str, str]]:
    """Repeated `--set METHOD.KEY=VALUE` -> {METHOD: {KEY: VALUE}}; with `only` (retrieve-eval's one method), a
    bare KEY is that method's and another method's key is refused, as is one setting given both ways. Errors
    are recon_score.key_values's kind of line, naming --set and the item."""
    from recon_score.errors import OptionValueError
    from recon_score.key_values import key_values

    out: dict[str, dict[str, str]] = {}
    for key, value in key_values(values, "--set").items():
        method, dot, name = key.partition(".")
        item = f"{key}={value}"
        if only and not dot:
            method, name = only, key
        if not name:
            raise OptionValueError(f"--set: expected METHOD.KEY=VALUE, got {item!r}")
        if only and method != only:
            raise OptionValueError(f"--set: {item!r} is for method {method!r}, not {only!r}")
        if name in out.get(method, {}):
            raise OptionValueError(f"--set: {method}.{name} given twice (as {name} and {method}.{name})")
        out.setdefault(method, {})[name] = value
    return out


def retrieval_protocol() -> Callable:
    """--ties, --empty-positives, --group-mean: how `retrieve` and `retrieve-eval` turn rankings into means."""
    from retrieval.choices import EMPTY_ACTIONS, GROUP_MEANS, TIES

    return options(
        choice("--ties", choices=TIES, default="index", help="Tie-breaking rule."),
        choice(
            "--empty-positives",
            choices=EMPTY_ACTIONS,
            default="zero",
            help="What a query without positives adds to the means.",
        ),
        choice(
            "--group-mean",
            choices=GROUP_MEANS,
            default="queries",
            help="A group's mean over its queries (rscir) or over its subgroups' means.",
        ),
    )


def metric_names(**kw) -> Callable:
    """--metrics NAME[,NAME...]: names of the caption metric registry, listed in the help."""
    from eval.metrics import list_metrics

    names = ", ".join(m.name for m in list_metrics())
    return click.option(
        "--metrics", help=f"Comma-separated metric names: {names} (`reconscore metrics list`).", **kw
    )


def smoke_banner(record: dict) -> None:
    """After a run, every command: say that its numbers are meaningless, in the report's words (smoke_note of
    its record, which also says so when a run it read was meaningless); on stderr, on a line of its own (click
    never wraps it, where a rich print would fold it in a narrow terminal)."""
    from eval.report.build import smoke_note

    note = smoke_note(record)
    if note:
        click.secho(f"{note}.", fg="yellow", err=True)


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


def images_root(default: str, *, extra: str = "") -> Callable:
    """--images DIR, the one meaning of VOCABULARY["--images"]; `default` says where paths are relative to."""
    return click.option(
        "--images",
        "images_root",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=f"Folder that image paths are relative to (default: {default}).{extra}",
    )


def recon_seeds() -> Callable:
    return positive_int(
        "--seeds",
        "recon_seeds",
        default=1,
        help="reconscore: K renders per caption (the preset's seed, then derived ones); the value is the mean "
        "over seeds and the 95% CI over images x seeds is printed beside it.",
    )


class _RunFolder(click.Path):
    """`--out DIR`: a folder to create or resume; a file there means the run cannot start (exit 1), not a usage
    error (click's 2)."""

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


def summary_table(title: str, out: Path, *, already_complete: bool):
    """(console, table) for a run's closing summary; a finished run says first that there was nothing to do."""
    from rich.markup import escape
    from rich.table import Table

    from eval.cli.console import console as make_console

    console = make_console()
    if already_complete:
        console.print(f"[bold]{escape(str(out))}[/] is already complete: nothing to do.")
    return console, Table(title=title, show_header=False)


def print_failures(console, failures: list[tuple], *, where: str) -> None:
    """The first ten failed items (id, error), escaped; how many more, and in which file to find them."""
    from rich.markup import escape

    for item, error in failures[:10]:
        console.print(f"[red]failed[/] {escape(str(item))}: {escape(str(error))}", highlight=False)
    if len(failures) > 10:
        console.print(f"... and {len(failures) - 10} more (see `error` in {where})")
