"""`reconscore report`: static HTML pages for score, describe, correlate, study and retrieve runs. See
docs/report.md for what each page shows, where images may come from and how pages stay light."""

from __future__ import annotations

import base64
import hashlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from recon_score import run_outputs as outputs
from recon_score.errors import InputError, ReconScoreError
from recon_score.presets import SMOKE_NOTE
from recon_score.textfiles import entry_kind, read_json

THUMB_SIDE = 256  # px, long side of every thumbnail (originals and reconstructions)
THUMB_QUALITY = 80  # JPEG: ~10-20 kB per thumbnail, so a page of 50 images stays a few MB

# Readable names for run.json keys shown in a run's header; other keys: "some_key" -> "Some key".
LABELS = {
    "finished": "Finished (UTC)",
    "limit": "Row limit",
    "ok": "Scored",
    "recon_score_mean": "Mean ReconScore",
    "recon_score_std": "ReconScore std",
    "rendered_this_session": "Rendered (this session)",
    "t2i_model": "T2I model",
    "captioner": "VLM",
    "headline": "Headline τ",
    "n_boot": "Bootstrap resamples",
}


@dataclass
class Entry:
    caption: str | None
    scores: list[tuple[str, str]]  # (label, formatted value)
    recon: str | None = None  # img src
    error: str | None = None
    selected: bool = False
    rank: int | None = None
    badges: list[str] = field(default_factory=list)  # "best", "reference", "distractor", "positive"
    recon_label: str | None = None  # what `recon` is, when an entry shows more than one render
    held_out: str | None = None  # img src of the independent evaluation render (describe's selected caption)
    explain: object | None = None  # eval.report.explain.ExplainView of an explained row (score --explain)


@dataclass
class Card:
    title: str
    original: str | None
    original_error: str | None
    entries: list[Entry]
    original_label: str = "original"
    references: list[str] = field(default_factory=list)


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    sortable: bool = False  # the page sorts it by any column (a click on the header) and filters its rows
    best: set[tuple[int, int]] = field(default_factory=set)  # (row, column) cells marked best in their column


@dataclass
class Figure:
    title: str
    src: str


@dataclass
class Section:
    kind: str
    path: str
    title: str
    meta: list[tuple[str, str]]
    note: str | None = None
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    cards: list[Card] = field(default_factory=list)
    headline: list[tuple[str, str]] = field(default_factory=list)  # the run's result, first on the page
    legend: tuple = ()  # an explained run: what the phrase colours mean (eval.report.explain.LEGEND)
    legend_note: str | None = None

    def plot(self, title: str, figure) -> None:
        """Add a matplotlib figure (eval.report.plots), embedded as a PNG data URI."""
        from eval.report.plots import png

        self.figures.append(
            Figure(title, "data:image/png;base64," + base64.b64encode(png(figure)).decode("ascii"))
        )


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def _num(v, missing: float = 0.0) -> float:
    """A CSV cell as a number to plot: an empty or "nan" cell is `missing`."""
    return float(v) if v not in ("", "nan", None) else missing


def _failed(what: str, rows: list[dict], keys: dict[str, str]) -> list[Table]:
    """The table of the first 200 failed rows (`keys`: column -> row key); none when no row failed."""
    failed = [r for r in rows if r.get("error")]
    cells = [[str(r.get(k)) for k in keys.values()] for r in failed[:200]]
    return [Table(f"Failed {what} ({len(failed)})", list(keys), cells)] if failed else []


EMBED_REF = "embedded:"  # an <img src> value naming an entry of ImageStore.embedded, not a URL


