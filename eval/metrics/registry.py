"""The metric registry: one frozen `MetricInfo` per name, filled by `@register_metric` on each metric class.

Listing the registry imports no torch or Java: metric modules keep heavy imports inside their methods.
"""

from __future__ import annotations

from dataclasses import dataclass

from recon_score.errors import ReconScoreError, did_you_mean


@dataclass(frozen=True)
class MetricInfo:
    name: str
    cls: type
    higher_is_better: bool
    needs_references: bool
    needs_images: bool
    description: str
    value_range: str  # human-readable, e.g. "[0, 1]"
    backend: str  # what computes it (pycocoevalcap scorer, Java jar, encoder)
    options: tuple[str, ...] = ()  # constructor keyword arguments the metric accepts


class UnknownMetricError(ReconScoreError, KeyError):
    def __init__(self, name: str, known: list[str]):
        hint = did_you_mean(name, known)
        super().__init__(
            f"unknown metric {name!r}{hint}; known: {', '.join(known)}. `reconscore metrics list` describes them."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


_REGISTRY: dict[str, MetricInfo] = {}


def register_metric(
    name: str,
    *,
    higher_is_better: bool,
    needs_references: bool,
    needs_images: bool,
    description: str,
    value_range: str,
    backend: str,
    options: tuple[str, ...] = (),
):
    """Class decorator: record the class under `name`. A name registered twice is an error, never an override."""

    def deco(cls: type) -> type:
        if name in _REGISTRY:
            raise ValueError(f"metric name {name!r} is already registered")
        info = MetricInfo(
            name=name,
            cls=cls,
            higher_is_better=higher_is_better,
            needs_references=needs_references,
            needs_images=needs_images,
            description=description,
            value_range=value_range,
            backend=backend,
            options=options,
        )
        _REGISTRY[name] = info
        cls.info = info
        return cls

    return deco


def list_metrics() -> list[MetricInfo]:
    """Text-only metrics first, then those that need images; by name within each group."""
    return sorted(_REGISTRY.values(), key=lambda m: (m.needs_images, m.name))


def get_metric_info(name: str) -> MetricInfo:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMetricError(name, [m.name for m in list_metrics()]) from None


def parse_metric_names(spec: str | list[str]) -> list[str]:
    """'bleu1, cider' or ['bleu1', 'cider'] -> validated names in order, duplicates dropped."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = []
    for raw in items:
        name = raw.strip().lower()
        if not name:
            continue
        name = get_metric_info(name).name
        if name not in names:
            names.append(name)
    if not names:
        raise ReconScoreError(f"no metric names in {spec!r}; `reconscore metrics list` shows them")
    return names
