"""What sharing buys in the meta-evaluation suite: the wall time of one `correlate --benchmarks` run over every
(benchmark, metric) item, against running each item on its own (a fresh run, so nothing is shared: each item
tokenises and encodes its texts and images again, and a second benchmark over the same captions and images does
it again). Also prints how many texts the PTB tokenizer saw and how many texts and images each encoder encoded,
each way. Prints, never asserts.

`--synthetic-images` gives the image metrics something to read where the data root has no images (the Flickr8K
text release): a copy of the root whose image folder holds one small generated JPEG per image name, distinct per
name. The encoding counts are then real; the timings are those of that encoder on those pixels (every image is
resized to the encoder's input size, so the encoder's work per image is that of a real photograph).

`--full-size` runs CLIP-S and RefCLIP-S on `shapes:open-clip/ViT-B-32-quickgelu`: the architecture of correlate's
default encoder (OpenAI's CLIP ViT-B/32, QuickGELU) at its published size with random weights, built offline, so
the encoder's share of the time is real (the scores are meaningless). `--limit N` keeps each benchmark's rows of
its first N distinct images (in file order), for a measurement that fits the time at hand.

Every timed run starts with an empty encoder registry, as a separate invocation does: the suite builds each
encoder once, each item on its own builds its own.

Usage: ./dev python benchmarks/meta_eval_cost.py [--data-root ../shared/data]
           [--benchmarks flickr8k-expert,flickr8k-cf] [--metrics bleu4,rouge,clipscore,refclipscore]
           [--preset smoke --encoder smoke:open-clip | --full-size] [--synthetic-images] [--limit N]
           [--bootstrap 0]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections import Counter
from pathlib import Path

FULL_SIZE_ENCODER = "shapes:open-clip/ViT-B-32-quickgelu"  # open_clip:ViT-B-32/openai's architecture, random
WARM_UP_IMAGES = 8


def _limited(load, limit: int | None):
    """`eval.meta_eval.suite.load`, keeping each benchmark's rows of its first `limit` distinct images."""

    def first_images(name, data_root, variant=None):
        loaded = load(name, data_root, variant)
        if limit is not None and loaded.table is not None:
            keep = set(loaded.table["image"].drop_duplicates().iloc[:limit])
            loaded.table = loaded.table[loaded.table["image"].isin(keep)].reset_index(drop=True)
        return loaded

    return first_images


def _timed(job_kw: dict, out: Path, limit: int | None = None) -> tuple[float, Counter]:
    """Seconds for one run from an empty encoder registry, and what it tokenised ("ptb texts") and encoded
    ("<spec> texts|images")."""
    import eval.meta_eval.run as run_mod
    import eval.metrics.ptb as ptb
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval
    from recon_score.encoders import release_encoders
    from recon_score.encoders.base import Encoder

    seen: Counter = Counter()
    real_ptb, real_texts, real_images = ptb.ptb_tokenize, Encoder.encode_texts, Encoder.encode_images

    def tokenize(texts):
        seen["ptb texts"] += len(texts)
        return real_ptb(texts)

    def texts(self, items, **kw):
        seen[f"{self.info.spec} texts"] += len(items)
        return real_texts(self, items, **kw)

    def images(self, items, **kw):
        seen[f"{self.info.spec} images"] += len(items)
        return real_images(self, items, **kw)

    real_load = run_mod.load
    ptb.ptb_tokenize, Encoder.encode_texts, Encoder.encode_images = tokenize, texts, images
    run_mod.load = _limited(real_load, limit)
    release_encoders()
    try:
        start = time.perf_counter()
        run_meta_eval(MetaEvalJob(out=out, **job_kw))
        return time.perf_counter() - start, seen
    finally:
        ptb.ptb_tokenize, Encoder.encode_texts, Encoder.encode_images = real_ptb, real_texts, real_images
        run_mod.load = real_load


def synthetic_root(data_root: Path, benchmarks: list[str], into: Path) -> Path:
    """A copy of `data_root` for `benchmarks` (annotation files linked) whose images folder has one generated
    32 x 32 JPEG per image name the benchmarks judge."""
    from PIL import Image

    from eval.meta_eval.benchmarks import BENCHMARKS
    from eval.meta_eval.suite import IMAGE_DIRS, IMAGES_DIR, load

    for name in benchmarks:
        folder = BENCHMARKS[name].folder
        src, dst = data_root / folder, into / folder
        if not dst.exists():
            dst.mkdir(parents=True)
            for f in src.iterdir():
                (dst / f.name).symlink_to(f.resolve(), target_is_directory=f.is_dir())
        images = dst / IMAGE_DIRS.get(folder, IMAGES_DIR)
        images.mkdir(exist_ok=True)
        table = load(name, data_root).table
        for image in table["image"].unique():
            path = images / image
            if not path.exists():
                rgb = tuple(hashlib.sha256(image.encode()).digest()[:3])
                Image.new("RGB", (32, 32), rgb).save(path, format="JPEG")
    return into


def _counts(seen: Counter) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(seen.items())) or "nothing tokenised or encoded"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--benchmarks", default="flickr8k-expert,flickr8k-cf")
    ap.add_argument("--metrics", default="bleu4,rouge,clipscore,refclipscore")
    ap.add_argument("--preset", default="paper", help="as correlate's --preset (smoke: tiny random models)")
    ap.add_argument("--encoder", default=None, help="as correlate's --encoder (default: its default)")
    ap.add_argument("--full-size", action="store_true", help=f"--encoder {FULL_SIZE_ENCODER} (see above)")
    ap.add_argument("--synthetic-images", action="store_true", help="generated images (see above)")
    ap.add_argument("--limit", type=int, default=None, help="first N distinct images per benchmark")
    ap.add_argument("--bootstrap", type=int, default=0, help="CI resamples (0: time the scoring alone)")
    args = ap.parse_args()
    if args.full_size and args.encoder:
        ap.error("--full-size names the encoder; drop --encoder")
    benches, metrics = args.benchmarks.split(","), args.metrics.split(",")
    encoder = FULL_SIZE_ENCODER if args.full_size else args.encoder
    with tempfile.TemporaryDirectory(prefix="reconscore-meta-cost-") as tmp:
        root = args.data_root
        if args.synthetic_images:
            root = synthetic_root(args.data_root, benches, Path(tmp) / "data")
        common = {"data_root": root, "n_boot": args.bootstrap, "preset": args.preset}
        common |= {"encoder": encoder} if encoder else {}
        # warm-up, untimed, on a few images: imports, the first JVM start and model files are paid by neither side
        warm = min(args.limit or WARM_UP_IMAGES, WARM_UP_IMAGES)
        _timed({"benchmarks": benches[:1], "metrics": metrics, **common}, Path(tmp) / "warm-up", warm)
        suite, suite_seen = _timed(
            {"benchmarks": benches, "metrics": metrics, **common}, Path(tmp) / "suite", args.limit
        )
        alone, alone_seen = 0.0, Counter()
        for b in benches:
            for m in metrics:
                s, seen = _timed(
                    {"benchmarks": [b], "metrics": [m], **common}, Path(tmp) / f"{b}-{m}", args.limit
                )
                print(f"  {b} / {m} on its own: {s:.1f} s; {_counts(seen)}")
                alone, alone_seen = alone + s, alone_seen + seen
    print(
        f"suite of {len(benches)} benchmarks x {len(metrics)} metrics in one run: {suite:.1f} s; {_counts(suite_seen)}"
    )
    print(
        f"each item on its own: {alone:.1f} s in all ({alone / suite:.2f}x the suite); {_counts(alone_seen)}"
    )


if __name__ == "__main__":
    main()
