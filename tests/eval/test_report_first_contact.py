"""The report as a researcher reads it: a table of every caption to sort and filter, what made the numbers in each
run's header, mAP beside Recall@K with the best marked, hostile values refused or shown harmlessly; checked in a
real headless Chromium where one is installed."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from eval.cli import main
from recon_score.presets import SMOKE_NOTE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SMOKE = {"name": "smoke", "t2i_model": "smoke:z-image", "encoder": "smoke:dreamsim", "meaningless": True}


def _score_run(root: Path, rows: list[dict], **run) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), "green").save(root / "a.png")
    (root / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {
        "command": "score",
        "images_root": str(root),
        "preset": SMOKE,
        "note": SMOKE_NOTE,
        "meaningless": True,
    }
    (root / "run.json").write_text(json.dumps({**record, **run}))
    return root


def _row(i: int, score, caption: str = "a green field", **extra) -> dict:
    return {
        "id": f"r{i}",
        "image": "a.png",
        "caption": caption,
        "recon_score": score,
        "kind": "reference",
        **extra,
    }


def _report(run_dirs, out: Path) -> str:
    assert main(["report", *map(str, run_dirs), "--out", str(out)]) == 0
    return out.read_text()


def test_every_caption_table_header_models_and_seed_std(tmp_path):
    per_seed = {"recon_score_per_seed": [70.0, 71.5, 73.0]}
    rows = [_row(0, 71.5, recon_score_std=1.25, **per_seed), _row(1, 64.0, "a road", recon_score_std=0.5)]
    html = _report([_score_run(tmp_path / "run", rows)], tmp_path / "r.html")
    table = re.search(r'<table class="sortable">.*?</table>', html, re.S).group(0)
    heads = re.findall(r"<th><button[^>]*>([^<]*)</button></th>", table)
    assert heads == ["image", "id", "kind", "caption", "words", "ReconScore", "std over seeds", "error"]
    assert f"Every caption (2) — {SMOKE_NOTE}" in html  # the banner's words, not a second wording
    assert "<td>a road</td><td>2</td><td>64.00</td><td>0.50</td>" in table
    assert '<input class="filter" type="search"' in html
    assert "<b>T2I model</b> smoke:z-image" in html and "<b>Encoder</b> smoke:dreamsim" in html
    assert "ReconScore 71.50 ± 1.25 (3 seeds) · cos" in html and "± over seeds" not in html
    assert "word-break: break-all" not in html  # titles wrap between words


def test_one_caption_has_no_mean_over_captions(tmp_path):
    html = _report([_score_run(tmp_path / "run", [_row(0, 71.5)])], tmp_path / "r.html")
    assert "71.50, 1 caption scored" in html and "over 1 captions" not in html


def test_a_score_that_is_not_a_number_is_a_file_line_error(tmp_path, capsys):
    run = _score_run(tmp_path / "run", [_row(0, 71.5), _row(1, "high"), _row(2, True)])
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert f"error: {run / 'scores.jsonl'}:2: `recon_score` is 'high', not a number" in err
    assert "Traceback" not in err and not (tmp_path / "r.html").exists()


def test_control_characters_never_reach_the_html_raw(tmp_path):
    rows = [_row(0, 71.5, "a field\x00 with\x07 a road\x1b[31m")]
    html = _report([_score_run(tmp_path / "run", rows)], tmp_path / "r.html")
    assert "\x00" not in html and "\x07" not in html and "\x1b" not in html
    assert "a field\u2400 with\u2407 a road\u241b[31m" in html


def test_retrieval_page_shows_recall_beside_map_and_marks_the_best(tmp_path):
    run = tmp_path / "retrieve"
    run.mkdir()
    per_query = pd.DataFrame(
        {
            "method": ["text"] * 2 + ["sum"] * 2,
            "query_index": [0, 1, 0, 1],
            "ap": [0.5, 0.25, 1.0, 0.5],
            "hit@1": [0.0, 0.0, 1.0, 0.0],
            "hit@5": [1.0, 1.0, 1.0, 1.0],
        }
    )
    per_query.to_parquet(run / "per_query.parquet")
    record = {
        "command": "retrieve",
        "metrics": {"headline": ["ap"], "ks": [1, 5]},
        "benchmark": {"name": "b"},
        "meaningless": False,
    }
    (run / "run.json").write_text(json.dumps({**record, "config": {"encoder": "e"}}))
    html = _report([run], tmp_path / "r.html")
    table = re.search(r"Methods at a glance.*?</table>", html, re.S).group(0)
    assert re.findall(r"<th><button type=\"button\">([^<]*)</button></th>", table) == [
        "Method",
        "mAP",
        "Recall@1",
        "Recall@5",
    ]
    assert '<tr><td>text</td><td>37.50</td><td>0.00</td><td class="best">100.00</td></tr>' in table
    assert (
        '<tr><td>sum</td><td class="best">75.00</td><td class="best">50.00</td><td class="best">100.00</td>'
        in table
    )


def _chromium(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"]
    base += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    return subprocess.run(
        [*base, f"--user-data-dir={cwd / 'profile'}", *args], capture_output=True, text=True, timeout=180
    )


def _harness_result(tmp_path: Path):
    """What tmp_path/harness.html left in its body's data-result attribute after headless chromium ran it."""
    page = (tmp_path / "harness.html").as_uri()
    dom = _chromium(
        ["--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom", page], tmp_path
    )
    found = re.search(r'data-result="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_sort_and_filter_in_headless_chromium(tmp_path):
    """A harness page drives the report in an iframe as a reader would: click a header twice, type a filter."""
    rows = [
        _row(0, 64.0, "b field"),
        _row(1, 90.5, "a road here"),
        _row(2, None, "c", error="x"),
        _row(3, 71.0),
    ]
    _report([_score_run(tmp_path / "run", rows)], tmp_path / "r.html")
    (tmp_path / "harness.html").write_text(
        """<!DOCTYPE html><html><body><iframe src="r.html" width="1200" height="800"></iframe><script>
        document.querySelector("iframe").addEventListener("load", function () {
          var doc = this.contentDocument, t = doc.querySelector("table.sortable");
          function col(i) { return Array.from(t.tBodies[0].rows).filter(r => !r.hidden).map(r => r.cells[i].textContent).join("|"); }
          var score = t.tHead.rows[0].cells[5].querySelector("button");
          score.click(); var up = col(5); score.click(); var down = col(5);
          t.tHead.rows[0].cells[4].querySelector("button").click(); var words = col(4);
          var box = doc.querySelector("input.filter"); box.value = "ROAD"; box.dispatchEvent(new Event("input"));
          document.body.setAttribute("data-result", JSON.stringify([up, down, words, col(3)]));
        });</script></body></html>"""
    )
    up, down, words, filtered = _harness_result(tmp_path)
    assert up == "64.00|71.00|90.50|—" and down == "90.50|71.00|64.00|—"  # no score: last either way
    assert words == "1|2|3|3"
    assert filtered == "a road here"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_a_page_opened_at_a_run_anchor_is_complete(tmp_path):
    """`report.html#run-2` looked blank in a headless `--screenshot`: Chromium's headless screenshot does not
    paint a viewport scrolled to an anchor, for any page (a plain page of coloured blocks shows the same). The
    page itself is whole there: the DOM at #run-2 holds the second run with every image decoded."""
    a = _score_run(tmp_path / "a", [_row(0, 71.5)])
    b = _score_run(tmp_path / "b", [_row(0, 64.0, "a road")])
    _report([a, b], tmp_path / "r.html")
    dom = _chromium(
        ["--virtual-time-budget=10000", "--dump-dom", (tmp_path / "r.html").as_uri() + "#run-2"], tmp_path
    )
    body = re.search(r"<body([^>]*)>", dom.stdout).group(1)
    total, loaded = (int(re.search(rf'data-images-{k}="(\d+)"', body).group(1)) for k in ("total", "loaded"))
    assert total >= 2 and loaded == total
    section = re.search(r'<section class="run" id="run-2".*?</section>', dom.stdout, re.S).group(0)
    assert "a road" in section and "64.00" in section


def _seed_ci_run(root: Path) -> Path:
    """Two images x 3 seeds: the CI rests on under 5 degrees of freedom, so the card must say so in words."""
    from recon_score.seeds import recon_score_ci

    per_seed = [[98.0, 98.9, 97.6], [97.5, 98.2, 99.1]]
    rows = [
        _row(i, sum(v) / 3, image=img, recon_score_std=0.65, recon_score_per_seed=v)
        for i, (img, v) in enumerate(zip(("a.png", "b.png"), per_seed))
    ]
    ci = recon_score_ci(per_seed, ["a.png", "b.png"])
    run = _score_run(root, rows, seed_noise={"recon_score_ci": ci})
    Image.new("RGB", (32, 32), "blue").save(root / "b.png")
    return run


def test_score_card_reads_mean_plus_minus_spread_and_small_sample_words(tmp_path):
    from recon_score.seeds import ci_notes, recon_score_ci

    html = _report([_seed_ci_run(tmp_path / "run")], tmp_path / "r.html")
    ci = recon_score_ci([[98.0, 98.9, 97.6], [97.5, 98.2, 99.1]], ["a.png", "b.png"])
    assert ci["df"] < 5
    head = re.search(r'<div class="headline".*?</div>\s*\n', html, re.S).group(0)
    for note in ci_notes(ci):
        assert note in head
    assert "too few to mean much" in head
    assert "± 0.65 (3 seeds)" in html


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_score_card_in_headless_chromium(tmp_path):
    """What a reader sees: the rendered text of a card's scores and of the headline's CI (DOM after layout),
    and a screenshot with the headline box (RECONSCORE_SHOTS=DIR keeps it)."""
    import os

    import numpy as np

    _report([_seed_ci_run(tmp_path / "run")], tmp_path / "r.html")
    (tmp_path / "harness.html").write_text(
        """<!DOCTYPE html><html><body><iframe src="r.html" width="1200" height="800"></iframe><script>
        document.querySelector("iframe").addEventListener("load", function () {
          var doc = this.contentDocument;
          var scores = Array.from(doc.querySelectorAll(".entry .scores")).map(e => e.innerText);
          var head = doc.querySelector(".headline").innerText;
          document.body.setAttribute("data-result", JSON.stringify([scores, head]));
        });</script></body></html>"""
    )
    scores, head = _harness_result(tmp_path)
    assert len(scores) == 2 and all(
        re.fullmatch(r"ReconScore \d+\.\d\d ± 0\.65 \(3 seeds\) · cos —", s) for s in scores
    )
    assert "too few to mean much" in head and "degrees of freedom" in head
    shots = Path(os.environ.get("RECONSCORE_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "score-card.png"
    r = _chromium(
        ["--window-size=1280,900", f"--screenshot={shot}", (tmp_path / "r.html").as_uri()], tmp_path
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    with Image.open(shot) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.int16)
    headline_border = np.all(np.abs(px - (59, 110, 165)) <= 2, axis=-1).sum()  # .headline's left border
    assert headline_border > 100


def _many_rows_run(root: Path, captions: int, images: int = 2) -> Path:
    """`captions` captions over `images` images, every caption's reconstruction one of three files (a run that
    rendered few distinct pictures): the originals and those three are the only thumbnails a page may hold."""
    root.mkdir(parents=True, exist_ok=True)
    colours = ["green", "blue", "red", "white", "black"]
    for i in range(images):
        Image.new("RGB", (32, 32), colours[i]).save(root / f"{i}.png")
    (root / "reconstructions").mkdir()
    for j in range(3):
        Image.new("RGB", (32, 32), (40 * j, 90, 200)).save(root / "reconstructions" / f"{j}.png")
    rows = [
        _row(
            n,
            50.0 + n % 7,
            f"caption {n}",
            image=f"{n % images}.png",
            reconstruction=f"reconstructions/{n % 3}.png",
        )
        for n in range(captions)
    ]
    return _score_run(root, rows)


def test_many_rows_report_embeds_each_image_once_and_pages_by_rows(tmp_path):
    run = _many_rows_run(tmp_path / "run", 60)
    assert main(["report", str(run), "--out", str(tmp_path / "r.html"), "--page-rows", "8"]) == 0
    pages = [tmp_path / "r.html", *(tmp_path / f"r-p{p}.html" for p in range(2, 9))]
    assert sorted(tmp_path.glob("r*.html")) == sorted(pages)  # 2 images x 30 captions, 8 per page: 8 pages
    shown = 0
    for page in pages:
        html = page.read_text()
        table = json.loads(
            re.search(r'<script type="application/json" id="embedded-images">(.*?)</script>', html).group(1)
        )
        uris = list(table.values())
        assert len(uris) == len(set(uris)) <= 2 + 3  # each distinct thumbnail once: originals + three renders
        assert html.count("data:image/jpeg") == len(uris)
        named = set(re.findall(r'data-embedded="([^"]+)"', html))
        assert named == set(table)  # every reference resolves, no unused copy
        shown += html.count('class="entry')
    assert shown == 60  # every caption on exactly one page
    first = pages[0].read_text()
    assert "captions 1-8 of 30" in first and "captions 9-16 of 30" in pages[1].read_text()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_many_rows_pages_load_every_image_in_headless_chromium(tmp_path):
    """Every <img> of the first and the last page decodes from the one embedded copy (none broken)."""
    run = _many_rows_run(tmp_path / "run", 60)
    assert main(["report", str(run), "--out", str(tmp_path / "r.html"), "--page-rows", "8"]) == 0
    for page in (tmp_path / "r.html", tmp_path / "r-p8.html"):
        dom = _chromium(["--virtual-time-budget=10000", "--dump-dom", page.as_uri()], tmp_path)
        body = re.search(r"<body([^>]*)>", dom.stdout).group(1)
        total, loaded, broken = (
            int(re.search(rf'data-images-{k}="(\d+)"', body).group(1)) for k in ("total", "loaded", "broken")
        )
        entries = dom.stdout.count('class="entry')
        assert total == 1 + entries + (page.name == "r.html"), (page, total)  # original, renders, plot
        assert loaded == total and broken == 0, (page, total, loaded, broken)
