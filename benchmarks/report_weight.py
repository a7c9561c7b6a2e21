"""Weight and opening time of `reconscore report` pages for a run of many captions on few images.

Builds a synthetic score run (N captions over M images, each caption with its own reconstruction: a shifted
copy of a bundled UCM tile, so every thumbnail is distinct, as in a real run), reports it with the code on
PYTHONPATH, and prints per page its bytes and embedded JPEGs, then how long Debian's headless Chromium takes to
open the first page (`--dump-dom` after the page's script ran; wall seconds, read as a ratio: the machine may
be shared) and whether every image there decoded. Run it once with the current code and once with an older
tree on PYTHONPATH to compare (the older `build_report` has no `page_rows`; the script then leaves it out).

Usage: ./dev python benchmarks/report_weight.py [--captions 5000] [--images 4] [--work DIR] [--no-browser]
       PYTHONPATH=OLD_TREE ./dev python benchmarks/report_weight.py ...   (the before)
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def synthetic_run(root: Path, captions: int, images: int) -> Path:
    """A finished score run's files as `report` reads them: run.json, scores.jsonl, originals, renders."""
    from recon_score.run import SAMPLE_DIR

    tiles = sorted((SAMPLE_DIR / "images").glob("UCM_*.tif"))
    (root / "images").mkdir(parents=True)
    (root / "reconstructions").mkdir()
    bases = []
    for i in range(images):
        base = np.asarray(Image.open(tiles[i % len(tiles)]).convert("RGB"))
        Image.fromarray(base).save(root / "images" / f"{i}.png")
        bases.append(base)
    rows = []
    for n in range(captions):
        i = n % images
        render = Image.fromarray(np.roll(bases[i], 3 * n + 1, axis=1))
        render.save(root / "reconstructions" / f"{n:06d}.png", compress_level=1)  # fast: the run is not timed
        rows.append(
            {
                "id": str(n),
                "image": f"images/{i}.png",
                "caption": f"a farmland with {n} green fields and a road",
                "recon_score": 50.0 + (n % 97) / 4,
                "cosine": 0.5,
                "reconstruction": f"reconstructions/{n:06d}.png",
            }
        )
    (root / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "run.json").write_text(
        json.dumps({"command": "score", "images_root": str(root), "meaningless": False})
    )
    return root


def open_in_chromium(page: Path, profile: Path) -> tuple[float, str]:
    """(wall seconds, <body> attributes) of a headless Chromium opening `page` and dumping its DOM."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    args = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ]
    start = time.perf_counter()
    r = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    body = re.search(r"<body([^>]*)>", r.stdout)
    return seconds, body.group(1).strip() if body else f"no DOM (exit {r.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--captions", type=int, default=5000)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument(
        "--work", type=Path, help="folder for the run and the report (default: a temporary one)"
    )
    parser.add_argument("--no-browser", action="store_true", help="skip the headless Chromium timing")
    args = parser.parse_args()
    from eval.report.build import build_report

    work = args.work or Path(tempfile.mkdtemp(prefix="report-weight-"))
    run = work / "run"
    if not (run / "run.json").exists():
        synthetic_run(run, args.captions, args.images)
    options = {"page_rows": 250} if "page_rows" in inspect.signature(build_report).parameters else {}
    start = time.perf_counter()
    pages = build_report([run], work / "report" / "r.html", **options)
    built = time.perf_counter() - start
    sizes = [p.stat().st_size for p in pages]
    jpegs = [p.read_text().count("data:image/jpeg") for p in pages]
    print(f"run: {args.captions} captions on {args.images} images; report options {options or '(none)'}")
    print(f"built in {built:.1f} s: {len(pages)} page(s), {sum(sizes):,} bytes in all")
    print(f"largest page {max(sizes):,} bytes; first page {sizes[0]:,} bytes, {jpegs[0]:,} embedded JPEGs")
    print(f"embedded JPEGs over all pages: {sum(jpegs):,} (most on one page: {max(jpegs):,})")
    if args.no_browser:
        return
    seconds, body = open_in_chromium(pages[0], work / "chrome-profile")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"headless Chromium opened the first page in {seconds:.1f} s (largest waited process {rss:.0f} MB)")
    print(f"first page after its script: {body}")


if __name__ == "__main__":
    main()
