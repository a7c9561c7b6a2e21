"""Exceptions and warnings shared by every reconscore package.

Every message names the item, what was expected, and what to do next.
"""

from __future__ import annotations

import difflib
import re

# "<_io.BytesIO object at 0x7f...>" and the like: an address differs between two identical runs
_OBJECT_REPR = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")

# Exit statuses, the same for every command (docs/cli.md has the table).
EXIT_OK = 0  # everything asked for was done
# the run could not start, or stopped (unreadable input file, missing model, conflicting settings)
EXIT_ERROR = 1
EXIT_USAGE = 2  # the command line itself is wrong (click's usage errors)
EXIT_PARTIAL = 3  # the run finished, but some rows / images / methods failed: their `error` says why
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGINT


def did_you_mean(name: str, known) -> str:
    """' (did you mean 'x'?)' for the closest of `known` to a misspelt `name`, or '' when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ReconScoreError(Exception):
    """Base class: a problem the user can act on (bad input, missing model, conflicting flags)."""


class ReconScoreWarning(UserWarning):
    """Warnings the user should see once (truncated prompts, meaningless smoke numbers)."""


class ModelNotAvailableError(ReconScoreError):
    """A model's weights are neither local nor reachable. Never fall back to random weights: a silently random
    model gives plausible-looking numbers."""

    def __init__(self, model: str, *, searched: list[str], fix: str, reason: str | None = None):
        self.model, self.searched, self.fix = model, searched, fix
        where = "; ".join(searched) if searched else "nowhere"
        why = f" ({reason})" if reason else ""
        super().__init__(f"model {model!r} is not available{why}. Searched: {where}. {fix}")


class UnknownEncoderError(ReconScoreError, ValueError):
    def __init__(self, spec: str, known: list[str], reason: str | None = None):
        family = spec.partition(":")[0]
        hint = did_you_mean(family, known)
        why = (reason or f"family {family!r} is not one of {', '.join(known)}{hint}").rstrip(".")
        # a reason from another registry may already point at the listing: say it once
        see = "" if "`reconscore models list`" in why else " `reconscore models list` shows every spec."
        super().__init__(f"unknown encoder spec {spec!r}: {why}.{see}")


class InputError(ReconScoreError, ValueError):
    """One input item is unusable; the run records it and continues. The message is kept free of memory
    addresses (libraries quote object reprs), so two identical runs write byte-identical error texts."""

    def __init__(self, message: object = "", *args):
        super().__init__(_OBJECT_REPR.sub(r"<\1>", str(message)), *args)


class OptionValueError(InputError):
    """A command-line option's value has the wrong form (recon_score.key_values): the command line is wrong, so
    the exit status is click's usage status, said as one `error:` line naming the option and the item."""

    exit_code = EXIT_USAGE


class ArgumentError(ReconScoreError, ValueError):
    """An API call's argument outside what it accepts, said as the CLI says its usage errors."""


class ImageLoadError(InputError):
    pass


class EmptyInputError(ReconScoreError):
    """An input file that holds no rows at all (an empty JSONL, a CSV header alone): nothing could be done, so
    the command says so and exits with the failed-rows status rather than 0."""

    exit_code = EXIT_PARTIAL


class ResumeMismatchError(ReconScoreError):
    """`changes`: the settings that differ ("steps: 28 -> 4"), when the earlier run recorded its settings."""

    def __init__(
        self,
        path: str,
        found: str,
        wanted: str,
        changes: list[str] | None = None,
        restart: str = "pass --overwrite",
    ):
        hint = ""
        if changes:
            shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
            what = f"a different configuration: {shown}"
            dropped = [c.split(":", 1)[0] for c in changes if c.endswith("-> (unset)")]
            if any(key.split(".")[0] == "explain" for key in dropped):
                hint = " It was an --explain run: pass --explain (with its options) to resume it, or use another --out."
            elif dropped:
                hint = f" This run leaves {', '.join(dropped)} unset: pass the option(s) again to resume it."
        else:
            what = f"a different configuration (fingerprint {found}; this run's is {wanted})"
        super().__init__(
            f"{path} was started with {what}.{hint} Choose another --out, or {restart} to start again."
        )
