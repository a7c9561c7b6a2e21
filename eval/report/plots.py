"""Matplotlib figures for the report, returned as PNG bytes (Agg backend: no display needed)."""

from __future__ import annotations

import io
from collections.abc import Sequence


def _fig():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _fig().close(fig)
    return buf.getvalue()


def histogram_figure(values: Sequence[float], *, title: str, xlabel: str):
    plt = _fig()
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    ax.hist(list(values), bins=min(30, max(5, len(values) // 3)), color="#3b6ea5", edgecolor="white")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.5 ticks
    _plain_numbers(ax)
    _spaced_x_ticks(fig, ax)
    return fig


def _spaced_x_ticks(fig, ax, *, gap_px: float = 4.0) -> None:
    """Fewer x ticks until no two labels overlap: plain numbers of a narrow range (a --seeds run's means, e.g.
    98.3312 .. 98.3398) are long, and matplotlib's default count would print them on top of each other."""
    from matplotlib.ticker import MaxNLocator

    for nbins in (9, 7, 5, 4, 3, 2):
        ax.xaxis.set_major_locator(MaxNLocator(nbins=nbins))
        if not overlapping_x_labels(fig, ax, gap_px=gap_px):
            return


def overlapping_x_labels(fig, ax, *, gap_px: float = 0.0) -> bool:
    """Whether two drawn x tick labels (those inside the axis limits) overlap or come closer than gap_px."""
    import itertools

    fig.canvas.draw()
    lo, hi = sorted(ax.get_xlim())
    boxes = sorted(
        (
            t.get_window_extent()
            for t, x in zip(ax.get_xticklabels(), ax.get_xticks())
            if t.get_text() and lo <= x <= hi
        ),
        key=lambda b: b.x0,
    )
    return any(a.x1 + gap_px > b.x0 for a, b in itertools.pairwise(boxes))


def _plain_numbers(ax) -> None:
    """Tick labels as the values themselves: no '1e3' multiplier and no '+9.85e1' offset above the axis."""
    for axis in (ax.xaxis, ax.yaxis):
        fmt = axis.get_major_formatter()
        if hasattr(fmt, "set_useOffset"):
            fmt.set_useOffset(False)
            fmt.set_scientific(False)


def bars_figure(
    labels: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    ylabel: str,
    errors: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    headline: str | None = None,
):
    """Grouped bars; `errors[name] = (low, high)` draws whiskers at those values (e.g. a bootstrap CI), and the
    `headline` series is drawn solid with a black edge and named "(headline)" in the legend."""
    plt = _fig()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.0))
    width = 0.8 / max(1, len(series))
    for j, (name, vals) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(labels))]
        vals = list(vals)
        main = name == headline
        label = f"{name} (headline)" if main and len(series) > 1 else name
        kw = {"edgecolor": "black", "linewidth": 1.2} if main else {"alpha": 0.55} if headline else {}
        ax.bar(xs, vals, width=width, label=label, **kw)
        if errors and name in errors:
            lo, hi = errors[name]
            yerr = [[max(v - a, 0.0) for v, a in zip(vals, lo)], [max(b - v, 0.0) for v, b in zip(vals, hi)]]
            ax.errorbar(xs, vals, yerr=yerr, fmt="none", ecolor="black", capsize=4, linewidth=1)
    ax.set_xticks(range(len(labels)), list(labels), rotation=30, ha="right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="black", linewidth=0.6)
    _plain_numbers(ax)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return fig


def curve_figure(
    xs: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    integer_x: bool = False,
):
    """Lines with markers; `integer_x` puts one tick on each x (pool sizes N), never a fractional one."""
    plt = _fig()
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for name, ys in series.items():
        ax.plot(list(xs), list(ys), marker="o", label=name)
    if integer_x:
        ax.set_xticks([int(x) for x in xs], [str(int(x)) for x in xs])
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    _plain_numbers(ax)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return fig


def encoders_figure(means, tau, *, title: str):
    """Fig. 4: mean ReconScore per system (one line each) under every encoder, and the Kendall tau-b between
    the encoders' system rankings as an annotated matrix. `means`: systems x encoders; `tau`: encoders^2."""
    plt = _fig()
    enc = [str(c) for c in means.columns]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(5.0 + 0.9 * len(enc), 3.2), gridspec_kw={"width_ratios": [1.4, 1]}
    )
    for system, row in means.iterrows():
        left.plot(range(len(enc)), row.to_numpy(dtype=float), marker="o", label=str(system))
    left.set_xticks(range(len(enc)), enc, rotation=20, ha="right")
    left.set_ylabel("mean ReconScore")
    left.set_title("per-system means per encoder")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    _plain_numbers(left)
    vals = tau.to_numpy(dtype=float)
    im = right.imshow(vals, vmin=-1, vmax=1, cmap="RdBu")
    right.set_xticks(range(len(enc)), enc, rotation=20, ha="right")
    right.set_yticks(range(len(enc)), enc)
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            text = "nan" if vals[i, j] != vals[i, j] else f"{vals[i, j]:.2f}"
            right.text(j, i, text, ha="center", va="center", fontsize=8)
    right.set_title("rank consistency (Kendall τ-b)")
    fig.colorbar(im, ax=right, fraction=0.046)
    fig.suptitle(title, y=1.04)
    fig.tight_layout()
    return fig


def heatmap_figure(
    rows: Sequence[str],
    cols: Sequence[str],
    values: Sequence[Sequence[float]],
    labels: Sequence[Sequence[str]],
    *,
    title: str,
):
    """A rows x cols grid coloured by value (NaN blank), each cell printed with its label (value, CI, status)."""
    import numpy as np

    plt = _fig()
    grid = np.asarray(values, dtype=float)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(cols) + 2.5), max(2.0, 0.55 * len(rows) + 1.2)))
    finite = grid[np.isfinite(grid)]
    vmax = float(np.abs(finite).max()) if finite.size else 1.0
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            dark = np.isfinite(grid[i, j]) and abs(grid[i, j]) > 0.6 * vmax
            ax.text(
                j, i, labels[i][j], ha="center", va="center", fontsize=7, color="white" if dark else "black"
            )
    ax.set_xticks(range(len(cols)), list(cols), rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.04)
    return fig
