"""`reconscore report`: a static page with originals, reconstructions, candidates and plots, rendered by a real
headless Chromium; user text is escaped."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = '<script>document.title="pwned"</script> farmland <img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample_dir):
    root = tmp_path_factory.mktemp("report")
    caps = root / "caps.jsonl"
    rows = [
        {"id": "a", "image": "images/UCM_1.tif", "caption": "There is a piece of farmland ."},
        {"id": "b<b>", "image": "images/UCM_1.tif", "caption": EVIL},
        {"id": "c", "image": "images/UCM_2.tif", "caption": "farmland with a road"},
        {"id": "d", "image": "images/missing.tif", "caption": "nothing here"},
    ]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    score = root / "score"
    assert (
        main(
            [
                "score",
                "--preset",
                "smoke",
                "--captions",
                str(caps),
                "--images",
                str(sample_dir),
                "--out",
                str(score),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    describe = root / "describe"
    assert (
        main(
            [
                "describe",
                "--preset",
                "smoke",
                "--n",
                "2",
                "--limit",
                "2",
                "--out",
                str(describe),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    corr = root / "corr"
    example = Path(__file__).resolve().parents[2] / "preference_data" / "examples" / "ranking_example.jsonl"
    assert main(
        [
            "correlate",
            "--preferences",
            str(example),
            "--format",
            "ranking",
            "--metrics",
            "bleu4,rouge",
            "--out",
            str(corr),
        ]
    ) in (0, 2)
    return root, score, describe, corr


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
        f"--user-data-dir={cwd / 'chrome-profile'}",
    ]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_report_pages_and_escaping(runs, tmp_path):
    _, score, describe, corr = runs
    out = tmp_path / "report.html"
    assert main(["report", str(score), str(describe), str(corr), "--out", str(out), "--page-size", "1"]) == 0
    html = out.read_text()
    assert "&lt;script&gt;document.title" in html and "<script>document.title" not in html
    assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")  # only as escaped text
    assert html.count("data:image/png;base64,") >= 2  # plots
    assert "smoke preset" in html and "not found" in html  # the missing image is shown as an error
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


def test_link_mode_writes_thumbnails(runs, tmp_path):
    _, score, _, _ = runs
    out = tmp_path / "r.html"
    assert main(["report", str(score), "--out", str(out), "--images", "link"]) == 0
    thumbs = list((tmp_path / "r_files").glob("*.jpg"))
    assert len(thumbs) >= 4 and "r_files/" in out.read_text()


def test_not_a_run_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 1
    assert "no run.json" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(runs, tmp_path):
    _, score, describe, corr = runs
    out = tmp_path / "report.html"
    assert main(["report", str(score), str(describe), str(corr), "--out", str(out)]) == 0
    dom = _chromium(["--virtual-time-budget=10000", "--dump-dom", out.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout).group(1)
    total = int(re.search(r'data-images-total="(\d+)"', body).group(1))
    loaded = int(re.search(r'data-images-loaded="(\d+)"', body).group(1))
    assert (
        total >= 10 and loaded == total
    )  # originals (TIFFs turned into JPEG), reconstructions and plots decode
    assert "pwned" not in re.search(r"<title>(.*?)</title>", dom.stdout, re.S).group(
        1
    )  # the caption's script never ran
    assert "&lt;script&gt;document.title" in dom.stdout
    shot = tmp_path / "shot.png"
    r = _chromium(["--window-size=1280,1600", f"--screenshot={shot}", out.as_uri()], tmp_path)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    with Image.open(shot) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.float32)
    assert px.shape[:2] == (1600, 1280)
    # the page shows pictures, not just text on a flat background: many distinct colours, high variance
    assert px.std() > 25 and len(np.unique(px.reshape(-1, 3)[::7], axis=0)) > 2000


def test_retrieve_run_shows_tables_and_top_k(tmp_path):
    """A retrieve run: seed-layout tables, one card per query (reference image + every method's top-k, positives
    outlined), the query text escaped."""
    import pandas as pd

    from tests.retrieval import layouts

    root = layouts.cirr(tmp_path / "cirr")
    caps = root / "captions" / "cap.rc2.val.json"
    pairs = json.loads(caps.read_text())
    pairs[0]["caption"] = EVIL
    caps.write_text(json.dumps(pairs))
    run = tmp_path / "run"
    argv = ["retrieve", "--benchmark", "cirr", "--root", str(root), "--encoder", "open_clip:smoke"]
    argv += ["--methods", "image,sum", "--topk", "2", "--out", str(run), "--device", "cpu"]
    assert main(argv) == 0
    out = tmp_path / "r.html"
    assert main(["report", str(run), "--out", str(out)]) == 0
    html = out.read_text()
    assert "Composed retrieval — cirr" in html
    assert (
        html.index("Recall@1 (%) by group") < html.index("Recall@5 (%)") < html.index("Recall_subset@1 (%)")
    )
    assert html.count('class="card"') == 2 and html.count("reference image") == 2
    top = pd.read_parquet(run / "topk.parquet")
    assert html.count('class="entry selected"') == int(top["relevant"].sum()) > 0
    assert html.count('class="entry') == len(top) == 2 * 2 * 2  # queries x methods x k
    assert "&lt;script&gt;document.title" in html and "<script>document.title" not in html
