"""What every metric takes (a `CaptionBatch`: aligned rows of candidate, references, image) and returns (a
`MetricOutput`: one float per row, NaN where the row cannot be scored)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recon_score.errors import InputError, ReconScoreError

ImageSource = Any  # PIL.Image.Image | str | Path | Exception (an image that could not be resolved) | None


@dataclass
class CaptionBatch:
    """Aligned rows to score; an empty `references[i]` or a None/exception `images[i]` makes that row NaN for the
    metrics that need it. Expensive steps (PTB tokens, images, CLIP embeddings) are memoised on the batch so
    metrics share them."""

    candidates: list[str | None]
    references: list[list[str]] | None = None
    images: list[ImageSource] | None = None
    # how 8-bit files become RGB (recon_score.presets.reader_for(preset)); None: the command's preset decides
    # (compute_metrics), else recon_score.images.DEFAULT_READER
    image_reader: str | None = None
    # what every batch of one run shares (the meta-evaluation suite hands one dict to all its benchmarks), one
    # table per step (`run_table`): text -> PTB tokens; per encoder, text -> embedding and image -> embedding. A
    # text or image two batches share is tokenised or encoded once; None: this batch alone
    shared: dict | None = field(default=None, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        n = len(self.candidates)
        for name in ("references", "images"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} rows, candidates has {n}")

    def __len__(self) -> int:
        return len(self.candidates)

    def memo(self, key, compute: Callable[[], Any]):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def run_table(self, key) -> dict:
        """The run-wide table of one step (`shared[key]`; the batch's own when it shares nothing)."""
        shared = self.shared if self.shared is not None else self._memo.setdefault("shared", {})
        return shared.setdefault(key, {})

    def tokenized(self) -> tuple[list[str | None], list[list[str]]]:
        """PTB-tokenised candidates and references (pycocoevalcap's tokenisation), one JVM pass for the batch."""

        def run():
            from eval.metrics.ptb import ptb_tokenize

            refs = self.references or [[] for _ in self.candidates]
            texts = [c for c in self.candidates if c is not None] + [r for rs in refs for r in rs]
            table = self.run_table("ptb")
            missing = list(dict.fromkeys(t for t in texts if t not in table))
            table.update(zip(missing, ptb_tokenize(missing)))
            cands = [None if c is None else table[c] for c in self.candidates]
            return cands, [[table[r] for r in rs] for rs in refs]

        return self.memo("ptb", run)

    def loaded_images(self, reader: str | None = None) -> list:
        """Each distinct image loaded once (per reader; default the batch's `image_reader`): a PIL image, or the
        InputError explaining why not."""
        from recon_score.images import DEFAULT_READER

        reader = reader or self.image_reader or DEFAULT_READER

        def run():
            from recon_score.images import load_image

            if self.images is None:
                raise ReconScoreError("no images were given for this batch")
            cache: dict = {}
            out = []
            for src in self.images:
                key = src if isinstance(src, (str, Path)) else id(src)
                if key not in cache:
                    if src is None:
                        cache[key] = InputError("no image for this row")
                    elif isinstance(src, Exception):
                        cache[key] = src
                    else:
                        try:
                            cache[key] = load_image(src, reader=reader)
                        except InputError as err:
                            cache[key] = err
                out.append(cache[key])
            return out

        return self.memo(("images", reader), run)

    def image_keys(self, reader: str | None = None) -> list:
        """Per row, what names its image across the batches of a run: (file, reader) for a path, read only if
        never seen; the decoded pixels' digest for an in-memory image; None where there is no image."""
        from recon_score.images import DEFAULT_READER, image_digest

        reader = reader or self.image_reader or DEFAULT_READER

        def run():
            loaded, digests, keys = None, {}, []
            for i, src in enumerate(self.images or []):
                if src is None or isinstance(src, Exception):
                    keys.append(None)
                elif isinstance(src, (str, Path)):
                    keys.append(("file", str(Path(src).resolve()), reader))
                else:
                    loaded = loaded or self.loaded_images(reader)
                    img = loaded[i]
                    if not isinstance(img, Exception) and id(img) not in digests:
                        digests[id(img)] = ("pixels", image_digest(img))
                    keys.append(None if isinstance(img, Exception) else digests[id(img)])
            return keys

        return self.memo(("image_keys", reader), run)

    def reference_rows(self) -> np.ndarray:
        """Indices of rows a reference metric can score: a candidate and at least one reference."""
        refs = self.references or [[] for _ in self.candidates]
        return np.array(
            [i for i, (c, r) in enumerate(zip(self.candidates, refs)) if c is not None and r], dtype=int
        )


@dataclass
class MetricOutput:
    values: np.ndarray  # (n,) float64, NaN where not scored
    extra: dict[str, list] = field(default_factory=dict)  # per-row columns kept next to the values
    info: dict = field(default_factory=dict)  # run-level facts for run.json


class Metric:
    """Base class: subclasses implement `score`. `config()` is what run.json records; `close()` frees processes."""

    @property
    def info(self):
        """The metric's registry entry (eval.metrics.registry)."""
        from eval.metrics.registry import entry_of

        return entry_of(type(self))

    def score(self, batch: CaptionBatch) -> MetricOutput:
        raise NotImplementedError(f"{type(self).__name__} does not implement score()")

    def config(self) -> dict:
        return {}

    def close(self) -> None:
        """Nothing to free by default."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def image_sources(root: Path, images: Sequence[str]) -> list[ImageSource]:
    """Each row's image name resolved under `root` (once per distinct name), or the InputError saying why it
    cannot be (it leaves the root, say): that row's image metrics are NaN and their error says why."""
    from recon_score.images import resolve_under

    resolved: dict = {}
    for image in dict.fromkeys(images):
        try:
            resolved[image] = resolve_under(root, image)
        except InputError as err:
            resolved[image] = err
    return [resolved[i] for i in images]


def scatter(n: int, rows: Sequence[int], values: Sequence[float]) -> np.ndarray:
    """(n,) NaN array with `values` at `rows`."""
    out = np.full(n, np.nan)
    if len(rows):
        out[np.asarray(rows, dtype=int)] = np.asarray(values, dtype=float)
    return out


def unique_pairs(
    cands: Sequence[str], refs: Sequence[Sequence[str]]
) -> tuple[list[tuple[str, tuple]], np.ndarray]:
    """Distinct (candidate, references) pairs and, for each input, the index of its pair. Per-caption BLEU, ROUGE,
    METEOR and SPICE depend on nothing but the pair, so duplicates (Flickr8K-Expert's 3 raters) are scored once."""
    index: dict[tuple[str, tuple], int] = {}
    inverse = np.empty(len(cands), dtype=int)
    for i, (c, r) in enumerate(zip(cands, refs)):
        inverse[i] = index.setdefault((c, tuple(r)), len(index))
    return list(index), inverse


def image_caption_pairs(
    images: Sequence, captions: Sequence[str | None], *, skip_failed_images: bool
) -> tuple[list[tuple[Any, str]], np.ndarray, list[str | None]]:
    """Distinct (loaded image, caption) pairs, each row's pair index (-1: not scored) and why a row was skipped:
    a row repeated across a batch is scored once. A failed image is skipped only where the metric cannot report
    it itself."""
    index: dict[tuple[int, str], int] = {}
    pairs, inverse = [], np.full(len(captions), -1)
    errors: list[str | None] = [None] * len(captions)
    for i, (img, cap) in enumerate(zip(images, captions)):
        if cap is None or (skip_failed_images and isinstance(img, Exception)):
            errors[i] = "no caption" if cap is None else str(img)
            continue
        inverse[i] = index.setdefault((id(img), cap), len(pairs))
        if inverse[i] == len(pairs):
            pairs.append((img, cap))
    return pairs, inverse, errors
