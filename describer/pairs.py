"""Preference pairs from scored describe candidates for DPO (`reconscore pairs`), as CycleReward trained its
captioner on reconstruction similarity. See docs/training.md, "Pairs": the policies, the paired-t seed-noise
filter, the TRL format and how unusable input lines are reported.
"""

from __future__ import annotations

import io
import json
import logging
import math
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from recon_score.atomic_io import atomic_write_bytes, png_bytes
from recon_score.errors import InputError, ReconScoreError
from recon_score.images import DEFAULT_READER, READERS, load_image, resolve_under
from recon_score.run_engine import RunFolder, RunSpec, load_record
from recon_score.run_outputs import PAIRS_DATA, RECORD, candidate_lines, candidates_table, output_file

log = logging.getLogger(__name__)

POLICIES = ("best-worst", "best-vs-each", "all")
SCORES = ("selection_score", "recon_score")
NOISE = ("paired", "off")
PAIRED_T_LEVEL = 0.90  # one-sided level of the paired t test on the per-seed differences

# why a candidate pair is not in the dataset (run.json "dropped"; the CLI prints them)
TIE = "equal scores"
BELOW_MARGIN = "margin below --min-margin"
WITHIN_NOISE = "paired per-seed differences within the seed noise (paired t below its critical value)"
UNPAIRED = "per-seed scores of different lengths (not rendered with the same seeds)"
DUPLICATE = "same caption text"


@dataclass
class PairsJob:
    runs: list[Path]  # describe runs (candidates.jsonl) or scored tables (.jsonl: image, caption, score)
    out: Path
    policy: str = "best-worst"
    score: str = "selection_score"  # the column that ranks candidates
    min_margin: float = 0.0
    noise: str = "paired"  # the seed-noise filter: a paired t test on the per-seed differences, or "off"
    images_root: Path | None = None  # for scored tables whose image paths are relative to another folder
    argv: list[str] = field(default_factory=list)


# the per-seed values of each ranking score: the noise filter tests the score that orders the pair, never
# another one (the selection renders' seeds say nothing of the held-out render's luck)
PER_SEED = {"selection_score": "selection_per_seed", "recon_score": "recon_score_per_seed"}


@dataclass
class PairsSummary:
    noise: str  # the seed-noise filter asked for (PairsJob.noise)
    path: Path | None = None
    pairs: int = 0
    images: int = 0  # images with at least one pair
    candidates: int = 0  # scored candidates considered
    with_noise: int = 0  # candidates with a seed-noise estimate (K >= 2 per-seed scores)
    compared: int = 0  # kept pairs with a held-out recon_score on both sides
    agree: int = 0  # ... that the held-out scores order the same way
    # reason -> number of candidate pairs dropped / of candidates or images left out before pairing
    dropped: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # one line per unreadable input (file:line or image)
    record: dict = field(default_factory=dict)  # run.json, when pairs were written
    score: str = "selection_score"  # the column that ranks candidates (PairsJob.score)

    @property
    def held_out_agreement(self) -> dict | None:
        """Kept pairs whose held-out recon_score orders them the same way."""
        return {"pairs": self.compared, "agree": self.agree} if self.compared else None

    @property
    def noise_filter(self) -> str:
        """What the seed-noise filter did, in words."""
        if self.noise == "off":
            return "off (--noise off)"
        column = PER_SEED[self.score]
        if not self.with_noise:
            how = (
                "run describe with --selection-seeds K >= 2"
                if self.score == "selection_score"
                else "a describe run's held-out recon_score is one render; a score table has it with --seeds K"
            )
            return f"not applied: no candidate has per-seed {self.score} ({column}; {how})"
        return (
            f"paired t of the per-seed differences of {self.score} ({column}) must exceed Student's t at "
            f"{PAIRED_T_LEVEL:.0%} one-sided, K - 1 degrees of freedom ({self.with_noise}/{self.candidates} "
            "candidates have per-seed scores)"
        )