class ImageStore:
    """Turns image files into <img src> values: references to embedded data URIs (`embedded:N`, resolved by the
    page's script from the one table each page carries) or thumbnails written next to the page."""

    def __init__(self, mode: str, assets: Path | None):
        if mode not in ("embed", "link"):
            raise ValueError(f"images mode must be embed or link, got {mode!r}")
        self.mode, self.assets = mode, assets
        self._memo: dict[str, str] = {}
        self.embedded: dict[str, str] = {}  # "embedded:N" -> data URI, each distinct file once

    def src(self, root: Path | str | None, relative: str | None) -> tuple[str | None, str | None]:
        """(src, error) for `root / relative`; a missing, unreadable or out-of-root file gives an error to show.
        `root` must be absolute, so the page never depends on the folder `report` is called from."""
        if root is None:
            return None, "no image root recorded in run.json"
        if not relative or relative == "None":
            return None, "no image path recorded"
        root = Path(root)
        if not root.is_absolute():
            return None, (
                f"image root {str(root)!r} was recorded as a relative path, so it depends on the folder the run "
                "was started from; rerun with an absolute root"
            )
        from recon_score.errors import ImageLoadError
        from recon_score.images import load_image, resolve_under

        try:
            path = resolve_under(root, str(relative))
        except InputError as err:
            return None, str(err)
        key = str(path)
        if key in self._memo:
            return self._memo[key], None
        try:
            img = load_image(path, name=str(relative))
        except ImageLoadError as err:
            return None, str(err)
        img.thumbnail((THUMB_SIDE, THUMB_SIDE))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=THUMB_QUALITY)
        data = buf.getvalue()
        if self.mode == "embed":
            src = f"{EMBED_REF}{len(self.embedded)}"
            self.embedded[src] = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
        else:
            name = hashlib.sha256(key.encode()).hexdigest()[:20] + ".jpg"
            self._write(name, data)
            src = f"{self.assets.name}/{name}"
        self._memo[key] = src
        return src, None

    def _write(self, name: str, data: bytes) -> None:
        """A thumbnail into OUT_files/, never through a link: a symlink there (to the folder or in it) is refused in
        one line, as is a disk that refuses the write (WriteError), so a user's file is never overwritten.

        Raises:
            ReconScoreError: OUT_files/ is not a folder, or its entry `name` is not a regular file.
        """
        from recon_score.atomic_io import atomic_write_bytes

        kind = entry_kind(self.assets) or ("a file" if self.assets.exists() else None)
        if kind not in (None, "a folder"):
            raise ReconScoreError(
                f"{self.assets} is {kind}, not a folder, where the report writes its thumbnails; move it away "
                "and rerun"
            )
        atomic_write_bytes(self.assets / name, data)

    def own(self, run_dir: Path, relative) -> str | None:
        """The src of a file in the run's own folder (a reconstruction, a heatmap); None when none is recorded."""
        return self.src(run_dir.resolve(), relative)[0] if isinstance(relative, str) and relative else None


# C0 control characters (but tab, newline, carriage return) and DEL: HTML may not hold them raw (a NUL ends some
# parsers' strings); each is shown as its Unicode control picture (NUL -> U+2400), so it stays visible
_CONTROLS = {c: 0x2400 + c for c in range(0x20) if c not in (9, 10, 13)} | {0x7F: 0x2421}


def visible_controls(value):
    """Every value a page prints passes here before escaping (jinja's finalize)."""
    return value.translate(_CONTROLS) if isinstance(value, str) else value


MAX_TABLE_ROWS = 5000  # the per-caption table of a bigger run lists its first rows (and says so)


def _words(caption) -> str:
    return str(len(caption.split())) if isinstance(caption, str) else ""


def _caption_table(title: str, columns: list[str], rows: list[list[str]], note: str | None) -> Table:
    """The page's table of every caption: sortable by any column, filterable; flagged when the numbers are a
    smoke run's."""
    smoke = f" — {note}" if note else ""
    more = f"; the first {MAX_TABLE_ROWS} of {len(rows)} rows" if len(rows) > MAX_TABLE_ROWS else ""
    return Table(
        f"{title} ({len(rows)}){smoke}",
        columns,
        rows[:MAX_TABLE_ROWS],
        note=f"Click a column's header to sort by it (again: the other way); type in the box to keep the rows "
        f"that contain the text{more}.",
        sortable=True,
    )


def _score_table(rows: list[dict], note: str | None) -> Table:
    seeds = any(r.get("recon_score_std") is not None for r in rows)
    explained = any(isinstance(r.get("explain"), dict) for r in rows)
    columns = [
        "image",
        "id",
        "kind",
        "caption",
        "words",
        "ReconScore",
        *(["std over seeds"] * seeds),
        *(["worst phrase", "worst phrase Δ"] * explained),
        "error",
    ]
    out = []
    for r in rows:
        cap = r.get("caption")
        row = [str(r.get("image")), str(r.get("id")), str(r.get("kind") or "")]
        row += [cap if isinstance(cap, str) else "", _words(cap), _fmt(r.get("recon_score"))]
        row += [_fmt(r.get("recon_score_std"))] * seeds
        if explained:
            ex = r.get("explain") if isinstance(r.get("explain"), dict) else {}
            worst, verdict = ex.get("worst_phrase"), ex.get("worst_note")
            shown = worst if isinstance(worst, str) else verdict if isinstance(verdict, str) else ""
            row += [shown, _fmt(ex.get("worst_delta"), 3)]
        out.append([*row, str(r.get("error") or "")])
    return _caption_table("Every caption", columns, out, note)


def _describe_table(cands: list[dict], sel_label: str, note: str | None) -> Table:
    columns = ["image", "candidate", "selected", "caption", "words", sel_label, "recon_score", "error"]
    out = [
        [
            str(c.get("image_id")),
            str(c.get("index")),
            "selected" if c.get("selected") else "",
            c.get("caption") if isinstance(c.get("caption"), str) else "",
            _words(c.get("caption")),
            _fmt(c.get("selection_score")),
            _fmt(c.get("recon_score")),
            str(c.get("error") or ""),
        ]
        for c in cands
    ]
    return _caption_table("Every candidate caption", columns, out, note)


