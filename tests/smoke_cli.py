"""The argv of the CLI runs many tests start (the smoke preset's tiny offline models, on CPU), spelt once."""

from __future__ import annotations

from pathlib import Path


def smoke(command: str, out: Path | str, *args: str) -> list[str]:
    """`reconscore COMMAND --preset smoke ARGS --out OUT --device cpu`, as a list for `eval.cli.main`."""
    return [command, "--preset", "smoke", *args, "--out", str(out), "--device", "cpu"]


def evaluate(
    dataset: str, root: Path | str, captions: Path | str, metrics: str, out: Path, *args: str
) -> list[str]:
    """`reconscore evaluate --dataset DATASET --root ROOT --captions CAPTIONS --metrics METRICS ARGS --out OUT`."""
    return ["evaluate", "--dataset", dataset, "--root", str(root), "--captions", str(captions), "--metrics", metrics,
            *args, "--out", str(out)]  # fmt: skip
