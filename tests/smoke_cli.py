"""The argv of a smoke-preset CLI run (the tiny offline models, on CPU), spelt once for the tests that start one."""

from __future__ import annotations

from pathlib import Path


def smoke(command: str, out: Path | str, *args: str) -> list[str]:
    """`reconscore COMMAND --preset smoke ARGS --out OUT --device cpu`, as a list for `eval.cli.main`."""
    return [command, "--preset", "smoke", *args, "--out", str(out), "--device", "cpu"]