def _root(run: dict) -> Path | None:
    """The run's recorded image root (absolute for runs of this version; see ImageStore.src)."""
    root = run.get("images_root") or (run.get("source") or {}).get("images_dir")
    return Path(root) if root else None


def _label(key: str) -> str:
    return LABELS.get(key) or key.replace("_", " ").capitalize()


def _meta(run: dict) -> list[tuple[str, str]]:
    out = []
    preset = run.get("preset") or (run.get("config") or {}).get("preset")
    if isinstance(preset, dict):
        out.append(("preset", str(preset.get("name"))))
        # what the numbers came from: the VLM that wrote (describe), the T2I model that rendered and the
        # encoder that compared (describe: its selection's ReconScore preset)
        scoring = (run.get("selection") or {}).get("preset")
        scoring = scoring if isinstance(scoring, dict) else preset
        out += [(k, str(preset[k])) for k in ("captioner",) if preset.get(k)]
        out += [(k, str(scoring[k])) for k in ("t2i_model", "encoder") if scoring.get(k)]
    elif isinstance(preset, str):
        out.append(("preset", preset))
    for key in ("finished", "processes", "limit"):
        if run.get(key) is not None:
            out.append((key, str(run[key])))
    for k, v in (run.get("counts") or {}).items():
        out.append((k, str(v)))
    for k, v in (run.get("summary") or {}).items():
        if not isinstance(v, (dict, list)):
            out.append((k, _fmt(v)))
    return [(_label(k), v) for k, v in out]


def smoke_note(run: dict) -> str | None:
    """SMOKE_NOTE when a run's record says `meaningless` (a synthetic model in its settings, or an input run that
    was meaningless: the Run decides when it writes the record). Decided by that fact alone: a run's `note` may
    be a study's finding."""
    return SMOKE_NOTE if run.get("meaningless") is True else None


def _banner(run: dict) -> str | None:
    """A section's banner: the smoke warning and the run's own note (an explain study's finding), each once."""
    notes = dict.fromkeys(n for n in (smoke_note(run), run.get("note")) if n)
    return "; ".join(map(str, notes)) or None


def _caption_kinds(run: dict) -> dict[str, str]:
    """id -> "reference" / "distractor" for a score run's captions: the captions file's `kind` field when
    present; for the bundled sample without one, whether the caption is one of the image's references."""
    from recon_score.inputs import read_caption_rows
    from recon_score.run import SAMPLE_CAPTIONS, SAMPLE_DIR

    path = Path(run["captions"]) if run.get("captions") else None
    if path is None or not path.is_file():
        return {}
    try:
        rows = read_caption_rows(path, root=_root(run) or path.parent)
    except ReconScoreError:
        return {}
    kinds = {r.id: str((r.extra or {}).get("kind")) for r in rows if (r.extra or {}).get("kind")}
    if kinds or path.resolve() != SAMPLE_CAPTIONS.resolve():
        return kinds
    refs = {r["image"]: set(r["captions"]) for r in read_json(SAMPLE_DIR / "references.json", expect=list)}
    return {
        r.id: "reference" if r.caption in refs.get(r.image, ()) else "distractor"
        for r in rows
        if r.image in refs
    }


def _score_headline(run: dict, rows: list[dict]) -> list[tuple[str, str]]:
    """What the run found, before any detail: the mean (with its CI for --seeds runs) and, for captions with a
    kind, references vs distractors and the share of images where every reference beats every distractor."""
    from recon_score.sanity import references_vs_distractors
    from recon_score.seeds import ci_label, ci_text

    out = []
    ok = [r["recon_score"] for r in rows if r.get("recon_score") is not None]
    if len(ok) == 1:
        out.append(("ReconScore (higher = closer reconstruction)", f"{ok[0]:.2f}, 1 caption scored"))
    elif ok:
        mean = f"{sum(ok) / len(ok):.2f} over {len(ok)} captions"
        out.append(("Mean ReconScore (higher = closer reconstruction)", mean))
    ci = (run.get("seed_noise") or {}).get("recon_score_ci")
    if ci:
        # with its notes: one image, clipped, or too few degrees of freedom to mean much (ci_notes)
        out.append((f"{ci['level']:.0%} CI ({ci_label(ci)})", ci_text(ci)))
    kinds = (run.get("summary") or {}).get("references_vs_distractors") or references_vs_distractors(rows)
    if kinds and kinds.get("reference_mean") is not None and kinds.get("distractor_mean") is not None:
        means = f"{kinds['reference_mean']:.2f} vs {kinds['distractor_mean']:.2f}"
        out.append(("References vs distractors (references should score higher)", means))
    if kinds and kinds.get("images"):
        share = kinds["share_all_references_above_distractors"]
        above = f"{kinds['images_all_references_above_distractors']}/{kinds['images']} images ({100 * share:.0f}%)"
        out.append(("Every reference above every distractor", above))
    return out


