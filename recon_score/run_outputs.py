"""Each kind of run folder's output files, declared once, and the readers every other command reads them through:
bounded reads whose errors name the file (and line), never a hang or a traceback (docs/runs.md)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

from recon_score.errors import ReconScoreError
from recon_score.textfiles import (
    TextFileError,
    csv_rows,
    json_objects,
    parse_json,
    read_bytes,
    read_lines,
    read_text,
)

RECORD = "run.json"  # every run folder's record: written by recon_score.run_engine only

# -- score and describe ----------------------------------------------------------------------------------------
SCORES = "scores.jsonl"  # score: one row per caption (ReconScore, cosine, error, ...)
CAPTIONS = "captions.jsonl"  # describe: the chosen caption per image
CANDIDATES = "candidates.jsonl"  # describe: every candidate caption with its selection score
RECONSTRUCTIONS = "reconstructions"  # score, describe: the rendered images
EXPLAIN = "explain"  # score, describe with --explain: the phrase maps

# -- retrieve --------------------------------------------------------------------------------------------------
PER_QUERY_CSV = "per_query.csv"  # one row per (method, query)
PER_QUERY = "per_query.parquet"  # the same rows, typed
PER_GROUP = "per_group.csv"  # long format: method, level, name, metric, value, n_queries
RETRIEVE_TABLE = "table.md"  # the seed-layout tables, markdown
TOPK_CSV = "topk.csv"  # with --topk: each query's first database items
TOPK = "topk.parquet"
METHODS = "methods"  # methods/<name>.parquet (+ .topk.npz): each method's journaled per-query results
BUNDLE = "bundle.npz"  # with --save-bundle: the features-level bundle for `retrieve-eval`

# -- generate, correlate, evaluate, pairs -------------------------------------------------------------------------
GENERATED = "generated.jsonl"  # generate: one row per generated caption
TRIPLETS = "triplets.jsonl"  # generate length: the triplets extracted per image
CORRELATIONS = "correlations.csv"  # correlate: one row per metric (tau_b, tau_c, pairwise_acc, CIs, n, note)
PER_ITEM = "per_item.parquet"  # correlate: every judgment row with its scores
PER_IMAGE = "per_image.jsonl"  # evaluate: one row per split image
SUMMARY = "summary"  # evaluate: the summary table (summary.csv + summary.md)
# correlate --benchmarks: one row per (benchmark, variant, category, metric, statistic)
META_EVAL_CSV, META_EVAL_MD = "meta_eval.csv", "meta_eval.md"
PAIRS_DATA = "data"  # pairs: the dataset's Parquet shards (the record lies outside the loader's glob)

# -- annotate build (a study folder) and annotate collect ------------------------------------------------------
STUDY_RECORD = "study.json"  # the study's id, checksum, settings and items (never a model name)
STUDY_KEY = "key.json"  # the key that unblinds it: each candidate's model, each annotator's order
STUDY_PAGES = "pages"  # the folder to hand out: one page per annotator, images/ beside them
STUDY_IMAGES = "images"  # inside pages/
CONSENSUS_ROUND = "consensus.json"  # a consensus pass: its images, its page's order, its checksum
CONSENSUS_PAGE = "consensus.html"  # inside pages/
RANKINGS = "rankings.jsonl"  # collect: every annotator's ranking per image, in the `ranking` format
CONSENSUS_RANKINGS = "consensus.jsonl"  # collect: the consensus ranking per image, in the `ranking` format
JUDGMENTS = "judgments.jsonl"  # collect: unblinded ranks (table order) and notes per (item, annotator)
AGREEMENT = "agreement.csv"  # collect: Kendall's W, pairwise agreement, Krippendorff's alpha with CIs
AGREEMENT_BY_IMAGE = "agreement_by_image.csv"  # collect: W and pairwise agreement per image, contested or not
CONTESTED = "contested.csv"  # collect: the contested images, lowest agreement first
WIN_SHARE = "win_share.csv"  # collect: each model's wins (the ReconScore paper, Table 6)
PREFERENCE = "preference.csv"  # collect: preference rate of metric-selected captions (Table 7)

# -- study: each table is NAME.csv + NAME.md ---------------------------------------------------------------------
STUDY_TABLE = "table"  # every study's main table, in the paper's layout
ALL_METRICS = "all_metrics"  # models: every metric per model and dataset
RECON_SCORE_CI = "recon_score_ci"  # models: the ReconScore mean with its CI per model and dataset
IN_SAMPLE = "in_sample"  # n-sweep: the in-sample selection scores of the same picks
RATINGS = "ratings"  # selection: the rating of each selection metric's picks
RANK_CONSISTENCY = "rank_consistency"  # encoders: Kendall tau-b between the encoders' system rankings
PHRASE_KINDS = "kinds"  # explain: phrase kinds that hurt
WORST_PHRASES = "worst_phrases"  # explain: the phrases whose removal helped most
POINTS = "points"  # compodiff-sweep: one retrieve run per point


def table_files(name: str) -> tuple[str, str]:
    """The CSV and markdown files of a table called `name` (a study's tables, evaluate's summary)."""
    return f"{name}.csv", f"{name}.md"


def metric_table_file(metric: str, level: str = "group") -> str:
    """retrieve: the CSV of one headline metric's seed-layout table, by group or by subgroup."""
    return f"table_{metric.replace('@', '_at_')}{'' if level == 'group' else '_by_' + level}.csv"