@dataclass
class Candidate:
    image_id: str
    image: str
    index: int
    caption: str
    score: float
    per_seed: list[float] | None
    recon_score: float | None  # the row's recon_score: held-out agreement, chosen/rejected_recon_score

    def noise(self, kind: str) -> float | None:
        """The sample std of this caption's per-seed scores (a descriptive column; the filter uses the paired
        differences): None with fewer than two seeds or with the filter off."""
        if kind == "off" or not self.per_seed or len(self.per_seed) < 2:
            return None
        return statistics.stdev(self.per_seed)


@dataclass
class Source:
    """One input: its candidates grouped by image, and what the rows need from its run.json."""

    path: Path
    groups: dict[str, list[Candidate]]
    images_root: Path | None
    prompt: str | None
    selection_seeds: list[int] | None
    eval_seed: int | None
    bands: tuple[int, ...] | None
    image_reader: str  # as the describe run read its images (run.json; older runs: the default)
    note: str | None


def _read_source(path: Path, job: PairsJob, skipped: Counter, failures: list[str]) -> Source:
    """A describe run folder (run.json + candidates.jsonl) or a scored table (.jsonl) with image, caption and
    the score column. Every line is read; a line that is not a usable candidate is a failure naming it."""
    # a describe run's record ({} for a table); a broken one is this run's error
    run = load_record(path, missing_ok=True) if path.is_dir() else {}
    table = candidates_table(path)
    fields = _run_fields(output_file(path, RECORD), run)
    recorded_root = fields.pop("images_root")
    root = job.images_root or (Path(recorded_root) if recorded_root else table.parent)
    groups: dict[str, list[Candidate]] = {}
    for where, row, why in candidate_lines(table):
        if why is not None:
            failures.append(f"{where}: {why}")
            continue
        try:
            cand = _candidate(row, job.score, skipped)
        except ValueError as err:
            failures.append(f"{where}: {err}")
            continue
        if cand is not None:
            if "index" not in row:  # a scored table without indexes: the image's rows in table order
                cand.index = len(groups.get(cand.image_id, []))
            groups.setdefault(cand.image_id, []).append(cand)
    return Source(path=path, groups=groups, images_root=root, **fields)