def _score_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    rows = outputs.read_rows(d, outputs.SCORES, missing_ok=True)
    kinds = _caption_kinds(run)
    for r in rows:
        r.setdefault("kind", kinds.get(str(r.get("id"))))
    sec = Section("score", str(d), f"ReconScore — {d.name}", _meta(run), _banner(run))
    sec.headline = _score_headline(run, rows)
    ok = [r["recon_score"] for r in rows if r.get("recon_score") is not None]
    if ok:
        sec.plot(
            "ReconScore distribution", plots.histogram_figure(ok, title="ReconScore", xlabel="ReconScore")
        )
    if rows:
        sec.tables.append(_score_table(rows, sec.note))
    if any(isinstance(r.get("explain"), dict) for r in rows):
        from eval.report.explain import LEGEND, LEGEND_NOTE

        sec.legend, sec.legend_note = LEGEND, LEGEND_NOTE
    sec.tables += _failed("rows", rows, {"id": "id", "image": "image", "error": "error"})
    root = _root(run)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("image")), []).append(r)
    for image, items in sorted(groups.items(), key=lambda kv: -max(map(_score_or_low, kv[1]))):  # best first
        src, err = store.src(root, image)
        scored = [r["recon_score"] for r in items if r.get("recon_score") is not None]
        best = max(scored) if len(scored) > 1 else None
        entries = []
        for r in sorted(items, key=lambda r: -_score_or_low(r)):
            rsrc, rerr = (
                store.src(d.resolve(), r["reconstruction"]) if r.get("reconstruction") else (None, None)
            )
            badges = (["best"] if best is not None and r.get("recon_score") == best else []) + (
                [str(r["kind"])] if r.get("kind") in ("reference", "distractor") else []
            )
            entries.append(
                Entry(
                    r.get("caption"),
                    [("ReconScore", _score_with_spread(r)), ("cos", _fmt(r.get("cosine"), 4))],
                    rsrc,
                    error=r.get("error") or (f"reconstruction: {rerr}" if rerr else None),
                    badges=badges,
                    explain=_explain_view(d, r, store),
                )
            )
        sec.cards.append(Card(image, src, err, entries))
    return sec


def _score_with_spread(row: dict) -> str:
    """A card's ReconScore: the mean alone, or with its std over seeds as "98.37 ± 0.65 (3 seeds)" for a
    `--seeds K` row (K from its per-seed scores, else its seed list)."""
    std = row.get("recon_score_std")
    if std is None:
        return _fmt(row.get("recon_score"))
    per_seed = row.get("recon_score_per_seed") or row.get("seeds")
    k = f" ({len(per_seed)} seeds)" if isinstance(per_seed, list) and per_seed else " (over seeds)"
    return f"{_fmt(row.get('recon_score'))} ± {_fmt(std)}{k}"


def _explain_view(d: Path, row: dict, store: ImageStore):
    """The row's explanation as the report shows it (eval.report.explain), None for a row not explained."""
    from eval.report.explain import explain_view

    ex = row.get("explain")
    if not isinstance(ex, dict):
        return None
    return explain_view(ex, store.own(d, ex.get("heatmap")))


def _score_or_low(row: dict) -> float:
    """A row's ReconScore for ordering; -1, below every score, when it has none."""
    return row["recon_score"] if row.get("recon_score") is not None else -1.0


def _describe_section(d: Path, run: dict, store: ImageStore) -> Section:
    """Candidate cards name each score for what it measures: `selection_score` is the render (or metric) that
    chose, `recon_score` the independent evaluation render, shown beside it for the selected caption."""
    from eval.report import plots

    caps = outputs.read_rows(d, outputs.CAPTIONS, missing_ok=True)
    cands = outputs.read_rows(d, outputs.CANDIDATES, missing_ok=True)
    metric = (run.get("selection") or {}).get("metric", "score")
    sel_label = "selection_score" if metric == "recon_score" else f"selection_score ({metric})"
    sec = Section("describe", str(d), f"RemoteDescriber — {d.name}", _meta(run), _banner(run))
    held = [c["recon_score"] for c in caps if c.get("recon_score") is not None]
    chosen = [c["selection_score"] for c in caps if c.get("selection_score") is not None]
    for key, label, render, values in (
        ("recon_score", "recon_score", "held-out render", held),
        ("selection_score", sel_label, "the render that chose", chosen),
    ):
        if values:
            sec.headline.append((f"{label} ({render}, mean)", f"{sum(values) / len(values):.2f}"))
            what = f"{label} of the selected captions ({render})"
            sec.plot(what, plots.histogram_figure(values, title=what, xlabel=key))
    if cands:
        sec.tables.append(_describe_table(cands, sel_label, sec.note))
    root = _root(run)
    by_image: dict[str, list[dict]] = {}
    for c in cands:
        by_image.setdefault(str(c["image_id"]), []).append(c)
    for cap in caps:
        src, err = store.src(root, cap.get("image"))
        ranked = sorted(
            by_image.get(str(cap["image_id"]), []),
            key=lambda c: (c.get("selection_score") is None, -(c.get("selection_score") or 0.0), c["index"]),
        )
        eval_src = store.own(d, cap.get("eval_reconstruction"))
        entries = []
        for rank, c in enumerate(ranked, start=1):
            rsrc = store.own(d, c.get("reconstruction"))
            scores = [(sel_label, _fmt(c.get("selection_score")))]
            if c.get("recon_score") is not None or (c.get("selected") and cap.get("recon_score") is not None):
                scores.append(("recon_score", _fmt(c.get("recon_score", cap.get("recon_score")))))
            entries.append(
                Entry(
                    c.get("caption"),
                    [*scores, ("#", str(c["index"]))],
                    rsrc,
                    recon_label="selection render" if rsrc else None,
                    held_out=eval_src if c.get("selected") else None,
                    error=c.get("error"),
                    selected=bool(c.get("selected")),
                    rank=rank,
                    badges=["selected"] if c.get("selected") else [],
                )
            )
        title = str(cap["image_id"]) + (f" — {cap['error']}" if cap.get("error") else "")
        refs = [str(x) for x in cap.get("references") or []]
        sec.cards.append(Card(title, src, err, entries, references=refs))
    return sec


