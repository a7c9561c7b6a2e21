"""Loaders of the meta-evaluation benchmarks (eval.meta_eval.benchmarks): each reads `DIR/<benchmark>/` in the
layout its release or hub download has and returns the tidy judgment table (preference_data.schema). Pairwise
sets (PASCAL-50S, FOIL) add the columns `pair` (pair id), `category` and `draw` (the reference draw); every row
of a pair carries judgment 1.0 for the caption people preferred and 0.0 for the other.

A missing file is a `MissingBenchmarkFile` naming it and where to get it (the suite skips the benchmark with
that reason); a malformed row is a `BenchmarkFormatError` naming the file and the row.
"""

from __future__ import annotations

import ast
import json
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from preference_data import PreferenceFormatError
from preference_data.schema import make_table, normalize_space
from recon_score.errors import InputError, ReconScoreError

PASCAL_CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}  # pair_pascal.mat `category`
PASCAL_REFS = 48  # references per pair the consensus triplets use
PASCAL_DRAWS, PASCAL_DRAW_REFS = 5, 5  # PAC-S: 5 of the 48 references, accuracy averaged over 5 draws
PASCAL_TIE_SEED = 42  # Polos' loader: Python's random.seed(42) breaks vote ties
HUB_COLUMNS = (
    "image_bytes",
)  # hub sets: each row's encoded image (shared per image), decoded for image metrics
LONGCAP_PERSPECTIVES = {"desc": "descriptiveness", "rel": "relevance", "flu": "fluency"}


class MissingBenchmarkFile(ReconScoreError):
    """A benchmark file is absent: names it and where it comes from."""


class BenchmarkFormatError(InputError):
    """A benchmark file does not have its published layout: names the file and the row."""


