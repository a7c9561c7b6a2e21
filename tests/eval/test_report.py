"""`reconscore report`: static pages for every run kind, rendered by a real headless Chromium (screenshots, loaded
images, the smoke banner); user text is escaped; images only from a run's own roots."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from eval.report import plots

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KINDS = ("score", "describe", "correlate", "n-sweep", "encoders", "evaluate", "retrieve")
BANNER_RGB = (255, 244, 214)  # .note background (#fff4d6)


@pytest.fixture(scope="module")
def runs(report_runs):
    return report_runs


def _report(run_dirs, out: Path, *extra: str) -> str:
    assert main(["report", *map(str, run_dirs), "--out", str(out), *extra]) == 0
    return out.read_text()


def test_report_pages_and_escaping(runs, tmp_path):
    out = tmp_path / "report.html"
    html = _report([runs["score"], runs["describe"], runs["correlate"]], out, "--page-size", "1")
    every = "".join(p.read_text() for p in tmp_path.glob("report*.html"))  # score cards are sorted by score
    assert "&lt;script&gt;document.title" in every and "<script>document.title" not in every
    assert "onerror=alert" not in every.replace("onerror=alert(1)&gt;", "")  # only as escaped text
    assert html.count("data:image/png;base64,") >= 2  # plots
    assert "not found" in every  # the missing image is shown as an error (its card sorts last)
    pages = sorted(tmp_path.glob("report*.html"))
    assert [p.name for p in pages] == [
        "report-p2.html",
        "report-p3.html",
        "report.html",
    ]  # 3 images, 1 per page
    assert 'href="report-p2.html"' in html
    # describer: candidates ranked, the selected one outlined, each with its reconstruction
    assert html.count('class="entry selected"') == 1 and "rank 1" in html
    assert "Agreement with humans" in html and "tau_b" in html and "τ per metric" in html
    # a table of contents on a multi-run page, one link per run
    toc = re.search(r'<nav class="toc".*?</nav>', html, re.S).group(0)
    assert toc.count('href="#run-') == 3
    for page in pages:  # every page of every smoke run keeps the banner
        assert page.read_text().count('class="note smoke"') == 3


def test_smoke_banner_on_every_kind(runs, tmp_path):
    """Studies, evaluate and retrieve runs record no note; the banner comes from their models or input runs."""
    for kind in KINDS:
        html = _report([runs[kind]], tmp_path / f"{kind}.html")
        assert html.count('class="note smoke"') == 1, kind
        assert "these numbers are meaningless" in html, kind
    real = tmp_path / "real"  # the same tables from a run that used no smoke model: no banner
    shutil.copytree(runs["correlate"], real)
    rec = {"command": "correlate", "meaningless": False, "job": {"metrics": "bleu4,rouge", "preset": "paper"}}
    (real / "run.json").write_text(json.dumps(rec))
    assert 'class="note smoke"' not in _report([real], tmp_path / "real.html")


def test_score_page_marks_best_caption_and_kinds(runs, tmp_path):
    html = _report([runs["score"]], tmp_path / "s.html")
    rows = [json.loads(x) for x in (runs["score"] / "scores.jsonl").read_text().splitlines()]
    ucm1 = [r for r in rows if r["image"] == "images/UCM_1.tif"]
    best = max(ucm1, key=lambda r: r["recon_score"])
    assert html.count('<span class="badge best">best</span>') == 1  # only UCM_1 has several captions
    card = html[html.index("images/UCM_1.tif</h3>") :]
    entry = card[card.index('class="entry best"') :]
    assert f"ReconScore {best['recon_score']:.2f}" in entry[: entry.index('class="caption"')]
    assert html.count('class="badge reference"') == 1 and html.count('class="badge distractor"') == 1


def test_bundled_sample_marks_references_and_distractors(tmp_path, sample_dir):
    """The bundled sample without a `kind` field: a caption among the image's references is a reference."""
    from recon_score.run import SAMPLE_DIR

    run = tmp_path / "sample"
    (run / "reconstructions").mkdir(parents=True)
    refs = json.loads((SAMPLE_DIR / "references.json").read_text())
    caps = [json.loads(x) for x in (SAMPLE_DIR / "captions.jsonl").read_text().splitlines()]
    rows = [{**c, "recon_score": 50.0 + i, "cosine": 0.0, "reconstruction": None} for i, c in enumerate(caps)]
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {
        "command": "score",
        "captions": str(SAMPLE_DIR / "captions.jsonl"),
        "images_root": str(SAMPLE_DIR),
        "meaningless": False,
    }
    (run / "run.json").write_text(json.dumps(record))
    html = _report([run], tmp_path / "r.html", "--page-size", "100")
    ref_set = {(r["image"], c) for r in refs for c in r["captions"]}
    n_ref = sum((c["image"], c["caption"]) in ref_set for c in caps)
    assert html.count('class="badge reference"') == n_ref > 0
    assert html.count('class="badge distractor"') == len(caps) - n_ref
    assert html.count('<span class="badge best">') == len({c["image"] for c in caps})