def method_files(method: str) -> tuple[str, str]:
    """retrieve: a method's journaled results, run-relative: its per-query rows and its top-k arrays."""
    return f"{METHODS}/{method}.parquet", f"{METHODS}/{method}.topk.npz"


SUMMARY_CSV, SUMMARY_MD = table_files(SUMMARY)
STUDY_TABLE_CSV, STUDY_TABLE_MD = table_files(STUDY_TABLE)

# the final files each kind of run folder writes besides run.json; the first one tells a folder's kind when it
# has no run.json yet (a run killed before its first finish), except for kinds in KIND_BY_RECORD_ONLY
KIND_OUTPUTS = {
    "score": (SCORES, RECONSTRUCTIONS, EXPLAIN),
    "describe": (CAPTIONS, CANDIDATES, RECONSTRUCTIONS, EXPLAIN),
    "retrieve": (PER_QUERY_CSV, PER_QUERY, METHODS),
    "generate": (GENERATED, TRIPLETS),
    "correlate": (CORRELATIONS, PER_ITEM),
    "meta-eval": (META_EVAL_CSV, META_EVAL_MD),
    "evaluate": (PER_IMAGE, SUMMARY_CSV, SUMMARY_MD),
    "pairs": (PAIRS_DATA,),
    "study": (STUDY_TABLE_CSV, STUDY_TABLE_MD),
    "annotate": (STUDY_RECORD, STUDY_KEY, STUDY_PAGES, CONSENSUS_ROUND),
    "annotate-collect": (
        AGREEMENT,
        RANKINGS,
        CONSENSUS_RANKINGS,
        JUDGMENTS,
        AGREEMENT_BY_IMAGE,
        CONTESTED,
        WIN_SHARE,
        PREFERENCE,
    ),
}
# `data/`, `table.csv`, `study.json`: names a user's own folder may hold
KIND_BY_RECORD_ONLY = ("pairs", "study", "annotate")


# -- paths, for a message, a record or a reader with its own line handling ---------------------------------------
def output_file(run: Path, name: str) -> Path:
    """The output `name` of the run folder `run`, or `run` itself when it is a file (`metrics add RUN/scores.jsonl`)."""
    return Path(run) / name if Path(run).is_dir() else Path(run)


def has_output(folder: Path, name: str) -> bool:
    """Whether a run folder holds the optional output `name`."""
    return (Path(folder) / name).exists()


