"""docs/python-api.md: every Python block runs as written (smoke preset), and its numbers are consistent."""

import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")


def test_python_api_examples_run(monkeypatch):
    pytest.importorskip("torchmetrics")
    monkeypatch.chdir(REPO)
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert len(blocks) == 4
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "docs/python-api.md", "exec"), ns)
    best = ns["best"]
    assert best.recon_score == pytest.approx(50 * (1 + best.cosine))  # the ReconScore paper: 1 - d / 2
    assert [r.seed for r in ns["results"]] == [42, 42]  # one image: each caption rendered with its seed
    assert ns["bad"].error.startswith("image 2: float tensor values must lie in [0, 1]")
    assert ns["per_item"].numel() == 2
    assert abs(ns["mean"].item() - ns["per_item"].mean().item()) < 1e-9
    assert set(ns["evals"]) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ReconScore"}
    assert not math.isnan(ns["evals"]["ReconScore"])
