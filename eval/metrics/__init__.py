"""Caption metrics, reference-based and reference-free, behind one registry.

    bleu1..bleu4, meteor, rouge (ROUGE-L), cider (CIDEr-D), spice   pycocoevalcap on PTB tokens
    clipscore, refclipscore                                          Hessel et al. 2021, any registry encoder
    recon_score                                                      the ReconScore paper, recon_score.ReconScorer
    pacscore, refpacscore                                            PAC-S (Sarto et al. 2023), authors' weights
    longclipscore, reflongclipscore                                  CLIP-S on Long-CLIP (248 tokens)

Every metric scores aligned rows of a `CaptionBatch` and returns one value per row (NaN where a row lacks what
the metric needs). `compute_metrics` runs several at once, sharing one PTB tokenizer pass and the CLIP
embeddings. Importing this package loads no torch and starts no JVM.
"""

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
