"""The one rich Console of the command line: on a terminal it fits the window; off a terminal (a log file, a
pipe, a test's captured output) nothing is wrapped, so a message stays on one line whatever its path's length
and `grep` finds it."""

from __future__ import annotations

import sys
from typing import TextIO

LOG_WIDTH = 100_000  # wide enough that no line of a log is ever folded


def console(file: TextIO | None = None, *, stderr: bool = False):
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    if getattr(stream, "isatty", lambda: False)():
        return Console(file=file, stderr=stderr)
    return Console(file=file, stderr=stderr, width=LOG_WIDTH, soft_wrap=True)