def _run_fields(where: Path, run: dict) -> dict:
    """What pairs needs from a describe run's run.json (images_root and Source's fields), each checked for its
    type (InputError naming the file and the field)."""

    def bad(name: str, want: str, value) -> InputError:
        return InputError(f"{where}: field {name!r} must be {want}, got {_shown(value)}")

    for name in ("selection", "preset"):
        if run.get(name) is not None and not isinstance(run[name], dict):
            raise bad(name, "an object", run[name])
    out = {}
    for name, want, valid in (
        ("images_root", "a string", lambda v: isinstance(v, str)),
        ("preset.prompt", "a string", lambda v: isinstance(v, str)),
        ("note", "a string", lambda v: isinstance(v, str)),
        ("selection.selection_seeds", "a list of integers", _is_int_list),
        ("bands", "a list of integers", _is_int_list),
        ("selection.eval_seed", "an integer", _is_int),
    ):
        parent, _, key = name.rpartition(".")
        value = (run.get(parent) or {}).get(key) if parent else run.get(key)
        if value is not None and not valid(value):
            raise bad(name, want, value)
        out[key] = value
    reader = run.get("image_reader", DEFAULT_READER)
    if reader not in READERS:
        raise bad("image_reader", f"one of {', '.join(READERS)}", reader)
    out["bands"] = tuple(out["bands"]) if out["bands"] else None
    out["image_reader"] = reader
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int_list(value) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value, field: str, *, optional: bool = False) -> float | None:
    """A finite score: an int or float, never a boolean, a string, NaN, infinity or an int beyond float."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field {field!r} must be a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"field {field!r} must be a finite number, got {_shown(value)}")
    return number


def _candidate(row, score: str, skipped: Counter) -> Candidate | None:
    """One row as a Candidate; None for a row skipped by design (failed generation, no score); ValueError
    naming the field for a row that cannot be used."""
    if not isinstance(row, dict):
        raise ValueError(
            f"not a candidate row (a JSON object with image, caption and {score}), got {_shown(row)}"
        )
    image = row.get("image")
    if not isinstance(image, str) or not image.strip():
        raise ValueError(f"field 'image' must be a non-empty string (the image path), got {_shown(image)}")
    if not isinstance(row.get("caption"), (str, type(None))):
        raise ValueError(f"field 'caption' must be a string, got {_shown(row.get('caption'))}")
    index = row.get("index", 0)
    if not _is_int(index):
        raise ValueError(f"field 'index' must be an integer, got {_shown(index)}")
    # one image's candidates: by `image_id`, else by `image` (never `id`: `reconscore score` gives each caption
    # its own id, UCM_1#0, which would make every caption an image of its own)
    image_id = row.get("image_id") if row.get("image_id") is not None else image
    if not isinstance(image_id, (str, int)) or isinstance(image_id, bool):
        raise ValueError(f"field 'image_id' must be a string, got {_shown(image_id)}")
    if row.get("error") or not row.get("caption"):
        skipped["candidate without a caption (generation failed)"] += 1
        return None
    if row.get(score) is None:
        skipped[f"candidate without a {score}"] += 1
        return None
    value = _number(row[score], score)
    recon = _number(row.get("recon_score"), "recon_score", optional=True)
    name = PER_SEED[score]
    per_seed = row.get(name)
    if per_seed is not None:
        if not isinstance(per_seed, list):
            raise ValueError(f"field {name!r} must be a list of numbers, got {_shown(per_seed)}")
        if any(v is None for v in per_seed):  # a failed seed render: no per-seed values for the filter
            per_seed = None
        else:
            per_seed = [_number(v, f"{name}[{i}]") for i, v in enumerate(per_seed)]
    return Candidate(
        image_id=str(image_id),
        image=image,
        index=index,
        caption=row["caption"],
        score=value,
        per_seed=per_seed,
        recon_score=recon,
    )


def candidate_pairs(cands: list[Candidate], policy: str) -> list[tuple[Candidate, Candidate]]:
    """(higher, lower) pairs of one image's candidates: best against worst, best against each other
    candidate, or every pair. Order: by score, ties by candidate index."""
    ranked = sorted(cands, key=lambda c: (-c.score, c.index))
    if len(ranked) < 2:
        return []
    if policy == "best-worst":
        return [(ranked[0], ranked[-1])]
    if policy == "best-vs-each":
        return [(ranked[0], c) for c in ranked[1:]]
    if policy == "all":
        return list(combinations(ranked, 2))
    raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")


def keep_pair(hi: Candidate, lo: Candidate, *, min_margin: float, noise: str) -> str | None:
    """None to keep the pair, else the reason it is dropped."""
    margin = hi.score - lo.score
    if hi.caption.strip() == lo.caption.strip():
        return DUPLICATE
    if margin <= 0:
        return TIE
    if margin < min_margin:
        return BELOW_MARGIN
    if noise == "off" or not hi.per_seed or not lo.per_seed or min(len(hi.per_seed), len(lo.per_seed)) < 2:
        return None
    if len(hi.per_seed) != len(lo.per_seed):
        return UNPAIRED
    t = paired_t(hi.per_seed, lo.per_seed)
    return None if t > paired_critical_value(len(hi.per_seed)) else WITHIN_NOISE


def paired_t(chosen: list[float], rejected: list[float]) -> float:
    """mean(d) / (sd(d) / sqrt(K)) of the per-seed differences d_j = chosen_j - rejected_j (same seed j):
    +inf / -inf when every difference is the same positive / non-positive number."""
    d = [a - b for a, b in zip(chosen, rejected)]
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    if sd == 0:
        return math.inf if mean > 0 else -math.inf
    return mean / (sd / math.sqrt(len(d)))


def paired_critical_value(k: int, level: float = PAIRED_T_LEVEL) -> float:
    """Student's t quantile at `level` (one-sided) with K - 1 degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(level, k - 1))


def _messages(role: str, text: str | None, *, image: bool = False) -> list[dict]:
    """One chat message in TRL's conversational vision format (an image slot, then the text)."""
    content = ([{"type": "image", "text": None}] if image else []) + [{"type": "text", "text": text}]
    return [{"role": role, "content": content}]


