"""ReconScore as a pycocoevalcap scorer: `compute_score(gts, res)` beside Bleu, Meteor, Rouge and Cider.

The contract (ids, order, how images are found by id) is in docs/python-api.md, "pycocoevalcap".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from pathlib import Path

from recon_score.errors import InputError, ReconScoreWarning
from recon_score.images import IMAGE_SUFFIXES, resolve_under
from recon_score.presets import ReconPreset
from recon_score.scorer import ReconScorer


class ReconScoreCOCO:
    """pycocoevalcap-style ReconScore scorer over `images`, a folder (each id's file named by `pattern`) or a
    mapping id -> image, with `scorer` or one built by `ReconScorer.from_preset(preset, **scorer_kwargs)`. An
    unusable item scores NaN and is named in `errors` (docs/python-api.md, "pycocoevalcap")."""

    def __init__(
        self,
        images: str | Path | Mapping,
        *,
        pattern: str = "{id}",
        preset: str | ReconPreset = "paper",
        scorer: ReconScorer | None = None,
        **scorer_kwargs,
    ):
        if not isinstance(images, Mapping) and not Path(images).is_dir():
            raise InputError(f"images folder {images} not found (pass a folder or a mapping id -> path)")
        self.images, self.pattern = images, pattern
        self.scorer = scorer or ReconScorer.from_preset(preset, **scorer_kwargs)
        self.errors: dict = {}

    def method(self) -> str:
        return "ReconScore"

    def _image(self, key):
        if isinstance(self.images, Mapping):
            if key not in self.images:
                raise InputError(f"id {key!r}: no image in the id -> path mapping")
            return self.images[key]
        try:
            name = self.pattern.format(id=key)
        except (KeyError, IndexError, ValueError) as err:
            raise InputError(f"id {key!r}: pattern {self.pattern!r} cannot name its file ({err})") from None
        root = Path(self.images)
        if Path(name).suffix.lower() in IMAGE_SUFFIXES:
            path = resolve_under(root, name)
            if not path.is_file():
                raise InputError(f"id {key!r}: {path} not found")
            return path
        found = [p for p in (resolve_under(root, name + s) for s in _any_case(IMAGE_SUFFIXES)) if p.is_file()]
        if len({p.resolve() for p in found}) > 1:
            raise InputError(f"id {key!r}: several images match {name}.*: {', '.join(p.name for p in found)}")
        if not found:
            raise InputError(
                f"id {key!r}: no image {name}.* in {root} (extensions {', '.join(IMAGE_SUFFIXES)})"
            )
        return found[0]

    def compute_score(self, gts: dict, res: dict) -> tuple[float, list[float]]:
        """(mean ReconScore over the scored ids, [ReconScore per id in gts order]); NaN for failed ids."""
        if gts.keys() != res.keys():  # pycocoevalcap's scorers assert the same
            only_g, only_r = (
                sorted(map(str, gts.keys() - res.keys())),
                sorted(map(str, res.keys() - gts.keys())),
            )
            raise ValueError(
                f"gts and res must have the same ids; only in gts: {only_g[:5]}, only in res: {only_r[:5]}"
            )
        ids = list(gts.keys())
        self.errors = {}
        todo: list[tuple[int, object, str]] = []
        no_image = 0
        for i, key in enumerate(ids):
            hypo = res[key]
            if not isinstance(hypo, list) or len(hypo) != 1:
                self.errors[key] = f"res[{key!r}] must be a list with one caption, got {hypo!r:.80}"
                continue
            try:
                todo.append((i, self._image(key), hypo[0]))
            except InputError as err:
                self.errors[key] = str(err)
                no_image += 1
        if ids and no_image == len(ids) and not isinstance(self.images, Mapping):
            first = next(iter(self.errors.values()))
            raise InputError(f"no id has an image in {self.images} (pattern {self.pattern!r}): {first}")
        per_item = [math.nan] * len(ids)
        if todo:
            results = self.scorer.score([t[1] for t in todo], [t[2] for t in todo])
            for (i, _, _), r in zip(todo, results):
                if r.ok:
                    per_item[i] = float(r.recon_score)
                else:
                    self.errors[ids[i]] = r.error
        if self.errors:
            shown = "; ".join(f"{k}: {v}" for k, v in list(self.errors.items())[:3])
            more = f" (+{len(self.errors) - 3} more)" if len(self.errors) > 3 else ""
            warnings.warn(
                f"ReconScore: {len(self.errors)} of {len(ids)} ids not scored (NaN): {shown}{more}",
                ReconScoreWarning,
                stacklevel=2,
            )
        ok = [v for v in per_item if not math.isnan(v)]
        return (sum(ok) / len(ok) if ok else math.nan), per_item


def _any_case(suffixes) -> list[str]:
    return list(dict.fromkeys([*suffixes, *(s.upper() for s in suffixes)]))