# -- reading ---------------------------------------------------------------------------------------------------
# fields a reader computes with: a value that is not a number is the file's error, never a TypeError later
NUMERIC_FIELDS = ("recon_score", "cosine", "distance", "recon_score_std", "selection_score")


def _existing(run: Path, name: str) -> Path:
    """The output's path; ReconScoreError naming the file and what makes it, when it is not there."""
    path = output_file(run, name)
    if not path.exists() and not path.is_symlink():
        kinds = [k for k, names in KIND_OUTPUTS.items() if name in names]
        what = f"an output of a `reconscore {kinds[0]}` run" if kinds else "a table of the run"
        raise ReconScoreError(f"{path} not found ({what})")
    return path


def read_rows(run: Path, name: str, *, missing_ok: bool = False) -> list[dict]:
    """Every object of a run's JSONL output `name`, in order (`run`: the folder, or the file itself).

    Raises:
        ReconScoreError: the file is missing (unless `missing_ok`); TextFileError naming file:line for a line that
            is not an object, or a score field that is not a number.
    """
    if missing_ok and not os.path.lexists(output_file(run, name)):
        return []
    return [obj for _, obj in numbered_rows(run, name)]


def numbered_rows(run: Path, name: str) -> list[tuple[int, dict]]:
    """`read_rows` with each object's line number, for messages that name FILE:LINE; the same checks."""
    path, rows = _existing(run, name), []
    for lineno, obj in json_objects(path):
        for key in NUMERIC_FIELDS:
            v = obj.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
                raise TextFileError(path, lineno, f"`{key}` is {shown}, not a number (was the file edited?)")
        rows.append((lineno, obj))
    return rows


def candidates_table(source: Path) -> Path:
    """A describe run folder's candidates.jsonl, or the scored table given; InputError for a folder without one."""
    from recon_score.errors import InputError

    source = Path(source)
    if not source.is_dir():
        return source
    table = source / CANDIDATES
    if not table.is_file():
        raise InputError(f"{source}: no {CANDIDATES} (expected a `reconscore describe` run folder)")
    return table


def candidate_lines(table: Path) -> Iterator[tuple[str, object | None, str | None]]:
    """(file:line, value, None) per non-blank line, or (file:line, None, why) where it is not JSON: `pairs` keeps
    the good lines and reports each bad one. TextFileError when the table cannot be read at all."""
    for line, text in read_lines(table, what="candidates table"):
        if text.strip():
            value, why = parse_json(text)
            yield f"{table}:{line}", value, why


# -- tables --------------------------------------------------------------------------------------------------------
def table_rows(folder: Path, name: str) -> list[list[str]]:
    """A CSV output of a run as written (header first, cells as text), for display."""
    return [fields for _, fields in csv_rows(_existing(folder, name))]


def study_tables(folder: Path) -> list[str]:
    """The names of a study run's CSV tables (NAME.csv), sorted: every study writes its own set."""
    return sorted(p.name for p in Path(folder).glob("*.csv"))


def read_frame(folder: Path, name: str, **read_csv):
    """A CSV or Parquet output of a run as a DataFrame (the bounded read, then pandas).

    Raises:
        ReconScoreError: the file is missing; TextFileError: it cannot be read or parsed.
    """
    import pandas as pd

    path = _existing(folder, name)
    if name.endswith(".parquet"):
        try:
            return pd.read_parquet(io.BytesIO(read_bytes(path)))
        except (ValueError, OSError) as err:  # pyarrow's ArrowInvalid / ArrowIOError
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise TextFileError(path, None, f"not a Parquet file reconscore wrote ({reason})") from None
    try:
        return pd.read_csv(io.StringIO(read_text(path)), **read_csv)
    except ValueError as err:  # pandas' ParserError and EmptyDataError
        raise TextFileError(path, None, f"not a CSV table reconscore wrote ({str(err).strip()})") from None
