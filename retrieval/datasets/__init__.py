"""The one registry of composed retrieval benchmarks. Each entry's target is its loader, ``load(root, *,
annotations=None, **options) -> Benchmark``; the entries hold import paths, so listing imports no loader."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recon_score.errors import ReconScoreError
from recon_score.registry import Entry, Registry

if TYPE_CHECKING:
    from retrieval.datasets.base import Benchmark

__all__ = ["BENCHMARKS", "Benchmark", "Protocol", "Query", "load_benchmark"]

BENCHMARKS: Registry[Entry] = Registry(
    "benchmark",
    (
        Entry(
            "patterncom",
            "retrieval.datasets.patterncom:load",
            "PatternCom (the RS-CIR benchmark paper): PatternNet + attribute queries, rscir layout",
        ),
        Entry(
            "xview2-cir",
            "retrieval.datasets.xview2_cir:load",
            "xView2-CIR (the RS-CIR benchmark paper): pre-disaster image + 'post <disaster>'",
        ),
        Entry(
            "icir",
            "retrieval.datasets.icir:load",
            "i-CIR (the i-CIR paper): instance-level, per-instance databases",
        ),
        Entry(
            "edir",
            "retrieval.datasets.edir:load",
            "EDIR (the EDIR paper): 5 categories / 15 subcategories, Recall@1",
        ),
        Entry(
            "circo",
            "retrieval.datasets.circo:load",
            "CIRCO val: COCO unlabeled gallery, multiple positives, mAP@K",
        ),
        Entry(
            "cirr", "retrieval.datasets.cirr:load", "CIRR val: NLVR2 gallery without the reference, Recall@K"
        ),
        Entry(
            "fashioniq",
            "retrieval.datasets.fashioniq:load",
            "FashionIQ val: per-category galleries, Recall@10/50",
        ),
    ),
)


def __getattr__(name: str):
    """Benchmark, Protocol, Query from retrieval.datasets.base, imported on first use: listing the registry (and
    `reconscore retrieve --help`) stays light."""
    if name in ("Benchmark", "Protocol", "Query"):
        from retrieval.datasets import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_benchmark(
    name: str, root: str | Path, *, annotations: str | Path | None = None, **options
) -> Benchmark:
    """Load `name` from `root`; `options` are the loader's (e.g. phrasing="alt1" for xview2-cir)."""
    load = BENCHMARKS.load(name)
    root = Path(root)
    if not root.is_dir():
        raise ReconScoreError(f"benchmark root {root} is not a folder")
    return load(root, annotations=Path(annotations) if annotations else None, **options)
