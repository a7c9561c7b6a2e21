"""`reconscore report`: static HTML pages for score, describe, correlate, study and retrieve runs.

Self-contained by default: thumbnails (originals, which may be TIFFs browsers cannot show, and
reconstructions) are embedded as JPEG data URIs and plots as PNG data URIs, so the page opens offline and can be
mailed. `--images link` writes the thumbnails next to the page instead (smaller pages for big runs). Runs of
thousands of images are split into pages of `page_size` images per run, with lazy-loading images.
Everything that comes from a run (captions, ids, paths, errors, table cells) is HTML-escaped by jinja2's
autoescaping; nothing user-provided is ever marked safe.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from recon_score.errors import ReconScoreError
from recon_score.textfiles import csv_dicts, csv_rows, json_objects, read_json

THUMB_SIDE = 256


@dataclass
class Entry:
    caption: str | None
    scores: list[tuple[str, str]]  # (label, formatted value)
    recon: str | None = None  # img src
    error: str | None = None
    selected: bool = False
    rank: int | None = None


@dataclass
class Card:
    title: str
    original: str | None
    original_error: str | None
    entries: list[Entry]
    original_label: str = "original"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


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


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


class ImageStore:
    """Turns image files into <img src> values: embedded data URIs or thumbnails written next to the page."""

    def __init__(self, mode: str, assets: Path | None, page_dir: Path):
        if mode not in ("embed", "link"):
            raise ValueError(f"images mode must be embed or link, got {mode!r}")
        self.mode, self.assets, self.page_dir = mode, assets, page_dir
        self._memo: dict[str, str] = {}

    def src(self, path: Path | None) -> tuple[str | None, str | None]:
        """(src, error) for an image file; an unreadable file gives an error to show instead."""
        if path is None:
            return None, "no image path recorded"
        key = str(path)
        if key in self._memo:
            return self._memo[key], None
        from recon_score.errors import ImageLoadError
        from recon_score.images import load_image

        try:
            img = load_image(path)
        except ImageLoadError as err:
            return None, str(err)
        img.thumbnail((THUMB_SIDE, THUMB_SIDE))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=85)
        data = buf.getvalue()
        if self.mode == "embed":
            src = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
        else:
            name = hashlib.sha256(key.encode()).hexdigest()[:20] + ".jpg"
            self.assets.mkdir(parents=True, exist_ok=True)
            (self.assets / name).write_bytes(data)
            src = f"{self.assets.name}/{name}"
        self._memo[key] = src
        return src, None


def _png_src(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [obj for _, obj in json_objects(path)]


def _root(run: dict) -> Path | None:
    root = run.get("images_root") or (run.get("source") or {}).get("images_dir")
    return Path(root) if root else None


def _meta(run: dict) -> list[tuple[str, str]]:
    out = []
    preset = run.get("preset") or (run.get("config") or {}).get("preset")
    if isinstance(preset, dict):
        out.append(("preset", str(preset.get("name"))))
    for key in ("finished", "processes", "limit"):
        if run.get(key) is not None:
            out.append((key, str(run[key])))
    for k, v in (run.get("counts") or {}).items():
        out.append((k, str(v)))
    for k, v in (run.get("summary") or {}).items():
        out.append((k, _fmt(v)))
    return out


def _score_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    rows = _read_jsonl(d / "scores.jsonl")
    sec = Section("score", str(d), f"ReconScore — {d.name}", _meta(run), run.get("note"))
    ok = [r["recon_score"] for r in rows if r.get("recon_score") is not None]
    if ok:
        sec.figures.append(
            Figure(
                "ReconScore distribution",
                _png_src(plots.histogram(ok, title="ReconScore", xlabel="ReconScore")),
            )
        )
    failed = [r for r in rows if r.get("error")]
    if failed:
        sec.tables.append(
            Table(
                f"Failed rows ({len(failed)})",
                ["id", "image", "error"],
                [[str(r.get("id")), str(r.get("image")), str(r.get("error"))] for r in failed[:200]],
            )
        )
    root = _root(run)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("image")), []).append(r)
    for image, items in groups.items():
        src, err = store.src(root / image if root and image != "None" else None)
        entries = []
        for r in items:
            rsrc = store.src(d / r["reconstruction"])[0] if r.get("reconstruction") else None
            entries.append(
                Entry(
                    r.get("caption"),
                    [("ReconScore", _fmt(r.get("recon_score"))), ("cos", _fmt(r.get("cosine"), 4))],
                    rsrc,
                    r.get("error"),
                )
            )
        sec.cards.append(Card(image, src, err, entries))
    return sec


def _describe_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    caps = _read_jsonl(d / "captions.jsonl")
    cands = _read_jsonl(d / "candidates.jsonl")
    metric = (run.get("selection") or {}).get("metric", "score")
    sec = Section("describe", str(d), f"RemoteDescriber — {d.name}", _meta(run), run.get("note"))
    sel = [c["score"] for c in caps if c.get("score") is not None]
    if sel:
        sec.figures.append(
            Figure(
                f"selected {metric}",
                _png_src(plots.histogram(sel, title=f"selected {metric}", xlabel=metric)),
            )
        )
    root = _root(run)
    by_image: dict[str, list[dict]] = {}
    for c in cands:
        by_image.setdefault(str(c["image_id"]), []).append(c)
    for cap in caps:
        src, err = store.src(root / cap["image"] if root and cap.get("image") else None)
        ranked = sorted(
            by_image.get(str(cap["image_id"]), []),
            key=lambda c: (c.get(metric) is None, -(c.get(metric) or 0.0), c["index"]),
        )
        entries = []
        for rank, c in enumerate(ranked, start=1):
            rsrc = store.src(d / c["reconstruction"])[0] if c.get("reconstruction") else None
            entries.append(
                Entry(
                    c.get("caption"),
                    [(metric, _fmt(c.get(metric))), ("#", str(c["index"]))],
                    rsrc,
                    c.get("error"),
                    selected=bool(c.get("selected")),
                    rank=rank,
                )
            )
        title = str(cap["image_id"]) + (f" — {cap['error']}" if cap.get("error") else "")
        sec.cards.append(Card(title, src, err, entries))
    return sec


def _csv_table(path: Path, title: str, digits: int = 2) -> Table:
    rows = [r for _, r in csv_rows(path)]
    if not rows:
        return Table(title, [], [])

    def cell(v: str) -> str:
        try:
            return _fmt(float(v), digits) if v not in ("", "nan") and not v.lstrip("-").isdigit() else v
        except ValueError:
            return v

    return Table(title, rows[0], [[cell(v) for v in r] for r in rows[1:]])


def _correlate_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    sec = Section("correlate", str(d), f"Agreement with humans — {d.name}", _meta(run), run.get("note"))
    path = d / "correlations.csv"
    if path.exists():
        table = _csv_table(path, "Kendall τ ×100 (flattened rows)")
        sec.tables.append(table)
        cols = table.columns
        if "metric" in cols:
            recs = [r for _, r in csv_dicts(path)[1]]
            series = {}
            for tau in ("tau_b", "tau_c"):
                if tau in cols:
                    series[tau.replace("_", "-")] = [
                        float(r[tau]) if r[tau] not in ("", "nan") else 0.0 for r in recs
                    ]
            if series:
                sec.figures.append(
                    Figure(
                        "τ per metric",
                        _png_src(
                            plots.bars(
                                [r["metric"] for r in recs], series, title="Kendall τ ×100", ylabel="τ ×100"
                            )
                        ),
                    )
                )
    return sec


def _study_section(d: Path, run: dict, store: ImageStore) -> Section:
    from eval.report import plots

    name = run.get("study", "study")
    sec = Section("study", str(d), f"Study `{name}` — {d.name}", _meta(run), run.get("note"))
    for path in sorted(d.glob("*.csv")):
        sec.tables.append(_csv_table(path, path.stem))
    curve = run.get("curve")  # {"x": [...], "xlabel": str, "series": {name: [...]}, "ylabel": str}
    if curve:
        sec.figures.append(
            Figure(
                curve.get("title", name),
                _png_src(
                    plots.curve(
                        curve["x"],
                        curve["series"],
                        title=curve.get("title", name),
                        xlabel=curve.get("xlabel", ""),
                        ylabel=curve.get("ylabel", ""),
                    )
                ),
            )
        )
    return sec


def _retrieve_section(d: Path, run: dict, store: ImageStore) -> Section:
    """Seed-layout tables, and with `--topk` one card per query: the reference image, its text, and each
    method's top-k database images (positives highlighted)."""
    import pandas as pd

    cfg = run.get("config") or {}
    bench = run.get("benchmark") or {}
    sec = Section(
        "retrieve",
        str(d),
        f"Composed retrieval — {bench.get('name', cfg.get('benchmark'))} — {d.name}",
        [],
        None,
    )
    sec.meta = [("encoder", str(cfg.get("encoder"))), ("finished", str(run.get("finished")))]
    sec.meta += [(name, rec.get("status", "?")) for name, rec in (run.get("methods") or {}).items()]
    from retrieval.report import metric_title

    for metric in (run.get("metrics") or {}).get("headline", []):  # the protocol's order
        for suffix, level in (("", "group"), ("_by_subgroup", "subgroup")):
            path = d / f"table_{metric.replace('@', '_at_')}{suffix}.csv"
            if path.exists():
                sec.tables.append(_csv_table(path, f"{metric_title(metric)} (%) by {level}"))
    top_path = d / "topk.parquet"
    if not top_path.exists():
        return sec
    root = Path(cfg["root"]) if cfg.get("root") else None
    top = pd.read_parquet(top_path)
    queries = pd.read_parquet(d / "per_query.parquet").drop_duplicates("query_index").set_index("query_index")
    for q, rows in top.groupby("query_index", sort=True):
        meta = queries.loc[q]
        src, err = store.src(root / meta["reference"] if root is not None else None)
        entries = []
        for r in rows.itertuples(index=False):
            item_src, item_err = store.src(root / r.item if root is not None else None)
            entries.append(
                Entry(
                    str(r.item),
                    [(str(r.method), f"#{r.rank}"), ("score", _fmt(float(r.score), 4))]
                    + ([("positive", "yes")] if r.relevant else []),
                    item_src,
                    item_err,
                    selected=bool(r.relevant),
                )
            )
        sec.cards.append(Card(f"{meta['query_id']}: {meta['text']}", src, err, entries, "reference image"))
    return sec


