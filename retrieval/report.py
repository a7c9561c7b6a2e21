"""Tables in the RS-CIR benchmark paper's layout (its Tables 1-3): one row per method, a column per group (up to
MAX_COLUMNS), "Avg." and "Total", in percent. See docs/retrieval.md, "Outputs in `--out`"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from retrieval.aggregate import summarize
from retrieval.data import EvalData
from retrieval.evaluate import EvalResult

if TYPE_CHECKING:  # pandas costs ~70 MB and seconds at import: `retrieve-eval` only needs averaging_title
    import pandas as pd

MAX_COLUMNS = 24
METRIC_TITLES = {  # per-query metric "name@k" -> its title (the seed tables' words)
    "hit": "Recall",
    "recall": "Recall (fraction)",
    "precision": "Precision",
    "map": "mAP",
    "subset_hit": "Recall_subset",
}


def metric_title(metric: str) -> str:
    if metric == "ap":
        return "mAP"
    name, _, k = metric.partition("@")
    return METRIC_TITLES.get(name, name) + f"@{k}"


AP_TITLES = {
    "non-interpolated": "AP non-interpolated (rscir)",
    "trapezoidal": "AP trapezoidal (revisited Oxford)",
    "trapezoidal-eps": "AP trapezoidal, recall step 1/(n+1e-5) (i-CIR)",
}


def averaging_title(group_mean: str, empty_positives: str) -> str:
    """How the table's columns average, in words (run.json names the same settings)."""
    inner = "its queries" if group_mean == "queries" else "its subgroups' means"
    empty = {"zero": "counted as 0", "skip": "left out", "error": "refused"}[empty_positives]
    return f"group = mean over {inner}; Avg. = mean over groups; Total = mean over queries; no-positive queries {empty}"


def table_title(
    metric: str, level: str, *, ap: str, group_mean: str = "queries", empty_positives: str = "zero"
) -> str:
    """A table's title naming the metric, the AP variant (for mAP) and the averaging."""
    what = metric_title(metric) + (f", {AP_TITLES[ap]}" if metric == "ap" else "")
    mean = group_mean if level == "group" else "queries"
    return f"{what} (%) by {level} ({averaging_title(mean, empty_positives)})"


def seed_table(
    results: Mapping[str, EvalResult],
    data: EvalData,
    metric: str,
    *,
    level: str = "group",
    order: Sequence[str] = (),
    empty_positives: str = "zero",
    group_mean: str = "queries",
) -> pd.DataFrame:
    """Methods x (groups, Avg., Total) of `metric` in percent; `level="subgroup"` tabulates subgroups."""
    import pandas as pd

    rows = {}
    for name, res in results.items():
        s = _level_summary(res, data, metric, level, empty_positives, group_mean, order)
        row = dict(s.per_group) if 1 < len(s.per_group) <= MAX_COLUMNS else {}
        if len(s.per_group) > 1:
            row["Avg."] = s.macro
        row["Total"] = s.overall
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "Method"
    return (table * 100).round(2)


def _level_summary(res, data, metric, level, empty_positives, group_mean, order=()):
    """`metric` of one method by group (averaged as `group_mean` says) or by subgroup (over its queries): the one
    rule the tables and per_group.csv share, so the two never disagree."""
    group = level == "group"
    return summarize(
        res.per_query[metric],
        data.query_group if group else data.query_subgroup,
        subgroups=data.query_subgroup if group else None,
        empty_positives=empty_positives,
        group_mean=group_mean if group else "queries",
        order=order,
        what=metric,
    )


def to_markdown(table: pd.DataFrame, title: str) -> str:
    import pandas as pd

    cols = [str(c) for c in table.columns]
    lines = [f"### {title}", "", "| Method | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, row in table.iterrows():
        cells = ["" if pd.isna(v) else f"{v:.2f}" for v in row.tolist()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def per_group_long(
    results: Mapping[str, EvalResult],
    data: EvalData,
    metrics: Sequence[str],
    *,
    empty_positives: str = "zero",
    group_mean: str = "queries",
) -> pd.DataFrame:
    """Every (method, level, name, metric) mean with its query count, fractions in [0, 1]; the groups average
    as the tables do (`group_mean`), subgroups over their queries."""
    import pandas as pd

    rows = []
    levels = ["group"] + (["subgroup"] if data.query_subgroup else [])
    for method, res in results.items():
        for metric in metrics:
            for level in levels:
                s = _level_summary(res, data, metric, level, empty_positives, group_mean)
                rows += [(method, level, g, metric, v, s.group_counts[g]) for g, v in s.per_group.items()]
                rows.append((method, level, "Avg.", metric, s.macro, s.n_queries))
            rows.append((method, "all", "Total", metric, s.overall, s.n_queries))
    return pd.DataFrame.from_records(
        rows, columns=["method", "level", "name", "metric", "value", "n_queries"]
    )


def run_notes(notes: Sequence[str], data: EvalData) -> list[str]:
    """Console lines for what a run's reader must know before its numbers: the benchmark's notes and the
    queries without a positive (an excluded pair is no positive)."""
    lines = [f"note: {n}" for n in notes]
    pairs = set(map(tuple, data.positives.tolist())) if data.positives is not None else set()
    if data.exclude is not None:
        pairs -= set(map(tuple, data.exclude.tolist()))
    empty = data.n_queries - len({q for q, _ in pairs})
    if empty:
        lines.append(
            f"note: {empty} of {data.n_queries} queries have no positive (their metrics are undefined; "
            "--empty-positives decides what they add)"
        )
    return lines


def query_image_line(facts: dict | None) -> str:
    """The benchmark's rule for a query's own reference image in the database, and what it did in this run (the
    `query_image` block of run.json's benchmark), in one sentence for the report and the console."""
    if not facts:
        return "not recorded (a run from an older reconscore)"
    n, of = facts.get("references_in_database", 0), facts.get("queries", 0)
    here = f"{n} of {of} queries' reference images are database items"
    if facts.get("rule") == "excluded":
        here += f", {facts.get('excluded', 0)} removed from their own ranking"
    elif n:
        here += ", each ranked as a negative"
    return f"{facts.get('rule')}: {facts.get('meaning')}. Here {here}. Source: {facts.get('source')}"
