"""Caption metrics, reference-based and reference-free, behind one registry (eval.metrics.registry; the list is in
docs/correlate.md). Every metric scores aligned rows of a `CaptionBatch`, one value per row (NaN where a row lacks
what it needs). Importing this package loads no torch and starts no JVM."""

from eval.metrics.base import CaptionBatch, Metric, MetricOutput
from eval.metrics.compute import build_metric, check_inputs, compute_metrics, metric_options
from eval.metrics.meteor import MeteorProcess
from eval.metrics.registry import METRICS, MetricEntry, get_metric_info, list_metrics, parse_metric_names

__all__ = [
    "METRICS",
    "CaptionBatch",
    "MeteorProcess",
    "Metric",
    "MetricEntry",
    "MetricOutput",
    "build_metric",
    "check_inputs",
    "compute_metrics",
    "get_metric_info",
    "list_metrics",
    "metric_options",
    "parse_metric_names",
]