def _csv_table(rows: list[list[str]], title: str, digits: int = 2) -> Table:
    """A run's CSV table as written (header first), numbers formatted for the page."""
    if not rows:
        return Table(title, [], [])

    def cell(v: str) -> str:
        try:
            return _fmt(float(v), digits) if v not in ("", "nan") and not v.lstrip("-").isdigit() else v
        except ValueError:
            return v

    return Table(title, rows[0], [[cell(v) for v in r] for r in rows[1:]])


def _records(written: list[list[str]]) -> list[dict]:
    """A CSV table's rows as {column: text}, keyed by its header."""
    header = written[0] if written else []
    return [{h: r[i] if i < len(r) else None for i, h in enumerate(header)} for r in written[1:]]


def _correlate_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    sec = Section("correlate", str(d), f"Agreement with humans — {d.name}", _meta(run), _banner(run))
    if outputs.has_output(d, outputs.CORRELATIONS):
        written = outputs.table_rows(d, outputs.CORRELATIONS)
        table = _csv_table(written, "Kendall τ ×100 (flattened rows)")
        sec.tables.append(table)
        cols = table.columns
        if "metric" in cols:
            recs = _records(written)
            headline = str((run.get("protocol") or {}).get("headline", "tau_b"))
            series = {
                t.replace("_", "-"): [_num(r[t]) for r in recs] for t in ("tau_b", "tau_c") if t in cols
            }
            errors = {}
            if {f"{headline}_low", f"{headline}_high"} <= set(cols):
                errors[headline.replace("_", "-")] = (
                    [_num(r[f"{headline}_low"]) for r in recs],
                    [_num(r[f"{headline}_high"]) for r in recs],
                )
            if series:
                ci = run.get("protocol", {}).get("ci", "bootstrap CI")
                figure = plots.bars_figure(
                    [r["metric"] for r in recs],
                    series,
                    title="Kendall τ ×100",
                    ylabel="τ ×100",
                    errors=errors,
                    headline=headline.replace("_", "-"),
                )
                sec.plot(f"τ per metric; whiskers: {ci}", figure)
    return sec


def _study_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    name = run.get("study", "study")
    sec = Section(f"study {name}", str(d), f"Study `{name}` — {d.name}", _meta(run), _banner(run))
    for file in outputs.study_tables(d):
        sec.tables.append(_csv_table(outputs.table_rows(d, file), Path(file).stem))
    tau_table = outputs.table_files(outputs.RANK_CONSISTENCY)[0]
    if name == "encoders" and all(outputs.has_output(d, f) for f in (outputs.STUDY_TABLE_CSV, tau_table)):
        means = outputs.read_frame(d, outputs.STUDY_TABLE_CSV, index_col=0)
        tau = outputs.read_frame(d, tau_table, index_col=0)
        sec.plot(
            "Fig. 4: mean ReconScore per system under each encoder; Kendall τ-b between their system rankings",
            plots.encoders_figure(means, tau, title="Encoders"),
        )
    curve = run.get("curve")  # {"x": [...], "xlabel": str, "series": {name: [...]}, "ylabel": str}
    if curve:
        figure = plots.curve_figure(
            curve["x"],
            curve["series"],
            title=curve.get("title", name),
            xlabel=curve.get("xlabel", ""),
            ylabel=curve.get("ylabel", ""),
            integer_x=name == "n-sweep" or all(float(x).is_integer() for x in curve["x"]),
        )
        sec.plot(curve.get("title", name), figure)
    return sec


