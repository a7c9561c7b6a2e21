"""A stop at a known point of a run: `python -m tests.killpoint N ARGV...` is `reconscore ARGV` SIGKILLed at its Nth
journal append of items' results, before it is written; `python -m tests.killpoint end ARGV...`, once its end line is
logged, before run.json is written. The package holds no test hook: this wraps its appender."""

import os
import signal
import sys
from collections.abc import Callable

from recon_score import run_engine


def stop_at_append(n: int, stop: Callable[[], None]) -> Callable:
    """The journal's appender, calling `stop` before its Nth append of items' records (headers and the
    invocation log do not count)."""
    append, seen = run_engine._append_lines, [0]

    def appending(path, records):
        records = list(records)
        if any("row" in rec for rec in records):
            seen[0] += 1
            if seen[0] == n:
                stop()
        append(path, records)

    return appending


def stop_after_end(stop: Callable[[], None]) -> Callable:
    """The journal's appender, calling `stop` once the invocation's end line is written, before run.json is."""
    append = run_engine._append_lines

    def appending(path, records):
        records = list(records)
        append(path, records)
        if any(rec.get("event") == "end" for rec in records):
            stop()

    return appending


if __name__ == "__main__":
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    at = sys.argv[1]
    run_engine._append_lines = stop_after_end(kill) if at == "end" else stop_at_append(int(at), kill)
    sys.argv = ["reconscore", *sys.argv[2:]]
    from eval.cli import run

    run()
