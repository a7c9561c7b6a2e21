"""How fast an annotator's ranking page opens and answers with many images, in headless Chromium.

    ./dev python benchmarks/annotate_page_load.py [--images 500] [--repeat 3]

Builds a study of N images (3 candidates each; the images are generated 256x256 JPEGs, like the UC Merced tiles)
through `reconscore annotate build`'s own code, then opens annotator-1's page from file:// and prints, as the median
over the rounds: the page's size, the time from navigation to the page being ready (its script parsed the
embedded study, restored the autosave and drew the first image), and the time of one ranking keystroke (a digit
pressed until the page has redrawn), also after ranking every image (autosave then holds N rankings). Goal: the
page stays responsive: ready well under a second and a keystroke under a frame budget (~16 ms) at 500 images.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


def make_study(root: Path, n: int) -> Path:
    from PIL import Image

    from eval.annotate import BuildJob, run_build

    images = root / "images"
    images.mkdir()
    rows = []
    for k in range(n):
        Image.effect_noise((256, 256), 40 + k % 50).convert("RGB").save(images / f"tile_{k:04d}.jpg")
        for m in range(3):
            text = f"tile {k}: caption {m} with some <b>markup</b> & several parked aircraft near the apron"
            rows.append({"image": f"tile_{k:04d}.jpg", "candidate": text, "model": f"model-{m}"})
    table = root / "candidates.csv"
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, ["image", "candidate", "model"])
        w.writeheader()
        w.writerows(rows)
    out = root / "study"
    run_build(BuildJob([table], out, images, annotators=1), say=lambda line: None)
    return out / "pages" / "annotator-1.html"


def measure(page_file: Path, repeat: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    got: dict[str, list[float]] = {"ready_ms": [], "key_ms": [], "key_ms_all_ranked": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for _ in range(repeat):
            ctx = browser.new_context()
            page = ctx.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.wait_for_function("document.getElementById('image').complete")
            got["ready_ms"].append(page.evaluate("performance.now()"))
            got["key_ms"].append(_keystroke(page))
            n = page.evaluate("D.items.length")
            page.evaluate("for (const it of D.items) S.groups[it.id] = [[0], [1], [2]]; save(); render();")
            assert page.inner_text("#progress").startswith(f"{n} of {n}")
            page.keyboard.press("Backspace")
            got["key_ms_all_ranked"].append(_keystroke(page))
            ctx.close()
        browser.close()
    return got


def _keystroke(page) -> float:
    """A digit pressed (choose a caption), timed inside the page from the key event to the redraw's end."""
    return page.evaluate(
        """() => new Promise((done) => {
            const t0 = performance.now();
            document.dispatchEvent(new KeyboardEvent('keydown', {key: '3', code: 'Digit3', bubbles: true}));
            requestAnimationFrame(() => done(performance.now() - t0));
        })"""
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not Path(CHROMIUM).is_file():
        raise SystemExit(f"no Chromium at {CHROMIUM}")
    with tempfile.TemporaryDirectory() as tmp:
        page = make_study(Path(tmp), args.images)
        size = page.stat().st_size
        got = measure(page, args.repeat)
    print(f"annotate page, {args.images} images x 3 candidates, load average {os.getloadavg()[0]:.1f}")
    print(f"  page size                     {size / 1024:8.1f} KiB (images beside it)")
    for key, label in (
        ("ready_ms", "navigation -> ready (first image drawn)"),
        ("key_ms", "one keystroke -> redrawn"),
        ("key_ms_all_ranked", "one keystroke, all images ranked"),
    ):
        values = got[key]
        print(
            f"  {label:38s} {statistics.median(values):8.1f} ms (min {min(values):.1f}, max {max(values):.1f})"
        )


if __name__ == "__main__":
    main()