def _retrieve_section(d: Path, run: dict, store: ImageStore) -> Section:
    """Seed-layout tables, and with `--topk` one card per query: the reference image, its text, and each
    method's top-k database images (positives highlighted)."""
    cfg = run.get("config") or {}
    bench = run.get("benchmark") or {}
    sec = Section(
        "retrieve",
        str(d),
        f"Composed retrieval — {bench.get('name', cfg.get('benchmark'))} — {d.name}",
        [],
        _banner(run),
    )
    sec.meta = [("Encoder", str(cfg.get("encoder"))), (_label("finished"), str(run.get("finished")))]
    sec.meta += [
        (f"Method {name}", rec.get("status", "?")) for name, rec in (run.get("methods") or {}).items()
    ]
    from retrieval.report import metric_title, query_image_line

    sec.meta.append(("Query image in the database", query_image_line(bench.get("query_image"))))
    glance = _glance_table(d, run)
    if glance is not None:
        sec.tables.append(glance)
    for metric in (run.get("metrics") or {}).get("headline", []):  # the protocol's order
        for level in ("group", "subgroup"):
            file = outputs.metric_table_file(metric, level)
            if outputs.has_output(d, file):
                table = _csv_table(
                    outputs.table_rows(d, file),
                    f"{metric_title(metric)} (%) by {level}; ★ the best method per column",
                )
                table.sortable = True
                sec.tables.append(_mark_best(table))
    if not outputs.has_output(d, outputs.TOPK):
        return sec
    # images_root: the absolute root (recorded since this version); older runs only have --root as typed
    root = run.get("images_root") or cfg.get("root")
    top = outputs.read_frame(d, outputs.TOPK)
    queries = outputs.read_frame(d, outputs.PER_QUERY).drop_duplicates("query_index").set_index("query_index")
    for q, rows in top.groupby("query_index", sort=True):
        meta = queries.loc[q]
        src, err = store.src(root, meta["reference"])
        entries = []
        for r in rows.itertuples(index=False):
            item_src, item_err = store.src(root, str(r.item))
            own = str(r.item) == str(meta["reference"])  # the query's own image, where the rule keeps it
            entries.append(
                Entry(
                    str(r.item),
                    [(str(r.method), f"#{r.rank}"), ("score", _fmt(float(r.score), 4))],
                    item_src,
                    item_err,
                    selected=bool(r.relevant),
                    badges=(["positive"] if r.relevant else []) + (["query image"] if own else []),
                )
            )
        sec.cards.append(Card(f"{meta['query_id']}: {meta['text']}", src, err, entries, "reference image"))
    return sec


def _glance_table(d: Path, run: dict) -> Table | None:
    """Every method's mAP beside its Recall@K (the protocol's ks), each the mean over all queries in percent, the
    best method of each column marked: the RS benchmarks' headline is mAP alone, and Recall@K is what a user
    compares with the other papers."""
    from retrieval.report import metric_title

    if not outputs.has_output(d, outputs.PER_QUERY):
        return None
    per_query = outputs.read_frame(d, outputs.PER_QUERY)
    proto = run.get("metrics") or {}
    wanted = ["ap", *proto.get("headline", []), *(f"hit@{k}" for k in proto.get("ks", []))]
    cols = [c for c in dict.fromkeys(wanted) if c in per_query.columns]
    if per_query.empty or "method" not in per_query.columns or not cols:
        return None
    means = per_query.groupby("method", sort=False)[cols].mean() * 100
    rows = [[str(m), *(_fmt(float(v)) for v in means.loc[m])] for m in means.index]
    table = Table(
        "Methods at a glance (%): mean over all queries; ★ the best method per column",
        ["Method", *(metric_title(c) for c in cols)],
        rows,
        note="Recall@K: the share of queries with a positive among the first K results (the papers' Recall@K).",
        sortable=True,
    )
    return _mark_best(table)


def _mark_best(table: Table) -> Table:
    """Mark the highest value of each numeric column (every tie too): higher is better for mAP and Recall@K."""
    for j in range(1, len(table.columns)):
        values = {}
        for i, row in enumerate(table.rows):
            try:
                values[i] = float(row[j])
            except (ValueError, IndexError):
                continue
        finite = {i: v for i, v in values.items() if not math.isnan(v)}
        if len(finite) > 1:
            top = max(finite.values())
            table.best |= {(i, j) for i, v in finite.items() if v == top}
    return table


