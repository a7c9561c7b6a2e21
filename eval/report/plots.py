"""Matplotlib figures for the report, returned as PNG bytes (Agg backend: no display needed)."""

from __future__ import annotations

import io
from collections.abc import Sequence


def _fig():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _fig().close(fig)
    return buf.getvalue()


def histogram(values: Sequence[float], *, title: str, xlabel: str) -> bytes:
    plt = _fig()
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    ax.hist(list(values), bins=min(30, max(5, len(values) // 3)), color="#3b6ea5", edgecolor="white")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    return _png(fig)


def bars(labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str, ylabel: str) -> bytes:
    plt = _fig()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.0))
    width = 0.8 / max(1, len(series))
    for j, (name, vals) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, list(vals), width=width, label=name)
    ax.set_xticks(range(len(labels)), list(labels), rotation=30, ha="right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="black", linewidth=0.6)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _png(fig)


def curve(
    xs: Sequence[float], series: dict[str, Sequence[float]], *, title: str, xlabel: str, ylabel: str
) -> bytes:
    plt = _fig()
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for name, ys in series.items():
        ax.plot(list(xs), list(ys), marker="o", label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _png(fig)
