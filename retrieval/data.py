"""The features-level view of a composed retrieval benchmark: what methods and metrics need, nothing about
files. A benchmark run builds it from cached features; a user's .npz bundle (retrieval.bundle) maps onto it
one key to one field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recon_score.errors import InputError

if TYPE_CHECKING:
    from torch import Tensor


NORM_TOLERANCE = 1e-3


@dataclass
class EvalData:
    """Queries, database and relevance as arrays: numpy (a bundle: `retrieve-eval` never loads torch) or
    tensors (a `retrieve` run); methods and metrics take either. Each field is the bundle key of the same name
    (`query_ids`: `query_id`), described in docs/retrieval.md, "Bundle format"."""

    query_image: np.ndarray | Tensor
    query_text: np.ndarray | Tensor
    database: np.ndarray | Tensor
    positives: np.ndarray | Tensor
    query_group: list[str]
    query_subgroup: list[str] | None = None
    database_group: list[str] | None = None
    query_db_group: list[str] | None = None
    exclude: np.ndarray | Tensor | None = None
    subset: np.ndarray | Tensor | None = None
    query_ids: list[str] | None = None

    @property
    def n_queries(self) -> int:
        return int(self.query_image.shape[0])

    @property
    def n_database(self) -> int:
        return int(self.database.shape[0])

    def validate(self, *, where: str = "EvalData", rows_checked: bool = False) -> EvalData:
        """Shapes, normalisation (unless `rows_checked`: load_bundle did it, naming the key) and index ranges;
        raises InputError naming the field and the fix."""
        q, n = self.n_queries, self.n_database
        d = self.database.shape[1] if self.database.ndim == 2 else None
        for name, t, rows in (("query_image", self.query_image, q), ("query_text", self.query_text, q)):
            if t.ndim != 2 or t.shape[0] != rows or t.shape[1] != d:
                raise InputError(f"{where}: {name} must be ({q}, {d}), got {tuple(t.shape)}")
        for name in ("query_image", "query_text", "database"):
            if not rows_checked:
                check_normalised(getattr(self, name), name, where=where)
        _check_pairs(self.positives, q, n, "positives", where)
        for name in ("exclude", "subset"):
            if getattr(self, name) is not None:
                _check_pairs(getattr(self, name), q, n, name, where)
        for name in ("query_group", "query_subgroup", "query_ids"):
            _check_len(getattr(self, name), q, name, where)
        if self.query_ids is not None:
            check_unique_ids(self.query_ids, where, [f"row {i}" for i in range(q)], what="query_id")
        _check_len(self.database_group, n, "database_group", where)
        _check_len(self.query_db_group, q, "query_db_group", where)
        if (self.database_group is None) != (self.query_db_group is None):
            raise InputError(
                f"{where}: database_group and query_db_group go together (a query ranks the database items of "
                "its group); give both or neither"
            )
        if self.database_group is not None and len(self.positives):
            names, codes = np.unique(
                np.asarray(list(self.query_db_group) + list(self.database_group), dtype=object).astype(str),
                return_inverse=True,
            )
            q_codes, d_codes = codes[:q], codes[q:]
            pairs = as_numpy(self.positives)
            bad = np.flatnonzero(q_codes[pairs[:, 0]] != d_codes[pairs[:, 1]])
            if bad.size:
                qi, di = pairs[bad[0]].tolist()
                raise InputError(
                    f"{where}: {bad.size} positive pairs lie outside the query's database group, e.g. query {qi} "
                    f"(group {names[q_codes[qi]]!r}) -> database item {di} (group {names[d_codes[di]]!r}); such a "
                    "positive can never be retrieved. Fix database_group/query_db_group or the positives."
                )
        return self

    def tensors(self) -> EvalData:
        """This data with every array a tensor (a bundle's are numpy), for methods written in torch."""
        return converted(self, _EVAL_ARRAYS, as_torch)

    def arrays(self) -> EvalData:
        """This data with every array numpy (a run's are tensors), for methods that score numpy: a run then
        hands them what a bundle does, so `retrieve` and `retrieve-eval` give the same numbers."""
        return converted(self, _EVAL_ARRAYS, as_numpy)

    def db_groups(self) -> list[tuple[str | None, np.ndarray, np.ndarray]]:
        """(group, query indices, database indices) per database group; one entry (None, all, all) without."""
        if self.database_group is None:
            return [(None, np.arange(self.n_queries), np.arange(self.n_database))]
        q_names = np.asarray(self.query_db_group, dtype=object)
        d_names = np.asarray(self.database_group, dtype=object)
        return [
            (g, np.flatnonzero(q_names == g), np.flatnonzero(d_names == g))
            for g in dict.fromkeys(self.query_db_group)
        ]


def check_unique_ids(
    ids: Sequence[str], where: str, places: Sequence[str], *, what: str = "query id"
) -> None:
    """Refuse a repeated query id, naming where each repeat is (`places[i]`: "line 7", "row 3"): a repeated
    query counts twice in every mean, and per-query outputs could not tell the copies apart."""
    first: dict[str, int] = {}
    repeats = []
    for i, x in enumerate(ids):
        if x in first:
            repeats.append(f"{x!r} at {places[first[x]]} and {places[i]}")
        else:
            first[x] = i
    if repeats:
        shown = "; ".join(repeats[:5]) + ("; ..." if len(repeats) > 5 else "")
        raise InputError(f"{where}: {len(repeats)} repeated {what}(s): {shown}. Each query must appear once.")


_EVAL_ARRAYS = ("query_image", "query_text", "database", "positives", "exclude", "subset")


def converted(obj, fields: Sequence[str], convert: Callable):
    """A copy of the dataclass `obj` with each of its array `fields` that is set passed through `convert`
    (`as_numpy` or `as_torch`)."""
    return dataclasses.replace(
        obj, **{k: convert(getattr(obj, k)) for k in fields if getattr(obj, k) is not None}
    )


def as_numpy(t: np.ndarray | Tensor) -> np.ndarray:
    """The array as numpy without loading torch: itself, or a CPU tensor's view (a GPU tensor is copied)."""
    return t if isinstance(t, np.ndarray) else t.detach().cpu().numpy()


def as_torch(t: np.ndarray | Tensor) -> Tensor:
    """The array as a tensor, for methods written in torch (a numpy array is shared, not copied)."""
    import torch

    return torch.from_numpy(t) if isinstance(t, np.ndarray) else t


def _dtype_name(t: np.ndarray | Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_normalised(t: np.ndarray | Tensor, name: str, *, where: str = "EvalData") -> None:
    if _dtype_name(t) != "float32":
        raise InputError(f"{where}: {name} must be float32, got {t.dtype}")
    x = as_numpy(t)
    if x.size == 0:
        return
    squares = np.einsum("...i,...i->...", x, x)  # one pass, no (rows, D) temporary
    if not np.isfinite(squares).all() and not np.isfinite(x).all():
        raise InputError(f"{where}: {name} has NaN or infinite values")
    norms = np.sqrt(squares)
    worst = int(np.abs(norms - 1).argmax())
    if abs(float(norms[worst]) - 1.0) > NORM_TOLERANCE:
        raise InputError(
            f"{where}: {name} rows must be L2-normalised (row {worst} has norm {float(norms[worst]):.4f}); "
            "divide each row by its norm before saving"
        )


def _check_pairs(p: np.ndarray | Tensor, q: int, n: int, name: str, where: str) -> None:
    if p.ndim != 2 or p.shape[1] != 2 or _dtype_name(p) not in ("int64", "int32"):
        raise InputError(
            f"{where}: {name} must be an integer array of shape (P, 2), got {tuple(p.shape)} {p.dtype}"
        )
    t = as_numpy(p)
    for col, what, limit in ((0, "query", q), (1, "database", n)):
        bad = np.flatnonzero((t[:, col] < 0) | (t[:, col] >= limit))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"{where}: {name}[:, {col}] must be {what} indices in [0, {limit}), got {int(t[row, col])} "
                f"(row {row}; {len(bad)} such row(s))"
            )


def _check_len(values: Sequence | None, expected: int, name: str, where: str) -> None:
    if values is not None and len(values) != expected:
        raise InputError(f"{where}: {name} must have {expected} entries, got {len(values)}")
