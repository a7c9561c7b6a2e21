"""The meta-evaluation suite as pure functions: load each benchmark, score it with each metric, compute its
protocol's statistics, attach the published values, render meta_eval.csv and meta_eval.md. The run
(eval.meta_eval.run) journals each (benchmark, metric) item's rows; `evaluate_metric` (eval.meta_eval.api) calls
the same functions with a metric of the user's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd

from eval.meta_eval.benchmarks import BENCHMARKS, KENDALL, Benchmark
from eval.meta_eval.loaders import MissingBenchmarkFile
from eval.meta_eval.stats import kendall_rows, pairwise_rows
from recon_score.textfiles import csv_dicts

COLUMNS = (
    "benchmark", "variant", "category", "metric", "statistic", "value", "ci_low", "ci_high", "n",
    "published", "difference", "status", "source", "note",
)  # fmt: skip
MATCH, MISMATCH, NONE = "✓", "✗", "—"
IMAGES_DIR = "images"  # image metrics read DIR/<benchmark>/images/<image> (Flickr8K: Flickr8k_Dataset/)
IMAGE_DIRS = {"flickr8k": "Flickr8k_Dataset"}


@dataclass
class Loaded:
    """One benchmark as loaded: the table, or why it is skipped."""

    benchmark: Benchmark
    variant: str
    table: pd.DataFrame | None = None
    skipped: str = ""
    images_root: Path | None = None
    files: list[Path] = field(default_factory=list)

    @property
    def has_images(self) -> bool:
        """Image metrics can run: an images folder, or the hub dataset's own Image feature."""
        if self.images_root is not None:
            return True
        return (
            self.table is not None and "image_bytes" in self.table and self.table["image_bytes"].notna().all()
        )


def load(name: str, data_root: Path, variant: str | None = None) -> Loaded:
    """Benchmark `name` from DIR/<folder>/; a missing file skips it (the reason names the file). A malformed
    file raises BenchmarkFormatError (naming file and row): a broken download is never silently skipped."""
    bench = BENCHMARKS[name]
    variant = bench.variant(variant)
    folder = Path(data_root) / bench.folder
    if not folder.is_dir():
        return Loaded(bench, variant, skipped=f"{folder} not found (get it from {bench.source})")
    try:
        table = bench.load()(folder, variant)
    except MissingBenchmarkFile as err:
        return Loaded(bench, variant, skipped=str(err))
    images = folder / IMAGE_DIRS.get(bench.folder, IMAGES_DIR)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and images not in p.parents)
    return Loaded(bench, variant, table, images_root=images if images.is_dir() else None, files=files)


def statistics(
    loaded: Loaded, metric: str, scores, *, higher_is_better: bool, n_boot: int, seed: int
) -> list[dict]:
    """The protocol's rows for one metric's scores (aligned with the table's rows)."""
    compute = kendall_rows if loaded.benchmark.protocol == KENDALL else pairwise_rows
    rows = compute(loaded.table, scores, higher_is_better=higher_is_better, n_boot=n_boot, seed=seed)
    head = {"benchmark": loaded.benchmark.name, "variant": loaded.variant, "metric": metric}
    return [{**head, **r} for r in rows]


@cache
def published_values() -> tuple[dict, ...]:
    """The published values shipped with the package (eval/meta_eval/published.csv), each with its source."""
    return tuple(rec for _, rec in csv_dicts(Path(__file__).with_name("published.csv"))[1])


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def verify_status(value: float, published: str) -> tuple[float, str]:
    """(difference, status): ✓ when the value rounds to the published one at its printed precision (within
    half a unit of its last digit), else ✗."""
    diff = value - float(published)
    if not math.isfinite(value):
        return diff, MISMATCH
    half = 0.5 * 10 ** -_decimals(published)
    return diff, MATCH if abs(diff) <= half + 1e-9 else MISMATCH


