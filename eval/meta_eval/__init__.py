"""Meta-evaluation: how a caption metric agrees with people on the standard human-judgment benchmarks
(Flickr8K-Expert and -CF, Composite, PASCAL-50S, FOIL, Polaris, Nebula, THumB, LongCap-Arena), each with its
official protocol, a 95% CI, and the published value it should reproduce (docs/meta-eval.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eval.meta_eval.api import evaluate_metric

__all__ = ["evaluate_metric"]


def __getattr__(name: str):
    if name == "evaluate_metric":  # lazy: listing benchmarks imports no metric code
        from eval.meta_eval.api import evaluate_metric

        return evaluate_metric
    raise AttributeError(name)