def _evaluate_section(d: Path, run: dict, store: ImageStore) -> Section:
    """`reconscore evaluate`: the Table 3 summary (x100 except ReconScore) and the join report."""
    ds = run.get("dataset") or {}
    title = f"Evaluate — {ds.get('dataset', '?')}/{ds.get('split', '?')} — {d.name}"
    meta = [
        (_label(k), str(ds[k])) for k in ("dataset", "split", "images", "references") if ds.get(k) is not None
    ]
    meta += [
        ({"images": "Images joined"}.get(k) or _label(k), str(v))
        for k, v in (run.get("join") or {}).items()
        if not isinstance(v, (list, dict))
    ]
    meta += [("Metrics", ", ".join(run.get("metrics") or [])), (_label("finished"), str(run.get("finished")))]
    sec = Section("evaluate", str(d), title, meta, _banner(run))
    if outputs.has_output(d, outputs.SUMMARY_CSV):
        from eval.report import plots

        written = outputs.table_rows(d, outputs.SUMMARY_CSV)
        table = _csv_table(written, "Summary (x100 except ReconScore)")
        sec.tables.append(table)
        recs = _records(written)
        metrics = table.columns[1:]
        if recs and metrics:
            series = {str(r[table.columns[0]]): [_num(r[m]) for m in metrics] for r in recs}
            figure = plots.bars_figure(metrics, series, title="Summary", ylabel="score")
            sec.plot("corpus score per metric (x100 except ReconScore)", figure)
    per_image = outputs.read_rows(d, outputs.PER_IMAGE, missing_ok=True)
    sec.tables += _failed("images", per_image, {"image": "image_id", "error": "error"})
    return sec


def meta_eval_grid(recs: list[dict]) -> tuple[list[str], list[str], list[list[float]], list[list[str]]]:
    """The benchmark x metric grid of a meta-eval table: one row per (benchmark, category, statistic), one column
    per metric, each cell its value with the 95% CI and the verify status."""
    nan = float("nan")

    def row_of(r: dict) -> str:
        return f"{r['benchmark']}{' ' + r['category'] if r['category'] else ''} {r['statistic']}"

    rows = list(dict.fromkeys(map(row_of, recs)))
    cols = list(dict.fromkeys(r["metric"] for r in recs))
    values = [[nan] * len(cols) for _ in rows]
    labels = [[""] * len(cols) for _ in rows]
    for r in recs:
        i, j = rows.index(row_of(r)), cols.index(r["metric"])
        values[i][j] = _num(r["value"], nan)
        status = r.get("status") or ""
        labels[i][j] = f"{_fmt(_num(r['value'], nan))} {status if status != '—' else ''}\n" \
            f"[{_fmt(_num(r['ci_low'], nan))}, {_fmt(_num(r['ci_high'], nan))}]"  # fmt: skip
    return rows, cols, values, labels


def _meta_eval_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    sec = Section("meta-eval", str(d), f"Meta-evaluation — {d.name}", _meta(run), _banner(run))
    if not outputs.has_output(d, outputs.META_EVAL_CSV):
        return sec
    written = outputs.table_rows(d, outputs.META_EVAL_CSV)
    recs = _records(written)
    if recs:
        rows, cols, values, labels = meta_eval_grid(recs)
        title = "×100 with [95% CI]; ✓ reproduces the published value, ✗ does not"
        sec.plot(title, plots.heatmap_figure(rows, cols, values, labels, title="Benchmark × metric"))
        st = [r["status"] for r in recs]
        sec.headline.append(("reproduced", f"{st.count('✓')} of {len(st) - st.count('—')} published values"))
    keep = ("benchmark", "variant", "category", "metric", "statistic", "value", "ci_low", "ci_high", "n",
            "published", "difference", "status")  # fmt: skip
    idx = [written[0].index(c) for c in keep if c in written[0]]
    sec.tables.append(_csv_table([[row[i] for i in idx] for row in written], "Meta-evaluation table (×100)"))
    for what, why in (run.get("skipped") or {}).items():
        sec.headline.append((f"skipped {what}", why))
    return sec


def _annotate_section(d: Path, run: dict, store: ImageStore) -> Section:
    """A collected judgment set: agreement with its CIs first, then each model's win share (the ReconScore
    paper, Table 6), the preference rate of metric-selected captions (Table 7) and the contested images."""
    sec = Section("annotate-collect", str(d), f"Human judgments — {d.name}", _meta(run), _banner(run))
    for name, a in (run.get("agreement") or {}).items():
        low, high = a.get("ci") or (None, None)
        sec.headline.append((_label(name), f"{_fmt(a.get('value'), 3)} [{_fmt(low, 3)}, {_fmt(high, 3)}]"))
    for name, title in (
        (outputs.AGREEMENT, f"Agreement among annotators ({run.get('ci', 'bootstrap CI over images')})"),
        (outputs.WIN_SHARE, "Win share per model (consensus ranks it first; a tie for first splits the win)"),
        (outputs.PREFERENCE, "Preference rate of metric-selected captions"),
        (outputs.CONTESTED, "Contested images (lowest agreement first)"),
    ):
        written = outputs.table_rows(d, name) if outputs.has_output(d, name) else []
        if len(written) > 1:
            sec.tables.append(_csv_table(written, title, digits=3))
    return sec