def _features(kinds: dict[str, str]):
    """The datasets Features of the pairs' columns from `_row`'s kind names."""
    from datasets import Features, Image, Value

    message = [{"role": Value("string"), "content": [{"type": Value("string"), "text": Value("string")}]}]
    f64, i64, s = Value("float64"), Value("int64"), Value("string")
    types = {
        "image": Image(),
        "message": message,
        "f64": f64,
        "i64": i64,
        "s": s,
        "[f64]": [f64],
        "[i64]": [i64],
    }
    return Features({name: types[kind] for name, kind in kinds.items()})


def _row(src: Source, image_png: bytes, hi: Candidate, lo: Candidate, job: PairsJob, prompt: str) -> dict:
    """One pair as column -> (feature kind, value); the columns' order is the Parquet files' column order."""
    return {
        "image": ("image", {"bytes": image_png, "path": Path(hi.image).name}),
        "prompt": ("message", _messages("user", prompt, image=True)),
        "chosen": ("message", _messages("assistant", hi.caption)),
        "rejected": ("message", _messages("assistant", lo.caption)),
        "image_id": ("s", hi.image_id),
        "chosen_index": ("i64", hi.index),
        "rejected_index": ("i64", lo.index),
        "score_name": ("s", job.score),
        "chosen_score": ("f64", hi.score),
        "rejected_score": ("f64", lo.score),
        "margin": ("f64", hi.score - lo.score),
        "chosen_per_seed": ("[f64]", hi.per_seed),
        "rejected_per_seed": ("[f64]", lo.per_seed),
        "chosen_noise": ("f64", hi.noise(job.noise)),
        "rejected_noise": ("f64", lo.noise(job.noise)),
        "chosen_recon_score": ("f64", hi.recon_score),
        "rejected_recon_score": ("f64", lo.recon_score),
        "selection_seeds": ("[i64]", src.selection_seeds),
        "eval_seed": ("i64", src.eval_seed),
        "policy": ("s", job.policy),
        "source_run": ("s", str(src.path.resolve())),
    }


class _ShardWriter:
    """Rows to train-NNNNN.parquet in the staged `folder` (the run's data/ once published), `size` rows a file,
    so a run's images never all sit in memory; `load_dataset(OUT, split="train")` reads them as one split."""

    def __init__(self, folder: Path, size: int):
        self.folder, self.size, self.rows, self.files, self.count = folder, size, [], [], 0
        self.kinds: dict[str, str] = {}  # column -> feature kind, from the rows added

    def add(self, row: dict) -> None:
        """`row`: column -> (feature kind, value), as `_row` gives it."""
        self.kinds = {name: kind for name, (kind, _) in row.items()}
        self.rows.append({name: value for name, (_, value) in row.items()})
        self.count += 1
        if len(self.rows) >= self.size:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        from datasets import Dataset

        buf = io.BytesIO()
        Dataset.from_list(self.rows, features=_features(self.kinds)).to_parquet(buf)
        name = f"train-{len(self.files):05d}.parquet"
        atomic_write_bytes(self.folder / name, buf.getvalue())
        self.files.append(f"{PAIRS_DATA}/{name}")
        self.rows = []


def build_pairs(job: PairsJob, *, prompt: str | None = None, shard_size: int = 1000) -> PairsSummary:
    """Pair each input image's candidates, filter, write the shards and the record; with no pair kept nothing is
    written (docs/training.md). `prompt` overrides a describe run's recorded prompt (a scored table has none)."""
    for name, value, allowed in (
        ("policy", job.policy, POLICIES),
        ("score", job.score, SCORES),
        ("noise filter", job.noise, NOISE),
    ):
        if value not in allowed:
            raise ReconScoreError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
    try:
        import datasets  # noqa: F401 - writes the Parquet files with the features TRL's loaders read
    except ImportError as err:
        raise ReconScoreError(
            "`reconscore pairs` needs the `datasets` package: pip install 'reconscore[train]'"
        ) from err
    _refuse_repeated_inputs(job.runs)
    with RunFolder("pairs", job.out, argv=job.argv) as run:
        # the shards are staged here and become data/ at once: a rerun replaces the dataset, never mixes two
        staged = job.out / ".data.partial"
        shutil.rmtree(staged, ignore_errors=True)  # left by a killed run
        try:
            return _build(job, run, staged, prompt, shard_size)
        except BaseException:  # a full disk: the folder is left as this invocation found it
            shutil.rmtree(staged, ignore_errors=True)
            raise


