"""`reconscore annotate build` and `annotate collect` as functions: the study folder and the collected set are
runs (recon_score.run_engine.RunFolder); what goes in their files is computed by preference_data.annotate, which
this module feeds with images (recon_score.images, the one reader) and confidence intervals
(recon_score.bootstrap, the one CI routine)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from preference_data import PreferenceFormatError
from preference_data.annotate import (
    CONSENSUS_RATER,
    CONSENSUS_RULES,
    LABELS,
    CandidateRow,
    Collected,
    Item,
    Round,
    StudySettings,
    annotator_names,
    check_unique,
    checksum,
    collect,
    key_body,
    make_items,
    page_items,
    preference_rates,
    ranking_lines,
    read_candidates,
    read_export,
    read_header,
    read_selections,
    render_page,
    shuffles,
    study_record,
    unblind,
    win_shares,
)
from recon_score.errors import InputError, ReconScoreError
from recon_score.run_engine import RunFolder, RunSpec, load_record
from recon_score.run_outputs import (
    AGREEMENT,
    AGREEMENT_BY_IMAGE,
    CANDIDATES,
    CAPTIONS,
    CONSENSUS_PAGE,
    CONSENSUS_RANKINGS,
    CONSENSUS_ROUND,
    CONTESTED,
    JUDGMENTS,
    PREFERENCE,
    RANKINGS,
    RECORD,
    STUDY_IMAGES,
    STUDY_KEY,
    STUDY_PAGES,
    STUDY_RECORD,
    WIN_SHARE,
    read_rows,
)
from recon_score.textfiles import read_json

# what the pages show: a JPEG of the image as recon_score.images reads it (TIFF shows nowhere)
JPEG_QUALITY = 90


def _json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")


@dataclass
class BuildJob:
    candidates: list[Path]  # tables (image, candidate, model), `describe` or `evaluate` run folders: merged
    out: Path
    images: Path | None = None  # the folder the image names are relative to (a run's own, by default)
    annotators: int = 2
    seed: int = 0
    ties: bool = False
    per_image: int | None = None
    title: str = "Rank the captions"
    argv: list[str] = field(default_factory=list)


@dataclass
class CandidateSource:
    """What one --candidates gave: its rows, the folder its image names are relative to (a table: none), and
    the sha256 of every file they were read from (recorded, so a changed source is told on a rebuild)."""

    path: Path
    kind: str  # table, describe or evaluate
    rows: list[CandidateRow]
    root: Path | None
    files: dict[str, str]

    def recorded(self) -> dict:
        return {"path": str(self.path.resolve()), "kind": self.kind, "sha256": self.files}


def _digests(*paths: Path) -> dict[str, str]:
    from recon_score.atomic_io import file_sha256

    return {str(p.resolve()): file_sha256(p) for p in paths}


def _describe_references(source: Path) -> dict[str, tuple[str, ...]]:
    """Each image's reference captions, as the describe run's captions.jsonl carries them (none without it):
    the reference metrics of `correlate` need them in the collected rankings."""
    from recon_score.run_outputs import numbered_rows, output_file

    path = output_file(source, CAPTIONS)
    if not path.is_file():
        return {}
    refs = {}
    for lineno, r in numbered_rows(source, CAPTIONS):
        value = r.get("references")
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ReconScoreError(f"{path}:{lineno}: 'references' must be a list of strings, got {value!r}")
        refs.setdefault(r.get("image"), tuple(value))
    return refs


def _describe_source(source: Path, record: dict) -> CandidateSource:
    """Every candidate of a describe run, each one's model `CAPTIONER#index` and its image's references; its
    images root from its record."""
    from recon_score.run_outputs import numbered_rows, output_file

    name = (record.get("captioner") or {}).get("name", "describe")
    refs = _describe_references(source)
    path = output_file(source, CANDIDATES)
    rows = [
        CandidateRow(
            r["image"],
            " ".join(r["caption"].split()),
            f"{name}#{r['index']}",
            refs.get(r["image"], ()),
            f"{path}:{lineno}",
        )
        for lineno, r in numbered_rows(source, CANDIDATES)
        if r.get("error") is None and r.get("caption")
    ]
    root = record.get("images_root")
    captions = [output_file(source, CAPTIONS)] if output_file(source, CAPTIONS).is_file() else []
    return CandidateSource(source, "describe", rows, Path(root) if root else None, _digests(path, *captions))


def _evaluate_source(source: Path, record: dict) -> CandidateSource:
    """An evaluate run's caption per split image, its model the summary's row label; the images and their
    references from the split its record names (read again with the one dataset loader)."""
    from eval.datasets import load_dataset
    from recon_score.run_outputs import PER_IMAGE, SUMMARY_CSV, read_frame

    split = record.get("split")
    if not isinstance(split, dict):
        raise ReconScoreError(
            f"--candidates {source}: its run.json names no split (an evaluate run of an earlier version): "
            "run `reconscore evaluate` again"
        )
    ds = load_dataset(
        split["dataset"],
        split["root"],
        split["split"],
        annotations=split.get("annotations"),
        images_dir=split.get("images_root"),
    )
    model = str(read_frame(source, SUMMARY_CSV, index_col=0).index[0])
    present = {s.image_id: s for s in ds.samples}
    listed = {s.image_id for s in ds.listed}
    rows = []
    for k, r in enumerate(read_rows(source, PER_IMAGE)):
        where = f"{source / PER_IMAGE}:{k + 1}"
        if r.get("image_id") not in listed:
            raise ReconScoreError(
                f"{where}: image {r.get('image_id')!r} is not in {split['dataset']}/{split['split']} "
                "any more: run `reconscore evaluate` again"
            )
        s, caption = present.get(r["image_id"]), r.get("caption")
        if s is not None and isinstance(caption, str) and caption.strip():
            rows.append(CandidateRow(s.image, " ".join(caption.split()), model, tuple(s.references), where))
    files = _digests(source / PER_IMAGE, source / SUMMARY_CSV, *ds.annotations)
    return CandidateSource(source, "evaluate", rows, ds.images_dir, files)


def candidate_source(source: Path) -> CandidateSource:
    """One --candidates: a table, or a `describe` or `evaluate` run folder (read with their typed readers)."""
    if not source.is_dir():
        try:
            return CandidateSource(source, "table", read_candidates(source), None, _digests(source))
        except PreferenceFormatError as err:
            raise ReconScoreError(str(err)) from err
    record = load_record(source)
    kind = record.get("command")
    if kind == "describe":
        return _describe_source(source, record)
    if kind == "evaluate":
        return _evaluate_source(source, record)
    raise ReconScoreError(
        f"--candidates {source} is a run of `{kind}`; give a table, a describe run or an evaluate run"
    )


def merge_sources(sources: list[CandidateSource], images: Path | None) -> tuple[list[CandidateRow], Path]:
    """Every source's rows, in the order given (an image's candidates from several runs side by side), and the
    one folder their image names are relative to. A model of two sources is refused: its captions could not
    be told apart in the key."""
    owner: dict[str, CandidateSource] = {}
    seen: set[Path] = set()
    for src in sources:
        if src.path.resolve() in seen:
            raise ReconScoreError(f"--candidates {src.path} is given twice")
        seen.add(src.path.resolve())
        for model in dict.fromkeys(r.model for r in src.rows):
            other = owner.setdefault(model, src)
            if other is not src:
                raise ReconScoreError(
                    f"--candidates {src.path}: model {model!r} also comes from {other.path}; "
                    "each model's candidates from one source"
                )
    if images is None:
        roots = list(dict.fromkeys(s.root.resolve() for s in sources if s.root is not None))
        if len(roots) > 1:
            named = ", ".join(f"{s.path} under {s.root}" for s in sources if s.root is not None)
            raise ReconScoreError(
                f"the candidates' images lie in different folders ({named}): give --images, the folder "
                "every image name is relative to"
            )
        if not roots:
            raise ReconScoreError("--images is needed: the folder the table's image names are relative to")
        images = roots[0]
    return [r for s in sources for r in s.rows], images


def _changed_sources(out: Path, sources: list[CandidateSource]) -> list[str]:
    """The sources a previous build of this study read whose files are not what they were then."""
    from recon_score.run_engine import read_record

    before = {s.get("path"): s.get("sha256") for s in read_record(out / RECORD).get("sources") or []}
    return [
        str(s.path)
        for s in sources
        if str(s.path.resolve()) in before and before[str(s.path.resolve())] != s.files
    ]


def _image_files(
    items: list[Item], root: Path, say: Callable[[str], None]
) -> tuple[dict[str, tuple[str, bytes]], list[str]]:
    """pages/images/NNNN.jpg per image (numbered, so no file name says anything), and the images that could not
    be read (their items are left out, each said in one line)."""
    from recon_score.images import load_image, resolve_under
    from recon_score.progress import Progress

    files, bad = {}, []
    with Progress(len(items), desc="images", unit="image") as bar:
        for k, it in enumerate(items):
            try:
                img = load_image(resolve_under(root, it.image), name=it.image)
            except InputError as err:
                say(f"skipped {it.image}: {err}")
                bad.append(it.image)
                bar.update(failed=1)
                continue
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=JPEG_QUALITY)
            files[it.image] = (f"{STUDY_IMAGES}/{k + 1:04d}.jpg", buf.getvalue())
            bar.update()
    return files, bad


def _study_id(out: Path) -> str:
    """Kept across rebuilds of one study folder (so an export of the earlier build is told stale, not foreign):
    study.json's, else the run record's (a deleted study.json comes back with its id)."""
    for path in (out / STUDY_RECORD, out / RECORD):
        try:
            return str(read_json(path, expect=dict)["study"])
        except (InputError, KeyError, OSError):
            continue
    return f"{out.resolve().name}-{uuid.uuid4().hex[:8]}"


def build_files(
    job: BuildJob, study_id: str, items: list[Item], images: dict[str, tuple[str, bytes]]
) -> dict[str, bytes]:
    """Every file of a study folder, pages/ included, as {run-relative name: bytes}."""
    settings = StudySettings(job.annotators, job.seed, job.ties, job.per_image, job.title)
    names = {image: rel for image, (rel, _) in images.items()}
    study = study_record(study_id, items, settings, names)
    key = {"study": study_id, "checksum": study["checksum"], **key_body(items, settings)}
    files = {STUDY_RECORD: _json_bytes(study), STUDY_KEY: _json_bytes(key)}
    for name in annotator_names(job.annotators):
        shown = page_items(items, key["orders"][name], names)
        page = render_page(
            study_id=study_id,
            checksum=study["checksum"],
            annotator=name,
            round_="main",
            title=job.title,
            ties=job.ties,
            items=shown,
        )
        files[f"{STUDY_PAGES}/{name}.html"] = page
    files.update({f"{STUDY_PAGES}/{rel}": data for rel, data in images.values()})
    return files


def run_build(job: BuildJob, say: Callable[[str], None] = print) -> dict:
    """The study folder: checked (kind, lock) before anything is read; pages/ replaced as a whole (a consensus page
    kept only while the study's checksum is the one its pass was made for)."""
    if job.annotators < 1:
        raise ReconScoreError("--annotators must be at least 1")
    if not job.candidates:
        raise ReconScoreError("--candidates is needed: a table, a describe run or an evaluate run")
    with RunFolder("annotate", job.out, argv=job.argv) as run:
        sources = [candidate_source(Path(p)) for p in job.candidates]
        rows, root = merge_sources(sources, job.images)
        if not root.is_dir():
            raise ReconScoreError(f"--images {root} is not a folder")
        try:
            items = make_items(rows, per_image=job.per_image, seed=job.seed)
        except PreferenceFormatError as err:
            raise ReconScoreError(str(err)) from err
        images, bad = _image_files(items, root, say)
        items = [it for it in items if it.image not in bad]
        if not items:
            raise ReconScoreError("no image of the candidates could be read: nothing to annotate")
        files = build_files(job, _study_id(job.out), items, images)
        study = json.loads(files[STUDY_RECORD])
        consensus = _current_consensus(job.out, study["checksum"])
        previous = (
            read_json(job.out / STUDY_RECORD, expect=dict) if (job.out / STUDY_RECORD).is_file() else {}
        )
        for changed in _changed_sources(job.out, sources):
            same = previous.get("checksum") == study["checksum"]
            say(
                f"{changed} changed since the last build of {job.out}: "
                + (
                    "the candidates shown are the same (checksum kept)"
                    if same
                    else "new checksum, exports of the earlier pages are stale"
                )
            )
        info = {
            "study": study["study"],
            "checksum": study["checksum"],
            "candidates": [str(Path(p).resolve()) for p in job.candidates],
            "sources": [s.recorded() for s in sources],
            "images_root": str(root.resolve()),
            "counts": {"images": len(items), "skipped": len(bad), "annotators": job.annotators},
            "settings": study["settings"],
        }
        upstream = [s.path for s in sources if s.kind != "table"]
        done = _publish(run, {**files, **consensus}, info, upstream)
        if not consensus:  # the study changed: a consensus pass of its earlier build goes (its page went)
            (job.out / CONSENSUS_ROUND).unlink(missing_ok=True)
        return done


def _current_consensus(out: Path, checksum: str) -> dict[str, bytes]:
    """The consensus pass's page of this very study (the rebuild kept its checksum), to keep in the new pages/;
    none when there is no pass or it belongs to an earlier build (it goes with that build's pages)."""
    from recon_score.textfiles import read_bytes

    page = out / STUDY_PAGES / CONSENSUS_PAGE
    try:
        if read_json(out / CONSENSUS_ROUND, expect=dict).get("parent") == checksum and page.is_file():
            return {f"{STUDY_PAGES}/{CONSENSUS_PAGE}": read_bytes(page)}
    except (InputError, OSError):
        pass
    return {}


def _stage_pages(out: Path, files: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, Path]]:
    """The files of pages/ written aside (OUT/.pages.partial) for the Run to rename into place as a whole at
    finish, so pages/ holds exactly these (no page or image of an earlier build); the other files as given."""
    import shutil

    staged, prefix = out / f".{STUDY_PAGES}.partial", f"{STUDY_PAGES}/"
    shutil.rmtree(staged, ignore_errors=True)  # left by a killed run
    for rel, data in files.items():
        if rel.startswith(prefix):
            (staged / rel[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel[len(prefix) :]).write_bytes(data)
    rest = {rel: data for rel, data in files.items() if not rel.startswith(prefix)}
    return rest, ({STUDY_PAGES: staged} if staged.is_dir() else {})


def _publish(run: RunFolder, files: dict[str, bytes], info: dict, upstream: list[Path]) -> dict:
    """A run computed in one go: the Run writes the files (pages/ staged and renamed into place, so it then holds
    exactly the pages and images given), the invocation's record and run.json."""
    import shutil

    files, folders = _stage_pages(run.out, files)
    spec = RunSpec(
        settings={
            "kind": run.kind,
            "checksum": info.get("checksum") or info.get("study_checksum"),
            "sources": info.get("sources", []),
        },
        outputs=lambda res: files,
        record=lambda res: info,
        upstream=upstream,
        folders=folders,
    )
    try:
        return run.run(spec).info
    except BaseException:  # a full disk: the staged pages go, the folder is left as this invocation found it
        for staged in folders.values():
            shutil.rmtree(staged, ignore_errors=True)
        raise


def load_study(folder: Path) -> tuple[dict, dict, list[Item]]:
    """study.json and key.json of a study folder, and its items with their models."""
    from recon_score.run_engine import folder_kind

    if folder_kind(folder) != "annotate":
        raise ReconScoreError(f"{folder} is not a study folder (made by `reconscore annotate build`)")
    study = read_json(folder / STUDY_RECORD, expect=dict)
    key = read_json(folder / STUDY_KEY, expect=dict)
    if key.get("checksum") != study.get("checksum"):
        raise ReconScoreError(
            f"{folder / STUDY_KEY} does not belong to {folder / STUDY_RECORD}: rebuild the study"
        )
    items = [
        Item(
            it["id"],
            it["image"],
            tuple(it["candidates"]),
            tuple(key["models"][it["id"]]),
            tuple(it["references"]),
        )
        for it in study["items"]
    ]
    return study, key, items


# -- the consensus pass -------------------------------------------------------------------------------------------
def run_consensus_build(collected: Path, *, seed: int = 0, argv: list[str] | None = None) -> dict:
    """pages/consensus.html and consensus.json in the study a collect run read: the contested images, each with
    the annotators' rankings side by side in the consensus page's own labels (never a model name)."""
    record = load_record(collected)
    if record.get("command") != "annotate-collect":
        raise ReconScoreError(f"--collected {collected} is not an `annotate collect` run folder")
    folder = Path(record["study_folder"])
    study, _, items = load_study(folder)
    if record.get("study_checksum") != study["checksum"]:
        raise ReconScoreError(f"{collected} collected an earlier build of {folder}: collect again first")
    contested = [r["item"] for r in _csv(collected / CONTESTED)]
    if not contested:
        raise ReconScoreError(
            f"{collected / CONTESTED} lists no contested image: no consensus pass is needed"
        )
    ranks: dict[str, dict[str, list[int]]] = {}
    for row in _jsonl(collected / JUDGMENTS):
        ranks.setdefault(row["item"], {})[row["annotator"]] = row["ranks"]
    chosen = [it for it in items if it.id in set(contested)]
    orders = shuffles(chosen, StudySettings(1, seed + 7919, study["settings"]["ties"], None, ""))[
        "annotator-1"
    ]
    names = {it["image"]: it["file"] for it in study["items"]}
    shown = page_items(chosen, orders, names)
    for entry, it in zip(shown, chosen):
        entry["shown"] = [
            {"who": who, "ranks": {LABELS[pos]: r[j] for pos, j in enumerate(orders[it.id])}}
            for who, r in sorted(ranks.get(it.id, {}).items())
        ]
    body = {
        "study": study["study"],
        "parent": study["checksum"],
        "items": [it.id for it in chosen],
        "orders": orders,
    }
    round_ = {**body, "checksum": checksum({**body, "shown": shown})}
    page = render_page(
        study_id=study["study"],
        checksum=round_["checksum"],
        annotator=CONSENSUS_RATER,
        round_="consensus",
        title=study["settings"]["title"] + " (consensus)",
        ties=study["settings"]["ties"],
        items=shown,
    )
    with RunFolder("annotate", folder, argv=argv or []) as run:
        files = {
            CONSENSUS_ROUND: _json_bytes(round_),
            **_pages(folder),
            f"{STUDY_PAGES}/{CONSENSUS_PAGE}": page,
        }
        info = {
            **load_record(folder),
            "consensus": {
                "items": len(chosen),
                "from": str(collected.resolve()),
                "page": str(folder / STUDY_PAGES / CONSENSUS_PAGE),
            },
        }
        for k in ("command", "meaningless", "upstream", "started", "finished", "provenance"):
            info.pop(k, None)
        return _publish(run, files, info, [collected])


def _pages(folder: Path) -> dict[str, bytes]:
    """The study's pages and images as the build wrote them (the consensus pass adds its page beside them)."""
    from recon_score.textfiles import read_bytes

    pages = folder / STUDY_PAGES
    return {
        str(p.relative_to(folder)): read_bytes(p)
        for p in sorted(pages.rglob("*"))
        if p.is_file() and p.name != CONSENSUS_PAGE
    }


def _csv(path: Path) -> list[dict]:
    from recon_score.textfiles import csv_dicts

    return [rec for _, rec in csv_dicts(path)[1]]


def _jsonl(path: Path) -> list[dict]:
    from recon_score.textfiles import json_objects

    return [obj for _, obj in json_objects(path)]


# -- collect ------------------------------------------------------------------------------------------------------
@dataclass
class CollectJob:
    study: Path
    exports: list[Path]
    out: Path
    consensus_rule: str = "mean-rank"
    contested_below: float = 0.5
    selections: list[Path] = field(default_factory=list)  # tables, or describe run folders (their picks)
    resamples: int = 2000
    seed: int = 0
    argv: list[str] = field(default_factory=list)


def _rounds(folder: Path, study: dict, items: list[Item]) -> tuple[dict[str, Round], dict | None]:
    sizes = {it.id: len(it.candidates) for it in items}
    ties = bool(study["settings"]["ties"])
    rounds = {"main": Round(study["study"], study["checksum"], tuple(study["annotators"]), sizes, ties)}
    path = folder / CONSENSUS_ROUND
    if not path.exists():
        return rounds, None
    cons = read_json(path, expect=dict)
    if cons.get("parent") == study["checksum"]:
        cons_sizes = {i: sizes[i] for i in cons["items"]}
        rounds["consensus"] = Round(study["study"], cons["checksum"], (CONSENSUS_RATER,), cons_sizes, ties)
    return rounds, cons


def read_exports(job: CollectJob, study: dict, key: dict, items: list[Item]):
    """Every export checked before anything is written: (main round's ranks by annotator, the consensus pass's
    ranks by item, notes by (item, annotator))."""
    rounds, cons = _rounds(job.study, study, items)
    exports = []
    try:
        for path in job.exports:
            head, body = read_header(path)
            if head["round"] not in rounds:
                raise PreferenceFormatError(
                    path, 1, f"is a consensus export, and {job.study} has no current consensus pass"
                )
            exports.append(read_export(path, head, body, rounds[head["round"]]))
        check_unique(exports)
    except PreferenceFormatError as err:
        raise ReconScoreError(f"{err} (nothing was collected)") from err
    main, settled, notes = {}, {}, {}
    for ex in exports:
        if ex.round == "main":
            main[ex.annotator] = unblind(ex, key["orders"][ex.annotator])
        else:
            settled.update(unblind(ex, cons["orders"]))
        notes.update({(item, ex.annotator): text for item, text in ex.notes.items()})
    if not main:
        raise ReconScoreError("no export of the study's main round was given: nothing to collect")
    return main, settled, notes, exports


def _describe_picks(run: Path) -> list[tuple[str, str, str, str]]:
    """A describe run's selected captions, under the name of the metric that selected them, each named by its
    captions.jsonl line; a failed row (an error, no caption) has no pick and is left out, as the study left
    out its candidates."""
    from recon_score.run_outputs import numbered_rows, output_file

    metric = (load_record(run).get("selection") or {}).get("metric", "describe")
    path = output_file(run, CAPTIONS)
    return [
        (metric, r.get("image"), r["caption"], f"{path}:{lineno}")
        for lineno, r in numbered_rows(run, CAPTIONS)
        if r.get("error") is None and isinstance(r.get("caption"), str) and r["caption"].strip()
    ]


def _selections(paths: list[Path]) -> list[tuple[str, str, str, str]]:
    """Each metric's pick per image: a table, or a describe run folder (its picks)."""
    out = []
    for path in paths:
        if path.is_dir():
            out += _describe_picks(path)
            continue
        try:
            out += read_selections(path)
        except PreferenceFormatError as err:
            raise ReconScoreError(str(err)) from err
    return out


def _table(rows: list[dict], columns: list[str]) -> bytes:
    import pandas as pd

    return pd.DataFrame(rows, columns=columns).to_csv(index=False, float_format="%.6f").encode("utf-8")


def collected_files(done: Collected, notes: dict, prefs: list[dict]) -> dict[str, bytes]:
    """The collect run's files: the rankings in the `ranking` format, the unblinded judgments, agreement, the
    contested images, win shares and preference rates."""
    from recon_score.atomic_io import jsonl_bytes

    per_annotator = [
        line for a in done.annotators for line in ranking_lines(done.items, done.by_annotator.get(a, {}), a)
    ]
    judgments = [
        {
            "item": it.id,
            "image": it.image,
            "annotator": a,
            "ranks": [int(x) for x in done.by_annotator[a][it.id]],
            "note": notes.get((it.id, a), ""),
        }
        for a in done.annotators  # the study's order, not the exports' (the same bytes for any argument order)
        for it in done.items
        if it.id in done.by_annotator.get(a, {})
    ]
    by_image_cols = ["item", "image", "raters", "kendall_w", "pairwise", "contested", "reason"]
    contested = sorted((r for r in done.per_image if r["contested"]), key=lambda r: r["kendall_w"])
    return {
        RANKINGS: jsonl_bytes(per_annotator),
        CONSENSUS_RANKINGS: jsonl_bytes(ranking_lines(done.items, done.final, CONSENSUS_RATER)),
        JUDGMENTS: jsonl_bytes(judgments),
        AGREEMENT: _table(
            [vars(a) for a in done.agreement],
            ["statistic", "value", "ci_low", "ci_high", "images", "definition"],
        ),
        AGREEMENT_BY_IMAGE: _table(done.per_image, by_image_cols),
        CONTESTED: _table(contested, by_image_cols),
        WIN_SHARE: _table(
            win_shares(done.items, done.final), ["model", "wins", "shown", "win_rate", "share_of_images"]
        ),
        PREFERENCE: _table(prefs, ["metric", "images", "preferred", "rate"]),
    }


def run_collect(job: CollectJob) -> dict:
    """Validates every export, then writes the collected set in one go: a bad export changes nothing."""
    from recon_score.bootstrap import CI_LEVEL, bootstrap_ci

    if job.consensus_rule not in CONSENSUS_RULES:
        raise ReconScoreError(
            f"unknown consensus rule {job.consensus_rule!r}: one of {', '.join(CONSENSUS_RULES)}"
        )
    with RunFolder("annotate-collect", job.out, argv=job.argv) as run:
        study, key, items = load_study(job.study)
        main, settled, notes, exports = read_exports(job, study, key, items)
        selections = _selections(job.selections)

        def ci(statistic, n: int) -> tuple[float, float]:
            return bootstrap_ci(statistic, n, resamples=job.resamples, rng_seed=job.seed)

        done = collect(
            items,
            list(study["annotators"]),
            main,
            settled,
            rule=job.consensus_rule,
            ci=ci,
            contested_below=job.contested_below,
        )
        try:
            prefs = preference_rates(items, done.final, selections)
        except PreferenceFormatError as err:
            raise ReconScoreError(str(err)) from err
        files = collected_files(done, notes, prefs)
        info = {
            "study": study["study"],
            "study_checksum": study["checksum"],
            "study_folder": str(job.study.resolve()),
            "exports": [
                {
                    "path": str(e.path.resolve()),
                    "annotator": e.annotator,
                    "round": e.round,
                    "exported": e.exported,
                    "missing": len(e.missing),
                }
                for e in exports
            ],
            "consensus_rule": {"name": job.consensus_rule, "rule": CONSENSUS_RULES[job.consensus_rule][1]},
            "consensus_pass": {"images": len(done.settled)},
            "contested": {
                "rule": f"the annotators' best captions differ, or Kendall's W < {job.contested_below:g}",
                "images": len(done.contested),
            },
            "agreement": {
                a.statistic: {"value": a.value, "ci": [a.ci_low, a.ci_high], "images": a.images}
                for a in done.agreement
            },
            "ci": f"{CI_LEVEL:.0%} percentile bootstrap over images, {job.resamples} resamples, seed {job.seed}",
            "win_share": json.loads(json.dumps(win_shares(items, done.final))),
            "preference": prefs,
            "counts": {"images": len(items), "with_consensus": len(done.final), "annotators": len(main)},
        }
        return _publish(run, files, info, [job.study])
