"""The named settings of the retrieval protocol, torch-free so `reconscore retrieve --help` offers exactly the
values the code accepts (retrieval.metrics, retrieval.aggregate and retrieval.index import them from here)."""

AP_VARIANTS = ("non-interpolated", "trapezoidal", "trapezoidal-eps")  # retrieval.metrics
TIES = ("index", "pessimistic", "optimistic")  # how tied scores are ordered
EMPTY_ACTIONS = ("zero", "skip", "error")  # what a query without positives adds to the means
GROUP_MEANS = ("queries", "subgroups")  # a group's mean over its queries or over its subgroups' means
INDEX_KINDS = ("exact", "faiss-flat", "faiss-ivf", "faiss-hnsw")  # top-k search of linear methods


def check_choice(what: str, value, choices) -> None:
    """A ValueError naming the accepted values unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