LOADERS = {
    "meta-eval": _meta_eval_section,
    "annotate-collect": _annotate_section,
    "evaluate": _evaluate_section,
    "score": _score_section,
    "describe": _describe_section,
    "correlate": _correlate_section,
    "study": _study_section,
    "retrieve": _retrieve_section,
}


def load_section(d: Path, store: ImageStore) -> Section:
    from recon_score.run_engine import load_record

    run = load_record(d)
    kind = run.get("command")
    loader = LOADERS.get(kind)
    if loader is None:
        return Section(str(kind), str(d), f"{kind} — {d.name}", _meta(run), _banner(run))
    return loader(d, run, store)


@dataclass
class CardPart:
    """The slice of one card on one page: its entries `start`..`start + len(entries)` of `card.entries`."""

    card: Card
    number: int  # the card's 1-based position in its run
    entries: list[Entry]
    start: int

    @property
    def continued(self) -> str:
        """ "captions 251-500 of 1,250" for a card split over pages; "" for a whole card."""
        total = len(self.card.entries)
        if len(self.entries) == total:
            return ""
        return f"captions {self.start + 1:,}-{self.start + len(self.entries):,} of {total:,}"


def paginate(cards: list[Card], page_size: int, page_rows: int) -> list[list[CardPart]]:
    """Cards in pages of at most `page_size` cards and `page_rows` entries; a card with more entries than fit
    continues on the next page (one part per page), so no page grows with the run's captions per image."""
    pages: list[list[CardPart]] = []
    page: list[CardPart] = []
    rows = 0
    for number, card in enumerate(cards, start=1):
        start = 0
        while True:
            if page and (len(page) >= page_size or rows >= page_rows):
                pages.append(page)
                page, rows = [], 0
            take = card.entries[start : start + page_rows - rows]
            page.append(CardPart(card, number, take, start))
            rows += len(take)
            start += len(take)
            if start >= len(card.entries):
                break
    return [*pages, page] if page else pages


def _page_images(parts: list[CardPart], store: ImageStore) -> dict[str, str]:
    """The embedded data URIs a page's cards name, each once."""
    refs: dict[str, str] = {}
    for part in parts:
        srcs = [part.card.original]
        for e in part.entries:
            srcs += [e.recon, e.held_out, getattr(e.explain, "heatmap", None)]
        refs |= {src: store.embedded[src] for src in srcs if src in store.embedded}
    return refs


def _make_folder(folder: Path) -> None:
    """The page's folder; a disk or a folder that refuses it (read-only, forbidden, full) is one line.

    Raises:
        WriteError: naming the folder that could not be created.
    """
    from recon_score.atomic_io import DISK_FULL, WRITE_REFUSED, write_error

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if err.errno not in WRITE_REFUSED:
            raise
        raise write_error(err, folder, None if err.errno in DISK_FULL else "choose another --out") from err


def build_report(
    run_dirs: list[Path],
    out: Path,
    *,
    images: str = "embed",
    page_size: int = 50,
    page_rows: int = 250,
    title: str = "reconscore report",
) -> list[Path]:
    """Write the report's pages (out, then out-p2.html, ...); returns their paths."""
    import json

    from jinja2 import Environment, PackageLoader, select_autoescape

    if page_size < 1 or page_rows < 1:
        raise ValueError("page_size and page_rows must be >= 1")
    out = Path(out)
    from recon_score.run_engine import check_file_target

    check_file_target(out)  # e.g. RUN/scores.jsonl or a link to it: the results would be replaced by HTML
    _make_folder(out.parent)
    store = ImageStore(images, out.parent / f"{out.stem}_files" if images == "link" else None)
    sections = [load_section(Path(d), store) for d in run_dirs]
    paged = [paginate(s.cards, page_size, page_rows) for s in sections]
    n_pages = max([1] + [len(p) for p in paged])
    names = [out.name] + [f"{out.stem}-p{p}{out.suffix or '.html'}" for p in range(2, n_pages + 1)]
    env = Environment(
        loader=PackageLoader("eval.report", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=visible_controls,
    )
    template = env.get_template("report.html.j2")
    for name in names[1:]:  # out-p2.html, ...: refused, like out, before any page is written
        check_file_target(out.parent / name, what="--out's page")
    written = []
    for p in range(n_pages):
        page_sections = []
        images: dict[str, str] = {}
        for s, parts in zip(sections, paged):
            cards = parts[p] if p < len(parts) else []
            images |= _page_images(cards, store)
            page_sections.append({"s": s, "cards": cards, "first": p == 0})
        # ids and base64 only; "<" escaped all the same, so the table can never end its <script> early
        table = json.dumps(images, separators=(",", ":")).replace("<", "\\u003c")
        html = template.render(
            title=title, sections=page_sections, page=p + 1, pages=names, n_pages=n_pages, images=table
        )
        path = out.parent / names[p]
        from recon_score.atomic_io import atomic_write_text

        atomic_write_text(path, html)
        written.append(path)
    return written
