"""A bound on tests that would hang on a regression (reading a FIFO, a device), spelt once."""

from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def no_hang(seconds: int = 10):
    """A hang becomes a failure after `seconds` (SIGALRM), not a stuck test run."""

    def _fail(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, _fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