def require(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise MissingBenchmarkFile(f"{path} not found (get it from {source})")
    return path


def _bad(path: Path, row: int | str | None, message: str) -> BenchmarkFormatError:
    where = f"{path}: row {row}" if row is not None else str(path)
    return BenchmarkFormatError(f"{where}: {message}")


def _row(image, candidate, refs, judgment, kind, source, **extra) -> dict:
    return {
        "image": str(image),
        "candidate": normalize_space(candidate),
        "references": [normalize_space(r) for r in refs],
        "judgment": float(judgment),
        "judgment_kind": kind,
        "rater": extra.pop("rater", None),
        "model": extra.pop("model", None),
        "candidate_id": extra.pop("candidate_id", None),
        "source": source,
        **extra,
    }


def _table(rows: list[dict], *, fmt: str, path: Path, notes: list[str], extra: tuple[str, ...] = ()):
    if not rows:
        raise _bad(path, None, "no rows")
    df = make_table(rows, fmt=fmt, path=path, notes=notes)
    for col in extra:
        df[col] = [r[col] for r in rows]
    return df


# -- Flickr8K and THumB: the existing loaders of preference_data ---------------------------------------------------
def _preference(loader, folder: Path, names: tuple[str, str], source: str) -> pd.DataFrame:
    annotations, references = (require(folder, n, source) for n in names)
    try:
        return loader(annotations, references)
    except PreferenceFormatError as err:
        raise BenchmarkFormatError(str(err)) from err


def load_flickr8k_expert(folder: Path, variant: str = "default") -> pd.DataFrame:
    from preference_data import load_flickr8k_expert as load

    names = ("ExpertAnnotations.txt", "Flickr8k.token.txt")
    return _preference(load, folder, names, "the Flickr8K text release, Flickr8k_text.zip")


def load_flickr8k_cf(folder: Path, variant: str = "default") -> pd.DataFrame:
    from preference_data import load_flickr8k_crowdflower as load

    names = ("CrowdFlowerAnnotations.txt", "Flickr8k.token.txt")
    return _preference(load, folder, names, "the Flickr8K text release, Flickr8k_text.zip")


def load_thumb(folder: Path, variant: str = "default") -> pd.DataFrame:
    from preference_data import load_thumb as load

    names = ("mscoco_THumB-1.0.jsonl", "mscoco_references.json")
    return _preference(load, folder, names, "github.com/jungokasai/THumB, folder mscoco/")


# -- CSVs of (mt, refs, score, imgid): Composite (processed), Polaris (csv variant) ---------------------------------
def _refs_value(path: Path, row: int, value) -> list[str]:
    """A refs cell: a list (parquet) or the text of a Python/JSON list of strings (the CSVs). Never eval'd:
    `ast.literal_eval` reads literals only."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise _bad(path, row, f"refs {value[:60]!r} is not a list of strings") from None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(r, str) for r in value):
        raise _bad(path, row, "refs must be a list of strings")
    return list(value)


def _score(path: Path, row: int, value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise _bad(path, row, f"score {value!r} is not a number") from None
    if not np.isfinite(out):
        raise _bad(path, row, f"score {value!r} is not a finite number")
    return out


def _text(path: Path, row: int, value, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(path, row, f"{what} is missing or empty")
    return value


def read_mt_csv(path: Path, *, fmt: str, image_col: str = "imgid") -> pd.DataFrame:
    """A CSV with columns mt, refs, score and `image_col` (one row per judged caption; rows are numbered from 1
    after the header)."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise _bad(path, None, f"not a readable CSV ({err})") from None
    missing = [c for c in ("mt", "refs", "score", image_col) if c not in df.columns]
    if missing:
        raise _bad(
            path, None, f"missing column(s) {', '.join(missing)} (expected mt, refs, score, {image_col})"
        )
    rows = []
    for i, rec in enumerate(df.to_dict("records"), start=1):
        rows.append(
            _row(
                _text(path, i, rec[image_col], image_col),
                _text(path, i, rec["mt"], "mt"),
                _refs_value(path, i, rec["refs"]),
                _score(path, i, rec["score"]),
                "score",
                f"{path.name}:{i + 1}",
                candidate_id=str(i),
            )
        )
    return _table(rows, fmt=fmt, path=path, notes=[f"{len(rows)} rows of {path.name}"])


def load_composite(folder: Path, variant: str = "processed") -> pd.DataFrame:
    path = require(
        folder, "composite.csv", "the Polos repository's processed Composite CSV, or hub yuwd/Composite"
    )
    return read_mt_csv(path, fmt="composite")


# -- hub parquet shards: Polaris, Nebula, LongCap-Arena ---------------------------------------------------------------
def parquet_split(folder: Path, split: str, source: str) -> tuple[list[Path], object]:
    """The `datasets` Dataset of `split` from a hub snapshot's shards `data/<split>-*.parquet`."""
    shards = sorted((folder / "data").glob(f"{split}-*.parquet"))
    if not shards:
        raise MissingBenchmarkFile(
            f"{folder / 'data'}/{split}-*.parquet not found (get it with: hf download {source} "
            f"--repo-type dataset --local-dir {folder})"
        )
    from datasets import Dataset, concatenate_datasets

    try:
        parts = [Dataset.from_parquet(str(p), keep_in_memory=True) for p in shards]
    except Exception as err:  # pyarrow's errors have no common base besides Exception
        raise _bad(shards[0], None, f"not a readable parquet shard ({type(err).__name__}: {err})") from None
    return shards, concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def _image_of(value, seen: dict[str, bytes]) -> tuple[str, bytes | None]:
    """The `datasets` Image feature, read undecoded: (its id, its bytes). The id is the hub's `path` where it kept
    one, else a digest of the bytes; rows showing the same image share one bytes object (`seen`), so a set's
    images are held once however many rows judge them."""
    import hashlib

    if not isinstance(value, dict):
        return str(value), None
    data = value.get("bytes")
    key = str(value.get("path") or (hashlib.sha1(data).hexdigest()[:16] if data else ""))
    if data is not None:
        data = seen.setdefault(key, data)
    return key, data


def _hub_rows(shards, ds, *, cand: str, image: str, name_col: str | None, fmt: str, **extra) -> list[dict]:
    from datasets import Image

    needed = [cand, "refs", "human_score", image, *([name_col] if name_col else [])]
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise _bad(shards[0], None, f"missing feature(s) {', '.join(missing)} (the dataset card's: {needed})")
    if isinstance(ds.features[image], Image):
        ds = ds.cast_column(image, Image(decode=False))  # bytes kept, decoded only for an image metric
    rows, seen = [], {}
    path = shards[0].parent
    for i, rec in enumerate(ds):
        key, data = _image_of(rec[image], seen)
        rows.append(
            _row(
                (rec[name_col] if name_col else None) or key or f"{fmt}:{i}",
                _text(path, i, rec[cand], cand),
                _refs_value(path, i, rec["refs"]),
                _score(path, i, rec["human_score"]),
                "score",
                f"{path.name}/{fmt} row {i}",
                candidate_id=str(i),
                image_bytes=data,
                **extra,
            )
        )
    return rows


def load_polaris(folder: Path, variant: str = "parquet") -> pd.DataFrame:
    if variant == "csv":
        return read_mt_csv(require(folder, "polaris_test.csv", "hub yuwd/Polaris"), fmt="polaris")
    shards, ds = parquet_split(folder, "test", "yuwd/Polaris")
    rows = _hub_rows(shards, ds, cand="cand", image="img", name_col=None, fmt="polaris")
    notes = [f"{len(rows)} test rows, {len(shards)} shard(s)"]
    return _table(rows, fmt="polaris", path=shards[0], notes=notes, extra=HUB_COLUMNS)


def load_nebula(folder: Path, variant: str = "original") -> pd.DataFrame:
    shards, ds = parquet_split(folder, "test", "Ka2ukiMatsuda/Nebula")
    rows = _hub_rows(shards, ds, cand="mt", image="image", name_col="file_name", fmt="nebula")
    notes = [f"{len(rows)} test rows, {len(shards)} shard(s)"]
    if variant == "spica":
        notes.append(_apply_spica(folder / "spica", rows))
    return _table(rows, fmt="nebula", path=shards[0], notes=notes, extra=HUB_COLUMNS)


def _apply_spica(folder: Path, rows: list[dict]) -> str:
    """Replace human scores with Spica's corrections, matched on (file_name, mt)."""
    shards, ds = parquet_split(folder, "test", "hiranohachiman/Spica")
    for col in ("file_name", "mt", "human_score"):
        if col not in ds.column_names:
            raise _bad(shards[0], None, f"missing feature {col!r} (Spica: file_name, mt, human_score)")
    fixed = {}
    for i, rec in enumerate(ds.select_columns(["file_name", "mt", "human_score"])):
        fixed[(rec["file_name"], normalize_space(rec["mt"]))] = _score(shards[0], i, rec["human_score"])
    n = 0
    for r in rows:
        key = (r["image"], r["candidate"])
        if key in fixed:
            n += r["judgment"] != fixed[key]
            r["judgment"] = fixed[key]
    return f"Spica corrections: {n} of {len(rows)} human scores changed"


def load_longcaparena(folder: Path, variant: str = "default") -> pd.DataFrame:
    rows, first = [], None
    for short, name in LONGCAP_PERSPECTIVES.items():
        shards, ds = parquet_split(folder, f"dci_test.{short}", "Ka2ukiMatsuda/LongCap-Arena")
        first = first or shards[0]
        part = _hub_rows(shards, ds, cand="mt", image="image", name_col=None, fmt=f"dci_test.{short}")
        rows += [{**r, "category": name} for r in part]
    notes = [f"{len(rows)} rows over {len(LONGCAP_PERSPECTIVES)} perspectives"]
    return _table(rows, fmt="longcaparena", path=first, notes=notes, extra=("category", *HUB_COLUMNS))


# -- PASCAL-50S ----------------------------------------------------------------------------------------------------
def _loadmat(path: Path, keys: tuple[str, ...]) -> dict:
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path))
    except (ValueError, TypeError, OSError, NotImplementedError) as err:
        raise _bad(path, None, f"not a MATLAB file scipy.io.loadmat reads ({err})") from None
    missing = [k for k in keys if k not in mat]
    if missing:
        raise _bad(path, None, f"missing variable(s) {', '.join(missing)}")
    return mat


