"""reconscore's evaluation layer: caption metrics, agreement with humans, the papers' studies, reports and the
`reconscore` command line (eval.cli). May import every other reconscore package."""


def __getattr__(name: str):
    if name == "evaluate_metric":  # `from eval import evaluate_metric`, imported on first use
        from eval.meta_eval.api import evaluate_metric

        return evaluate_metric
    raise AttributeError(f"module 'eval' has no attribute {name!r}")