def _build(job: PairsJob, run: RunFolder, staged: Path, prompt: str | None, shard_size: int) -> PairsSummary:
    summary = PairsSummary(job.noise, path=job.out, score=job.score)
    writer = _ShardWriter(staged, shard_size)
    sources = []
    for path in job.runs:
        try:
            src = _read_source(path, job, summary.skipped, summary.failures)
        except InputError as err:
            summary.failures.append(str(err))
            continue
        text = prompt or src.prompt
        if not text:
            summary.failures.append(f"{path}: no prompt recorded (not a describe run); pass --prompt")
            continue
        sources.append(
            {"path": str(path.resolve()), "note": src.note, "selection_seeds": src.selection_seeds}
        )
        for image_id, cands in src.groups.items():
            _pair_image(job, src, image_id, cands, text, writer, summary)
    writer.flush()
    summary.pairs = writer.count
    if not summary.pairs:
        shutil.rmtree(staged, ignore_errors=True)
        run.abandon()
        return summary
    record = _record(job, summary, writer.files, sources)
    upstream = [s["path"] for s in sources]
    spec = RunSpec({}, record=lambda _: record, upstream=upstream, folders={PAIRS_DATA: staged})
    summary.record = run.run(spec).info
    return summary


def _refuse_repeated_inputs(runs: list[Path]) -> None:
    """The same candidates table given twice (as a path again, through a link, or as a run folder and its
    candidates.jsonl) would write every pair twice: refused, naming both arguments."""
    seen: dict[Path, Path] = {}
    for path in runs:
        try:
            table = candidates_table(path).resolve()
        except InputError:  # a folder without candidates: named when it is read, beside the other inputs
            continue
        if table in seen:
            raise InputError(
                f"{path} and {seen[table]} are the same candidates table ({table}); give each run once"
            )
        seen[table] = path


def _pair_image(
    job, src: Source, image_id: str, cands, prompt: str, writer: _ShardWriter, summary: PairsSummary
) -> None:
    summary.candidates += len(cands)
    summary.with_noise += sum(1 for c in cands if c.noise(job.noise) is not None)
    if len(cands) < 2:
        summary.skipped["image with fewer than two scored candidates"] += 1
        return
    kept = []
    for hi, lo in candidate_pairs(cands, job.policy):
        reason = keep_pair(hi, lo, min_margin=job.min_margin, noise=job.noise)
        if reason:
            summary.dropped[reason] += 1
        else:
            kept.append((hi, lo))
    if not kept:
        return
    try:
        root = src.images_root or src.path.parent
        img = load_image(
            resolve_under(root, cands[0].image), name=cands[0].image, bands=src.bands, reader=src.image_reader
        )
    except InputError as err:
        summary.failures.append(f"{src.path}: image {image_id!r}: {err}")
        return
    png = png_bytes(img)
    summary.images += 1
    for hi, lo in kept:
        writer.add(_row(src, png, hi, lo, job, prompt))
        # held-out agreement checks a ranking by another score: ranked by recon_score it is always true
        if job.score != "recon_score" and hi.recon_score is not None and lo.recon_score is not None:
            summary.compared += 1
            summary.agree += hi.recon_score > lo.recon_score


def _record(job: PairsJob, summary: PairsSummary, files: list[str], sources: list[dict]) -> dict:
    return {
        "format": "TRL conversational vision preference (image, prompt, chosen, rejected)",
        "files": files,
        "sources": sources,
        "settings": {name: getattr(job, name) for name in ("policy", "score", "min_margin", "noise")},
        "counts": {"pairs": summary.pairs, "images": summary.images, "candidates": summary.candidates},
        "dropped": dict(summary.dropped),
        "skipped": dict(summary.skipped),
        "failures": summary.failures,
        "noise_filter": summary.noise_filter,
        "held_out_agreement": summary.held_out_agreement,
    }
