"""Shared across test modules: one METEOR JVM per test session (starting METEOR costs seconds)."""

from __future__ import annotations

import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
SHARED = REPO.parent / "shared" / "data"


@functools.cache
def shared_meteor():
    """A MeteorProcess for the whole session; weakref.finalize in MeteorProcess stops it at exit."""
    from eval.metrics import MeteorProcess

    return MeteorProcess()