def _mat_text(path: Path, row: int, value, what: str) -> str:
    """A MATLAB string as loadmat gives it: an array holding one str (possibly nested in 1x1 cells)."""
    while isinstance(value, np.ndarray):
        if value.size != 1:
            raise _bad(path, row, f"{what} is not one string")
        value = value.flat[0]
    if not isinstance(value, str) or not value.strip():
        raise _bad(path, row, f"{what} is missing or empty")
    return value.strip()


def read_pascal_pairs(folder: Path) -> list[dict]:
    """pair_pascal.mat: 4,000 pairs (image, caption A, caption B, category HC/HI/HM/MM)."""
    path = require(folder, "pair_pascal.mat", "vrama91/cider, data/pair_pascal.mat")
    mat = _loadmat(path, ("new_input", "category"))
    pairs, cats = mat["new_input"].ravel(), mat["category"].ravel()
    if len(pairs) != len(cats):
        raise _bad(path, None, f"{len(pairs)} pairs but {len(cats)} categories")
    out = []
    for i, (rec, cat) in enumerate(zip(pairs, cats)):
        if int(cat) not in PASCAL_CATEGORIES:
            raise _bad(path, i + 1, f"category {cat} is not 1-4 (HC, HI, HM, MM)")
        if len(rec) != 3:
            raise _bad(path, i + 1, "expected the fields name, sent1, sent2")
        image, a, b = (_mat_text(path, i + 1, rec[k], w) for k, w in enumerate(("name", "sent1", "sent2")))
        out.append({"pair": i, "image": image, "a": a, "b": b, "category": PASCAL_CATEGORIES[int(cat)]})
    return out


