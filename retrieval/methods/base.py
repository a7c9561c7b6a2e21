"""The contract every composed retrieval method fulfils, and what a run may hand it. A method is prepared once per
database; its `score(rows, out)` writes a chunk's (B, N) float32 scores into the evaluator's reused `out`, its
intermediates from `Buffers`, so memory stays flat in the number of queries (docs/performance.md, "Retrieval
evaluation"). Linear methods also expose their composed query vectors, for FAISS."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recon_score.errors import InputError
from retrieval.choices import from_text
from retrieval.errors import MethodUnavailableError

if TYPE_CHECKING:  # a bundle's methods run on numpy: importing this module loads neither torch nor PIL
    from PIL import Image
    from torch import Tensor

TextEncoder = Callable[[list[str]], "Tensor"]  # texts -> (n, D) float32, L2-normalised
Captioner = Callable[[list["Image.Image"]], list[str]]  # reference images -> one caption each
Rewriter = Callable[[list[str], list[str]], list[str]]  # (captions, modifier texts) -> target descriptions


@dataclass
class Resources:
    """Everything beyond the three feature matrices that some method needs. All optional; a method that lacks
    something raises MethodUnavailableError naming it. The BASIC fields are the bundle keys of the same names
    (docs/retrieval.md, "Bundle format")."""

    texts: Sequence[str] | None = None  # each query's modifier text
    reference_keys: Sequence[str] | None = None  # per query, its reference image's key (captioned once)
    load_reference: Callable[[int], Image.Image] | None = None  # global query index -> PIL image
    load_database: Callable[[int], Image.Image] | None = None  # global database index -> PIL image
    encode_texts: TextEncoder | None = None  # the run's text tower
    corpus_pos: Tensor | None = None
    corpus_pos_texts: Sequence[str] | None = None  # corpus_pos's strings (BASIC's contextualisation words)
    corpus_neg: Tensor | None = None
    image_mean: Tensor | None = None
    image_mean_source: str | None = None  # where image_mean comes from (the method's notes say it)
    text_mean: Tensor | None = None
    norm_image: Tensor | None = None
    norm_text: Tensor | None = None
    vocabulary: Tensor | None = None  # (V, D): FreeDom's textual memory, SEARLE-OTI's concepts
    vocabulary_texts: Sequence[str] | None = None
    concept_phrases: dict[str, list[str]] | None = None  # concept -> LLM phrases (SEARLE-OTI's GPT loss)
    captioner: Captioner | None = None
    rewriter: Rewriter | None = None
    checkpoints: dict[str, Path] = field(default_factory=dict)  # method name -> local checkpoint path
    encoder: Any = None  # the run's registry encoder, for methods that drive its towers (Pic2Word, SEARLE)
    # "bundle": loaded by retrieve-eval, so hints name bundle keys, not retrieve's options
    origin: str = "cli"

    def tensors(self) -> Resources:
        """These resources with every array a tensor (a bundle's are numpy), for methods written in torch."""
        from retrieval.data import as_torch, converted

        return converted(self, self._arrays(), as_torch)

    def arrays(self) -> Resources:
        """These resources with every array numpy (a run's are tensors), as a bundle holds them."""
        from retrieval.data import as_numpy, converted

        return converted(self, self._arrays(), as_numpy)

    def _arrays(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if f.type == "Tensor | None"]  # the array fields

    def reference_needs(self) -> list[str]:
        """The reference images and modifier texts, which a benchmark run has and a features bundle lacks."""
        if self.load_reference is None or self.texts is None:
            return ["the reference images and modifier texts (a benchmark run, not a features bundle)"]
        return []

    def pseudo_token_needs(self) -> list[str]:
        """What textual inversion (Pic2Word, SEARLE) needs: a text tower taking pseudo-tokens, the references."""
        needs = []
        if getattr(self.encoder, "pseudo_token_width", None) is None:
            needs.append(
                "a CLIP-style open_clip encoder whose text tower takes pseudo-tokens (run `retrieve`)"
            )
        return needs + self.reference_needs()

    def checkpoint_needs(self, method: str, release: str, *, folder: bool = False) -> list[str]:
        """What `method` lacks of its --checkpoint: `release` (how to get one) when none was given, or the given
        path when it is not a folder (`folder`) / not a file; empty when it is there."""
        path = self.checkpoints.get(method)
        if path is None:
            return [release]
        if folder and not Path(path).is_dir():
            return [f"its checkpoint folder, but {path} is not a folder"]
        if not folder and not Path(path).is_file():
            return [f"its checkpoint, but {path} is not a file"]
        return []


@dataclass
class MethodContext:
    """One database and the queries that search it."""

    query_image: Tensor  # (Q, D)
    query_text: Tensor  # (Q, D)
    database: Tensor  # (N, D)
    query_index: Tensor  # (Q,) global indices of these queries (to look up Resources.texts & co.)
    resources: Resources = field(default_factory=Resources)
    # (N,) global indices of these database items (Resources.load_database)
    database_index: Tensor | None = None

    def texts(self) -> list[str] | None:
        t = self.resources.texts
        return None if t is None else [t[i] for i in self.query_index.tolist()]

    def references_once(self) -> tuple[list[str], dict[str, int]]:
        """Each query's reference key (its global index where the resources have none) and, per distinct key in
        first-seen order, the first query row that has it: a reference shared by many queries is encoded once."""
        r = self.resources
        rows = self.query_index.tolist()
        keys = [r.reference_keys[i] if r.reference_keys is not None else str(i) for i in rows]
        first: dict[str, int] = {}
        for i, key in zip(rows, keys):
            first.setdefault(key, i)
        return keys, first


ScoreInto = Callable[[np.ndarray, np.ndarray], None]  # (rows, out): scores of rows written into out


@dataclass
class Prepared:
    """A method ready to score: `score(rows, out)` takes local query positions and writes their scores into
    `out`, a float32 numpy array of shape (len(rows), N)."""

    score: ScoreInto
    width: int  # N, the database items every row is scored against
    query_vectors: Tensor | None = None  # linear methods: scores(rows) == query_vectors[rows] @ database.T
    database: Tensor | None = None  # linear methods: the vectors they score against (MagicLens: its own)
    details: list[str] | None = None  # per query, human-readable (FreeDom's words, CIReVL's rewrite)
    notes: list[str] = field(default_factory=list)  # run-level facts for run.json (which mean was used ...)

    def scores(self, rows: np.ndarray | Tensor) -> np.ndarray:
        """The (len(rows), N) float32 scores in a new array, for one-off use (the evaluator reuses its own)."""
        rows = _rows(rows)
        out = np.empty((len(rows), self.width), dtype=np.float32)
        self.score(rows, out)
        return out


class Buffers:
    """Arrays reused from chunk to chunk, by name: a method scoring into `out` takes its (B, N) intermediates
    here, so they are allocated once per database instead of once per chunk (a chunk never has more rows than
    the first one)."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
        size = int(np.prod(shape))
        have = self._arrays.get(name)
        if have is None or have.dtype != dtype or have.size < size:
            have = self._arrays[name] = np.empty(size, dtype=dtype)
        return have[:size].reshape(shape)

    def like(self, name: str, out: np.ndarray, dtype: type = np.float32) -> np.ndarray:
        return self.get(name, out.shape, dtype)


def _rows(rows: np.ndarray | Tensor) -> np.ndarray:
    from retrieval.data import as_numpy

    return as_numpy(rows).astype(np.int64, copy=False)


class Method:
    """Base class. Subclasses set `name`, `config_cls` and implement `prepare`; `missing(resources)` lists
    what a run lacks (checked before any feature is extracted)."""

    name: str = ""
    config_cls: type = object
    # True: scores numpy arrays as well as tensors, so a bundle's evaluation loads no torch; else `evaluate`
    # hands the method tensors (EvalData.tensors, Resources.tensors)
    takes_numpy: bool = False

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.config_cls()

    def missing(self, resources: Resources) -> list[str]:
        return []

    def check(self, resources: Resources) -> None:
        missing = self.missing(resources)
        if missing:
            hint = self.bundle_hint() if resources.origin == "bundle" else self.fix_hint()
            raise MethodUnavailableError(self.name, "it needs " + "; ".join(missing), hint)

    def fix_hint(self) -> str:
        return "See `reconscore retrieve --help`."

    def bundle_hint(self) -> str:
        return "Store what it needs in the bundle (`reconscore retrieve-eval --help` lists the keys)."

    def prepare(self, ctx: MethodContext) -> Prepared:
        raise NotImplementedError(f"{type(self).__name__} does not implement prepare()")

    def describe(self) -> dict:
        cfg = dataclasses.asdict(self.config) if dataclasses.is_dataclass(self.config) else {}
        return {"name": self.name, "config": cfg}


def distinct_rows(database: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows to score and, when some rows of `database` repeat, each row's index among them (None when every
    row is distinct: then the rows are `database` itself). Rows compare by value (−0.0 equals +0.0): a 64-bit
    hash of each row's bytes finds the candidates in one pass, and equal hashes are checked byte for byte."""
    x = np.ascontiguousarray(database + database.dtype.type(0))  # -0.0 becomes +0.0: equal rows, equal bytes
    if x.shape[0] < 2 or x.size == 0:
        return database, None
    row_bytes = x.shape[1] * x.itemsize
    words = x.view(np.uint64) if row_bytes % 8 == 0 else x.view(np.uint8).astype(np.uint64)
    key = words @ _row_hash_weights(words.shape[1])  # wraps modulo 2^64
    order = np.argsort(key, kind="stable")
    new = np.r_[True, key[order][1:] != key[order][:-1]]
    if new.all():
        return database, None
    group = np.cumsum(new) - 1
    first = order[new]  # the lowest index of each group (stable sort)
    copies = order[~new]  # each row whose hash an earlier row has: is it that row's copy?
    if not np.array_equal(words[copies], words[first[group[~new]]]):  # a hash collision
        as_bytes = x.view(np.dtype((np.void, row_bytes))).ravel()
        _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
        return (database, None) if len(first) == len(x) else (x[first], inverse.ravel())
    inverse = np.empty(x.shape[0], dtype=np.int64)
    inverse[order] = group
    return x[first], inverse


def _row_hash_weights(n: int) -> np.ndarray:
    """n odd 64-bit multipliers, the same in every run (splitmix64 of 1..n; numpy.random is not loaded)."""
    z = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def dot_scores(
    vectors: np.ndarray | Tensor,
    database: np.ndarray | Tensor,
    distinct: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> ScoreInto:
    """(rows, out) -> out = vectors[rows] @ database.T, in float32. On numpy (a bundle) each distinct database
    row is scored once and its copies take that score (`distinct`: `distinct_rows(database)`, when the caller
    has it): copies of one item tie exactly by construction, wherever they sit (OpenBLAS's float32 product can
    give copies of one row different last bits, which the tie rules would read as a ranking). Tensors keep
    torch's product, written through a tensor view of `out`."""
    if not isinstance(database, np.ndarray):
        return lambda rows, out: matmul_into(vectors[rows], database.T, out)
    unique, inverse = distinct if distinct is not None else distinct_rows(database)
    if inverse is None:
        return lambda rows, out: matmul_into(vectors[rows], unique.T, out)
    buffers = Buffers()

    def score(rows: np.ndarray, out: np.ndarray) -> None:
        per_unique = matmul_into(vectors[rows], unique.T, buffers.get("unique", (len(out), len(unique))))
        np.take(per_unique, inverse, axis=1, out=out, mode="clip")  # "raise" would buffer a copy of out

    return score


def matmul_into(a: np.ndarray | Tensor, b: np.ndarray | Tensor, out: np.ndarray) -> np.ndarray:
    """`a @ b` written into the float32 array `out` by numpy's or torch's product (whichever `a` is), computed
    in place where both operands are float32 (on the CPU for torch), else computed and then rounded into it."""
    if isinstance(a, np.ndarray):
        if a.dtype == np.float32 and b.dtype == np.float32:
            np.matmul(a, b, out=out)
        else:
            np.copyto(out, a @ b, casting="same_kind")
        return out
    import torch

    if a.dtype == b.dtype == torch.float32 and a.device.type == b.device.type == "cpu":
        torch.matmul(a, b, out=torch_view(out))
    else:
        np.copyto(out, (a @ b).detach().float().cpu().numpy())
    return out


def torch_view(out: np.ndarray) -> Tensor:
    """A tensor sharing `out`'s memory, for methods that compute in torch (imports torch only then)."""
    import torch

    return torch.from_numpy(out)


def linear(query_vectors: Tensor, database: Tensor, *, details: list[str] | None = None) -> Prepared:
    """A Prepared whose scores are dot products of composed query vectors with the database."""
    return Prepared(
        score=dot_scores(query_vectors, database),
        width=database.shape[0],
        query_vectors=query_vectors,
        database=database,
        details=details,
    )


def sample_rows(t: np.ndarray | Tensor, limit: int) -> np.ndarray:
    """At most `limit` rows of `t` as float32 numpy, evenly spaced (deterministic), for statistics on large
    databases."""
    from retrieval.data import as_numpy

    x = as_numpy(t).astype(np.float32, copy=False)
    if x.shape[0] <= limit:
        return x
    return x[np.linspace(0, x.shape[0] - 1, limit).round().astype(np.int64)]


def parse_overrides(config_cls: type, values: dict[str, Any], *, method: str) -> dict[str, Any]:
    """Strings from the CLI (``--set basic.harris_lambda=0.05``) converted to the config field's type."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    out = {}
    for key, raw in values.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "(none)"
            raise InputError(
                f"method {method!r} has no hyperparameter {key!r}; its hyperparameters are: {known}"
            )
        try:
            out[key] = from_text(raw, hints[key])
        except ValueError as err:
            raise ValueError(f"{method}.{key} {err}") from None
    return out