LOADERS = {
    "score": _score_section,
    "describe": _describe_section,
    "correlate": _correlate_section,
    "study": _study_section,
    "retrieve": _retrieve_section,
}


def load_section(d: Path, store: ImageStore) -> Section:
    run_path = d / "run.json"
    if not run_path.exists():
        raise ReconScoreError(f"{d} has no run.json: not a reconscore run folder")
    run = read_json(run_path, expect=dict)
    kind = run.get("command")
    loader = LOADERS.get(kind)
    if loader is None:
        return Section(str(kind), str(d), f"{kind} — {d.name}", _meta(run), run.get("note"))
    return loader(d, run, store)


def build_report(
    run_dirs: list[Path],
    out: Path,
    *,
    images: str = "embed",
    page_size: int = 50,
    title: str = "reconscore report",
) -> list[Path]:
    """Write the report's pages (out, then out-p2.html, ...); returns their paths."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    if page_size < 1:
        raise ValueError("page_size must be >= 1")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    store = ImageStore(images, out.parent / f"{out.stem}_files" if images == "link" else None, out.parent)
    sections = [load_section(Path(d), store) for d in run_dirs]
    n_pages = max([1] + [math.ceil(len(s.cards) / page_size) for s in sections])
    names = [out.name] + [f"{out.stem}-p{p}{out.suffix or '.html'}" for p in range(2, n_pages + 1)]
    env = Environment(
        loader=PackageLoader("eval.report", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    template = env.get_template("report.html.j2")
    written = []
    for p in range(n_pages):
        page_sections = []
        for s in sections:
            cards = s.cards[p * page_size : (p + 1) * page_size]
            page_sections.append({"s": s, "cards": cards, "first": p == 0, "offset": p * page_size})
        html = template.render(title=title, sections=page_sections, page=p + 1, pages=names, n_pages=n_pages)
        path = out.parent / names[p]
        from recon_score.cache import atomic_write_text

        atomic_write_text(path, html)
        written.append(path)
    return written
