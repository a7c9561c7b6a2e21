"""The one registry shape: every named thing a user picks (encoder family, preset, metric, method, dataset, ...)
is a frozen-dataclass entry in a read-only `Registry`, with a lazy "module:attribute" target, so listing names,
`--help` and `choices` import no backend and an unknown name is one error with a "did you mean" hint.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from recon_score.errors import ReconScoreError, did_you_mean


class Named(Protocol):
    name: str


E = TypeVar("E", bound=Named)


class UnknownNameError(ReconScoreError, KeyError, ValueError):
    """A name no registry entry has; the message lists the known names and the closest one."""

    def __init__(self, what: str, name: str, known: Iterable[str], see: str = ""):
        known = list(known)
        self.what, self.name, self.known = what, name, known
        tail = f" {see}" if see else ""
        super().__init__(
            f"unknown {what} {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}.{tail}"
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def load_target(target: str) -> Any:
    """The object "package.module:attribute" names (the module itself without ':attribute'), imported now."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


@dataclass(frozen=True)
class Entry:
    """The fields every entry has; a registry's entry type adds its facts as further fields."""

    name: str
    target: str  # "module:attribute" of the code behind the entry, imported only by `load()`
    help: str  # one line for `--help`, listings and docs tables

    def load(self) -> Any:
        return load_target(self.target)


class Registry(Mapping[str, E], Generic[E]):
    """Entries by name, in the order given. A name given twice is an error, never an override."""

    def __init__(self, what: str, entries: Iterable[E], *, see: str = ""):
        self.what, self.see = what, see  # "retrieval method"; where the user can read about the names
        self._entries: dict[str, E] = {}
        for entry in entries:
            if entry.name in self._entries:
                raise ValueError(f"{what} {entry.name!r} is registered twice")
            self._entries[entry.name] = entry

    def __getitem__(self, name: str) -> E:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.error(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._entries)})"

    def error(self, name: str) -> UnknownNameError:
        """The error `self[name]` raises, for callers that check a name before they look it up."""
        return UnknownNameError(self.what, name, self._entries, self.see)

    def load(self, name: str) -> Any:
        """The code behind entry `name` (its target, imported now)."""
        return self[name].load()
