"""`evaluate_metric`: benchmark a metric of your own on the meta-evaluation suite without registering it.

    from eval import evaluate_metric
    table = evaluate_metric("flickr8k-expert", metric=my_metric, data_root="data")

`my_metric(candidates=[...], references=[[...], ...], images=[...])` scores one batch and returns one number per
candidate. `images` holds paths under the benchmark's images folder, or a hub set's own images as PIL images
(Polaris, Nebula, LongCap-Arena), or is None where the benchmark has none. The table has the rows
`reconscore correlate --benchmarks` writes to meta_eval.csv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from eval.meta_eval.suite import frame, load, statistics
from recon_score.errors import InputError, ReconScoreError

Metric = Callable[..., Sequence[float]]


def _unique_inputs(table: pd.DataFrame, images: list, names: list) -> tuple[list[tuple], np.ndarray]:
    """The distinct (candidate, references, image) inputs and, per row, the index of its input: the metric
    scores each distinct input once (Flickr8K-Expert's three ratings of a caption share one score). An image is
    told apart by its name (`names`); what the metric is given is `images`."""
    index: dict[tuple, int] = {}
    inputs: list[tuple] = []
    rows = np.empty(len(table), dtype=np.int64)
    for i, (cand, refs, img, name) in enumerate(zip(table["candidate"], table["references"], images, names)):
        key = (cand, tuple(refs), name)
        if key not in index:
            index[key] = len(inputs)
            inputs.append((cand, tuple(refs), img))
        rows[i] = index[key]
    return inputs, rows


def _score(metric: Metric, inputs: list[tuple], batch_size: int, name: str) -> np.ndarray:
    out = np.empty(len(inputs))
    for start in range(0, len(inputs), batch_size):
        part = inputs[start : start + batch_size]
        imgs = [p[2] for p in part]
        got = metric(
            candidates=[p[0] for p in part],
            references=[list(p[1]) for p in part],
            images=None if all(i is None for i in imgs) else imgs,
        )
        got = np.asarray(list(got), dtype=float)
        if got.shape != (len(part),):
            raise ReconScoreError(f"{name} returned {got.shape} scores for a batch of {len(part)} candidates")
        out[start : start + len(part)] = got
    return out


def _images(loaded) -> tuple[list, list]:
    """Per row, what the metric is given and what names it: a path under the images folder, a hub set's own image
    (PIL, opened lazily), or None where there is none (a missing file, undecodable bytes)."""
    from eval.meta_eval.run import decoded_images
    from eval.metrics.base import image_sources

    if loaded.images_root is None and loaded.has_images:
        found = [None if isinstance(im, InputError) else im for im in decoded_images(loaded.table)]
        return found, loaded.table["image"].tolist()
    if loaded.images_root is None:
        return [None] * len(loaded.table), [None] * len(loaded.table)
    found = image_sources(loaded.images_root, loaded.table["image"].tolist())
    paths = [None if isinstance(p, InputError) else str(p) for p in found]
    return paths, paths


def evaluate_metric(
    benchmark: str | Sequence[str],
    metric: Metric,
    *,
    data_root: str | Path,
    variant: str | None = None,
    name: str = "metric",
    higher_is_better: bool = True,
    batch_size: int = 256,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """The meta-evaluation rows of `metric` on `benchmark` (a name, `all`, or a list of names) under
    `data_root` (DIR/<benchmark>/ as downloaded): value x 100, 95% CI, n, published value, difference, status.

    Raises:
        ReconScoreError: an unknown benchmark or variant; a benchmark whose files are absent (naming the file
            and where to get it); a metric that returns the wrong number of scores.
    """
    from eval.meta_eval.benchmarks import parse_benchmarks

    names = parse_benchmarks(benchmark) if isinstance(benchmark, str) else list(benchmark)
    rows = []
    for bench in names:
        loaded = load(bench, Path(data_root), variant if len(names) == 1 else None)
        if loaded.table is None:
            raise ReconScoreError(f"{bench}: {loaded.skipped}")
        inputs, where = _unique_inputs(loaded.table, *_images(loaded))
        scores = _score(metric, inputs, batch_size, name)[where]
        rows += statistics(loaded, name, scores, higher_is_better=higher_is_better, n_boot=n_boot, seed=seed)
    return frame(rows)