def test_describe_page_shows_references(runs, tmp_path):
    html = _report([runs["describe"]], tmp_path / "d.html")
    caps = [json.loads(x) for x in (runs["describe"] / "captions.jsonl").read_text().splitlines()]
    refs = caps[0].get("references") or []
    assert refs, "the bundled describe sample carries references"
    assert html.count('<ol class="refs">') == len(caps)
    block = re.search(r'<ol class="refs">(.*?)</ol>', html, re.S).group(1)
    assert block.count("<li>") == len(refs)


def test_images_resolve_from_any_cwd(runs, tmp_path, monkeypatch):
    """The retrieve run was started with a relative --root; the report is built from another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    html = _report([runs["retrieve"]], Path("r.html"))
    assert "not found" not in html and html.count("data:image/jpeg") >= 2
    old = tmp_path / "old"  # a run from before images_root was recorded: a clear message, not a wrong image
    shutil.copytree(runs["retrieve"], old)
    rec = json.loads((old / "run.json").read_text())
    rec.pop("images_root")
    (old / "run.json").write_text(json.dumps(rec))
    assert "was recorded as a relative path" in _report([old], Path("o.html"))


def test_never_embeds_files_outside_the_roots(runs, tmp_path):
    run = tmp_path / "evil"
    shutil.copytree(runs["score"], run)
    secret = tmp_path / "secret.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(secret)
    rows = [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]
    rows[0]["image"] = "../../../" * 8 + str(secret).lstrip("/")
    rows[1]["image"] = str(secret)  # absolute
    rows[2]["reconstruction"] = "../secret.png"
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = _report([run], tmp_path / "e.html")
    assert html.count("outside the data root") == 3  # two originals, one reconstruction
    recon_imgs = re.findall(r'<img data-embedded="embedded:\d+" alt="reconstruction"', html)
    assert len(recon_imgs) == sum(1 for r in rows if r.get("reconstruction")) - 1


def test_link_mode_writes_thumbnails(runs, tmp_path):
    html = _report([runs["score"]], tmp_path / "r.html", "--thumbnails", "link")
    thumbs = list((tmp_path / "r_files").glob("*.jpg"))
    assert len(thumbs) >= 4 and "r_files/" in html


def test_not_a_run_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 1
    assert "no run.json" in capsys.readouterr().err


def test_plots_integer_n_no_offset_and_ci_whiskers():
    fig = plots.curve_figure(
        [1, 2, 4], {"a": [98.51, 98.52, 98.53]}, title="t", xlabel="N", ylabel="s", integer_x=True
    )
    fig.canvas.draw()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert ax.yaxis.get_offset_text().get_text() == ""  # matplotlib's default would print +9.85e1
    fig = plots.bars_figure(
        ["bleu4", "rouge"],
        {"tau-b": [10.0, 20.0], "tau-c": [9.0, 19.0]},
        title="t",
        ylabel="τ",
        errors={"tau-b": ([5.0, 15.0], [12.0, 30.0])},
        headline="tau-b",
    )
    ax = fig.axes[0]
    (bars_err,) = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    segments = bars_err.lines[2][0].get_segments()
    assert [tuple(np.round([s[0][1], s[1][1]], 6)) for s in segments] == [(5.0, 12.0), (15.0, 30.0)]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tau-b (headline)", "tau-c"]


def test_page_weight_is_bounded_for_big_runs(tmp_path, sample_dir):
    """120 images, 50 per page: each page holds 50 thumbnail pairs however big the run (docs/report.md gives
    the size measured for 1,000 images)."""
    run = tmp_path / "big"
    (run / "reconstructions").mkdir(parents=True)
    (run / "images").mkdir()
    base = np.asarray(Image.open(sample_dir / "images" / "UCM_1.tif").convert("RGB"))
    rows = []
    for i in range(120):
        img = np.roll(base, 7 * i, axis=1)
        Image.fromarray(img).save(run / "images" / f"{i}.png")
        Image.fromarray(img[::-1]).save(run / "reconstructions" / f"{i}.png")
        rows.append(
            {
                "id": str(i),
                "image": f"images/{i}.png",
                "caption": "farmland",
                "recon_score": 50.0,
                "reconstruction": f"reconstructions/{i}.png",
            }
        )
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(
        json.dumps({"command": "score", "images_root": str(run), "meaningless": False})
    )
    assert main(["report", str(run), "--out", str(tmp_path / "big.html")]) == 0
    pages = sorted(tmp_path.glob("big*.html"))
    assert len(pages) == 3
    sizes = [p.stat().st_size for p in pages]
    assert max(sizes) < 50 * 2 * 40_000 + 200_000  # 50 cards x 2 thumbnails of <= 40 kB, plus the plot
    assert all(p.read_text().count("data:image/jpeg") <= 100 for p in pages)


def _chromium(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        f"--user-data-dir={cwd / 'chrome-profile'}",
    ]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_every_page_kind_renders_in_headless_chromium(runs, tmp_path):
    """Per page kind: the DOM after JS ran (every image decoded, none broken, the banner there, the caption's
    script never ran) and a screenshot showing the banner and pictures. RECONSCORE_SHOTS=DIR keeps them."""
    shots = Path(os.environ.get("RECONSCORE_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        out = tmp_path / f"{kind}.html"
        _report([runs[kind]], out)
        dom = _chromium(["--virtual-time-budget=10000", "--dump-dom", out.as_uri()], tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        body = re.search(r"<body([^>]*)>", dom.stdout).group(1)
        total, loaded, broken = (
            int(re.search(rf'data-images-{k}="(\d+)"', body).group(1)) for k in ("total", "loaded", "broken")
        )
        assert total >= 1 and loaded == total and broken == 0, (kind, total, loaded, broken)
        assert "pwned" not in re.search(r"<title>(.*?)</title>", dom.stdout, re.S).group(1)
        assert re.search(r'<p class="note smoke"[^>]*>smoke preset', dom.stdout), kind
        shot = shots / f"{kind}.png"
        r = _chromium(["--window-size=1280,1400", f"--screenshot={shot}", out.as_uri()], tmp_path)
        assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
        with Image.open(shot) as im:
            px = np.asarray(im.convert("RGB"), dtype=np.int16)
        assert px.shape[:2] == (1400, 1280)
        banner = np.all(np.abs(px[:500] - BANNER_RGB) <= 2, axis=-1).sum()
        assert banner > 5_000, (kind, banner)  # the yellow banner is visible near the top
        assert len(np.unique(px.reshape(-1, 3)[::5], axis=0)) > 300, kind  # plots or photos, not flat text


def test_score_page_leads_with_the_headline_and_sorts_cards(runs, tmp_path):
    html = _report([runs["score"]], tmp_path / "s.html")
    rows = [json.loads(x) for x in (runs["score"] / "scores.jsonl").read_text().splitlines()]
    head = re.search(r'<div class="headline".*?</div>\s*\n', html, re.S).group(0)
    assert html.index('class="headline"') < html.index('class="plot"') < html.index('class="card"')
    ref = next(r for r in rows if r.get("kind") == "reference")["recon_score"]
    dis = next(r for r in rows if r.get("kind") == "distractor")["recon_score"]
    assert f"{ref:.2f} vs {dis:.2f}" in head
    assert f"{int(ref > dis)}/1 images ({100 * int(ref > dis)}%)" in head
    titles = re.findall(r"<h3>\d+\. (images/[^<]+)</h3>", html)
    best = {}
    for r in rows:
        v = r.get("recon_score")
        best[r["image"]] = max(best.get(r["image"], -1.0), v if v is not None else -1.0)
    assert titles == sorted(best, key=lambda k: -best[k])  # best-scored image first, the failed one last


def test_describe_cards_show_selection_and_held_out_scores(runs, tmp_path):
    """Each score under the name of what it measures, with the held-out reconstruction beside the selection
    render of the chosen caption."""
    html = _report([runs["describe"]], tmp_path / "d.html")
    caps = [json.loads(x) for x in (runs["describe"] / "captions.jsonl").read_text().splitlines()]
    for cap in caps:
        card = html[html.index(f"{cap['image_id']}</h3>") :]
        entry = card[card.index('class="entry selected"') :]
        entry = entry[: entry.index('class="caption"')]
        assert f"selection_score {cap['selection_score']:.2f}" in entry
        assert f"recon_score {cap['recon_score']:.2f}" in entry
        assert "held-out render (recon_score)" in entry and "selection render (selection_score)" in entry
    assert "recon_score (held-out render, mean)" in html
    assert html.count('alt="held-out render"') == len(caps)


def test_histogram_tick_labels_never_overlap():
    """A --seeds run's means sit in a narrow range: matplotlib's default ticks overlap there (checked), ours
    do not."""
    from matplotlib.ticker import AutoLocator

    rng = np.random.default_rng(0)
    for values in (
        [98.3312 + 0.0001 * i for i in range(40)],
        list(rng.normal(98.33, 0.004, 60)),
        list(rng.normal(71.2345, 0.0003, 12)),
        [10.0, 90.0],
    ):
        fig = plots.histogram_figure(values, title="t", xlabel="ReconScore")
        ax = fig.axes[0]
        assert not plots.overlapping_x_labels(fig, ax), values[:3]
        assert len([t for t in ax.get_xticklabels() if t.get_text()]) >= 2
    fig = plots.histogram_figure([98.3312 + 0.0001 * i for i in range(40)], title="t", xlabel="x")
    fig.axes[0].xaxis.set_major_locator(AutoLocator())
    assert plots.overlapping_x_labels(fig, fig.axes[0])  # the case the check exists for