def read_pascal_references(folder: Path) -> dict[str, list[str]]:
    """pascal50S.mat: each image's 50 sentences, in file order."""
    path = require(folder, "pascal50S.mat", "vrama91/cider, data/pascal50S.mat")
    refs = _loadmat(path, ("refs",))["refs"].ravel()
    out: dict[str, list[str]] = {}
    for i, rec in enumerate(refs):
        image = _mat_text(path, i + 1, rec[0], "image")
        out[image] = [_mat_text(path, i + 1, s, "sentence") for s in np.asarray(rec[1]).ravel()]
    return out


def read_pascal_consensus(folder: Path, n_pairs: int) -> tuple[list[list[str]], list[tuple[int, int]]]:
    """consensus_pascal.mat `triplets`: 48 per pair, each (reference, caption B, caption C, winner 1|2). Per
    pair: the 48 references, and the votes (for sent1, for sent2) counted by matching B/C text."""
    path = require(folder, "consensus_pascal.mat", "vrama91/cider, data/consensus_pascal.mat")
    triplets = _loadmat(path, ("triplets",))["triplets"].ravel()
    if len(triplets) != n_pairs * PASCAL_REFS:
        raise _bad(path, None, f"{len(triplets)} triplets; {n_pairs} pairs x {PASCAL_REFS} expected")
    refs, votes = [], []
    for p in range(n_pairs):
        r, v = [], defaultdict(int)
        for j in range(p * PASCAL_REFS, (p + 1) * PASCAL_REFS):
            t = triplets[j]
            a, b, c = (_mat_text(path, j + 1, t[k], "triplet sentence") for k in range(3))
            d = int(np.asarray(t[3]).ravel()[0])
            if d not in (1, 2):
                raise _bad(path, j + 1, f"winner {d} is not 1 or 2")
            r.append(a)
            v[b if d == 1 else c] += 1
        refs.append(r)
        votes.append(v)
    return refs, votes


def load_pascal50s(folder: Path, variant: str = "5-refs") -> pd.DataFrame:
    pairs = read_pascal_pairs(folder)
    read_pascal_references(folder)  # the release's own file: a missing or broken one is named here
    refs, votes = read_pascal_consensus(folder, len(pairs))
    rng = random.Random(PASCAL_TIE_SEED)
    rows = []
    for pair, pair_refs, v in zip(pairs, refs, votes):
        va, vb = v.get(pair["a"], 0), v.get(pair["b"], 0)
        label_a = 1.0 if va > vb + rng.random() - 0.5 else 0.0  # ties broken at random, as Polos' loader does
        draws = _pascal_draws(pair["pair"], pair_refs, variant)
        for d, drawn in enumerate(draws):
            for side, text, y in (("a", pair["a"], label_a), ("b", pair["b"], 1.0 - label_a)):
                src = f"pair_pascal.mat:{pair['pair'] + 1}"
                rows.append(
                    _row(
                        pair["image"],
                        text,
                        drawn,
                        y,
                        "score",
                        src,
                        candidate_id=f"{pair['pair']}{side}",
                        pair=pair["pair"],
                        category=pair["category"],
                        draw=d,
                    )
                )
    notes = [f"{len(pairs)} pairs; references: {_pascal_rule(variant)}"]
    return _table(
        rows,
        fmt="pascal50s",
        path=folder / "pair_pascal.mat",
        notes=notes,
        extra=("pair", "category", "draw"),
    )