def attach_published(rows: list[dict]) -> list[dict]:
    """Each row with the published value of its (benchmark, category, metric, statistic), the difference and
    the status; the default variant only (the papers' numbers were measured with it)."""
    table = {(p["benchmark"], p["category"], p["metric"], p["statistic"]): p for p in published_values()}
    out = []
    for r in rows:
        pub = table.get((r["benchmark"], r["category"], r["metric"], r["statistic"]))
        if pub is None or r["variant"] != BENCHMARKS[r["benchmark"]].default_variant:
            out.append({**r, "published": None, "difference": None, "status": NONE, "source": ""})
            continue
        diff, status = verify_status(r["value"], pub["value"])
        out.append({**r, "published": float(pub["value"]), "difference": diff, "status": status,
                    "source": pub["source"]})  # fmt: skip
    return out


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(attach_published(rows), columns=list(COLUMNS))


def paper_layout(df: pd.DataFrame) -> pd.DataFrame:
    """The verify table in the papers' layout: one row per metric, one column per (benchmark, category,
    statistic) with a published value or the benchmark's headline statistic; each cell `measured status
    (published)`, e.g. `30.78 ✓ (30.8)`, or `30.78 —` where nothing is published."""
    df = df.copy()
    df["column"] = [
        f"{b}{' ' + c if c else ''} {s.replace('_', '-')}"
        for b, c, s in zip(df["benchmark"], df["category"].fillna(""), df["statistic"])
    ]
    head = df["statistic"] == df["benchmark"].map(lambda b: BENCHMARKS[b].headline)
    df = df[head | (df["status"] != NONE)]

    def cell(r) -> str:
        if r["status"] == NONE:
            return f"{_cell(r['value'])} {NONE}"
        return f"{_cell(r['value'])} {r['status']} ({r['published']:g})"

    df["cell"] = [cell(r) for r in df.to_dict("records")]
    out = df.pivot_table(index="metric", columns="column", values="cell", aggfunc="first", sort=False)
    return out.reindex(index=list(dict.fromkeys(df["metric"])), columns=list(dict.fromkeys(df["column"])))


def _cell(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return f"{x:.{digits}f}"


def markdown(df: pd.DataFrame, skipped: dict[str, str]) -> str:
    """meta_eval.md: the table (value [95% CI], n, published, difference, status) and the skipped benchmarks."""
    lines = [
        "# Meta-evaluation: agreement with human judgments",
        "",
        "Values x 100; 95% CI: percentile bootstrap over images. Status: "
        f"{MATCH} reproduces the published value within its rounding, {MISMATCH} does not, {NONE} none published.",
        "",
        "| benchmark | variant | category | metric | statistic | value [95% CI] | n | published | difference | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in df.to_dict("records"):
        low, high = _cell(r["ci_low"]), _cell(r["ci_high"])
        value = _cell(r["value"]) + (f" [{low}, {high}]" if low or high else "")  # --bootstrap 0: no interval
        diff = "" if r["difference"] is None or pd.isna(r["difference"]) else f"{r['difference']:+.2f}"
        pub = "" if r["published"] is None or pd.isna(r["published"]) else f"{r['published']:g}"
        lines.append(
            f"| {r['benchmark']} | {r['variant']} | {r['category']} | {r['metric']} | {r['statistic']} | {value} "
            f"| {r['n']} | {pub} | {diff} | {r['status']} |"
        )
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    return "\n".join(lines) + "\n"


def output_files(rows: list[dict], skipped: dict[str, str]) -> dict[str, bytes]:
    """{meta_eval.csv, meta_eval.md: bytes} from the rows of every (benchmark, metric)."""
    from recon_score.run_outputs import META_EVAL_CSV, META_EVAL_MD

    df = frame(rows)
    return {
        META_EVAL_CSV: df.to_csv(index=False, float_format="%.4f").encode("utf-8"),
        META_EVAL_MD: markdown(df, skipped).encode("utf-8"),
    }
