"""The named settings of the retrieval protocol and the parsing of CLI option strings, torch-free so
`reconscore retrieve --help` offers exactly the values the code accepts (retrieval.metrics, retrieval.aggregate
and retrieval.index import them from here)."""

import typing
from typing import Any

AP_VARIANTS = ("non-interpolated", "trapezoidal", "trapezoidal-eps")  # retrieval.metrics
TIES = ("index", "pessimistic", "optimistic")  # how tied scores are ordered
EMPTY_ACTIONS = ("zero", "skip", "error")  # what a query without positives adds to the means
GROUP_MEANS = ("queries", "subgroups")  # a group's mean over its queries or over its subgroups' means
INDEX_KINDS = ("exact", "faiss-flat", "faiss-ivf", "faiss-hnsw")  # top-k search of linear methods


def check_choice(what: str, value, choices) -> None:
    """A ValueError naming the accepted values unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")


def from_text(raw: Any, hint: Any) -> Any:
    """A CLI string converted to the field type `hint` (bool, int, float or an Optional of one); anything else as
    given. A ValueError says "expects TYPE, got RAW" for the caller to prefix with the option's name."""
    if not isinstance(raw, str):
        return raw
    args = typing.get_args(hint)
    if type(None) in args and raw.strip().lower() in ("none", "null", ""):
        return None
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    try:
        if base is bool:
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if base in (int, float):
            return base(raw)
    except ValueError:
        raise ValueError(f"expects {getattr(base, '__name__', base)}, got {raw!r}") from None
    return raw
