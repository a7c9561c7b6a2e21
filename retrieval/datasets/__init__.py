"""The one registry of composed retrieval benchmarks. Each entry's module defines ``load(root, *, annotations=None,
**options) -> Benchmark``; the table holds module paths, so listing imports no loader."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from recon_score.errors import ReconScoreError, did_you_mean

if TYPE_CHECKING:
    from retrieval.datasets.base import Benchmark

__all__ = ["BENCHMARKS", "Benchmark", "Protocol", "Query", "list_benchmarks", "load_benchmark"]

# name -> (module, one-line description)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "patterncom": (
        "retrieval.datasets.patterncom",
        "PatternCom (the RS-CIR benchmark paper): PatternNet + attribute queries, rscir layout",
    ),
    "xview2-cir": (
        "retrieval.datasets.xview2_cir",
        "xView2-CIR (the RS-CIR benchmark paper): pre-disaster image + 'post <disaster>'",
    ),
    "icir": ("retrieval.datasets.icir", "i-CIR (the i-CIR paper): instance-level, per-instance databases"),
    "edir": ("retrieval.datasets.edir", "EDIR (the EDIR paper): 5 categories / 15 subcategories, Recall@1"),
    "circo": ("retrieval.datasets.circo", "CIRCO val: COCO unlabeled gallery, multiple positives, mAP@K"),
    "cirr": ("retrieval.datasets.cirr", "CIRR val: NLVR2 gallery without the reference, Recall@K"),
    "fashioniq": ("retrieval.datasets.fashioniq", "FashionIQ val: per-category galleries, Recall@10/50"),
}


class UnknownBenchmarkError(ReconScoreError, ValueError):
    def __init__(self, name: str):
        hint = did_you_mean(name, BENCHMARKS)
        super().__init__(f"unknown benchmark {name!r}{hint}; known: {', '.join(BENCHMARKS)}")


def __getattr__(name: str):
    """Benchmark, Protocol, Query from retrieval.datasets.base, imported on first use: listing the registry (and
    `reconscore retrieve --help`) stays light."""
    if name in ("Benchmark", "Protocol", "Query"):
        from retrieval.datasets import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def list_benchmarks() -> list[dict]:
    return [{"name": n, "module": m, "description": d} for n, (m, d) in BENCHMARKS.items()]


def load_benchmark(
    name: str, root: str | Path, *, annotations: str | Path | None = None, **options
) -> Benchmark:
    """Load `name` from `root`; `options` are the loader's (e.g. phrasing="alt1" for xview2-cir)."""
    if name not in BENCHMARKS:
        raise UnknownBenchmarkError(name)
    root = Path(root)
    if not root.is_dir():
        raise ReconScoreError(f"benchmark root {root} is not a folder")
    module = importlib.import_module(BENCHMARKS[name][0])
    return module.load(root, annotations=Path(annotations) if annotations else None, **options)