def _pascal_draws(pair: int, refs: list[str], variant: str) -> list[list[str]]:
    if variant == "48-refs":
        return [refs]
    rng = np.random.default_rng(pair)  # per pair: the draws do not depend on which pairs are loaded
    return [
        [refs[k] for k in sorted(rng.choice(len(refs), PASCAL_DRAW_REFS, replace=False))]
        for _ in range(PASCAL_DRAWS)
    ]


def _pascal_rule(variant: str) -> str:
    if variant == "48-refs":
        return "the 48 of the consensus triplets"
    return f"{PASCAL_DRAW_REFS} of the 48 drawn at random per pair, {PASCAL_DRAWS} draws averaged"


# -- FOIL ----------------------------------------------------------------------------------------------------------
def _json(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise _bad(path, None, f"not valid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise _bad(path, None, "expected an object with an 'annotations' list (the COCO layout)")
    return data


def _coco_captions(path: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for i, ann in enumerate(_json(path)["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann:
            raise _bad(path, f"annotations[{i}]", "missing image_id")
        out[ann["image_id"]].append(_text(path, f"annotations[{i}]", ann.get("caption"), "caption"))
    return out


def load_foil(folder: Path, variant: str = "4-refs") -> pd.DataFrame:
    path = require(folder, "foilv1.0_test_2017.json", "FOIL-it, foilv1.0_test_2017.json")
    coco = _coco_captions(
        require(folder, "captions_val2014.json", "COCO 2014 annotations, captions_val2014.json")
    )
    data = _json(path)
    files = {img.get("id"): img.get("file_name") for img in data.get("images", []) if isinstance(img, dict)}
    groups: dict = defaultdict(lambda: {"orig": [], "foil": []})
    for i, ann in enumerate(data["annotations"]):
        where = f"annotations[{i}]"
        if not isinstance(ann, dict) or not isinstance(ann.get("foil"), bool) or "id" not in ann:
            raise _bad(path, where, "expected id, image_id, caption and a true/false 'foil'")
        if ann.get("image_id") not in coco:
            raise _bad(
                path, where, f"image_id {ann.get('image_id')!r} has no captions in captions_val2014.json"
            )
        _text(path, where, ann.get("caption"), "caption")
        groups[ann["id"]]["foil" if ann["foil"] else "orig"].append(ann)
    n_refs = 1 if variant == "1-ref" else 4
    rows, pair = [], 0
    for ann_id, g in groups.items():
        if len(g["orig"]) != 1:
            raise _bad(path, f"id {ann_id}", f"{len(g['orig'])} correct captions (expected 1)")
        orig = g["orig"][0]
        refs = [r for r in coco[orig["image_id"]] if r != orig["caption"]][:n_refs]
        image = files.get(orig["image_id"]) or str(orig["image_id"])
        for foil in g["foil"]:
            for text, y, side in ((orig["caption"], 1.0, "orig"), (foil["caption"], 0.0, "foil")):
                rows.append(
                    _row(
                        image,
                        text,
                        refs,
                        y,
                        "score",
                        f"{path.name}:id {ann_id}",
                        candidate_id=f"{ann_id}/{side}",
                        pair=pair,
                        category="all",
                        draw=0,
                    )
                )
            pair += 1
    notes = [f"{pair} (correct, foil) pairs; {n_refs} reference(s) per image"]
    return _table(rows, fmt="foil", path=path, notes=notes, extra=("pair", "category", "draw"))
