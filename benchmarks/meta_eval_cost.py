"""What sharing buys in the meta-evaluation suite: the wall time of one `correlate --benchmarks` run over every
(benchmark, metric) item, against running each item on its own (a fresh run, so nothing is shared: each item
tokenises and encodes its texts and images again, and a second benchmark over the same captions and images does
it again). Also prints how many texts the PTB tokenizer saw and how many texts and images each encoder encoded,
each way. Prints, never asserts.

`--synthetic-images` gives the image metrics something to read where the data root has no images (the Flickr8K
text release): a copy of the root whose image folder holds one small generated JPEG per image name, distinct per
name. The encoding counts are then real; the timings are those of that encoder on those pixels.

Usage: ./dev python benchmarks/meta_eval_cost.py [--data-root ../shared/data]
           [--benchmarks flickr8k-expert,flickr8k-cf] [--metrics bleu4,rouge,clipscore,refclipscore]
           [--preset smoke --encoder smoke:open-clip] [--synthetic-images] [--bootstrap 0]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections import Counter
from pathlib import Path


def _timed(job_kw: dict, out: Path) -> tuple[float, Counter]:
    """Seconds for one run, and what it tokenised ("ptb texts") and encoded ("<spec> texts|images")."""
    import eval.metrics.ptb as ptb
    from eval.meta_eval.run import MetaEvalJob, run_meta_eval
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

    ptb.ptb_tokenize, Encoder.encode_texts, Encoder.encode_images = tokenize, texts, images
    try:
        start = time.perf_counter()
        run_meta_eval(MetaEvalJob(out=out, **job_kw))
        return time.perf_counter() - start, seen
    finally:
        ptb.ptb_tokenize, Encoder.encode_texts, Encoder.encode_images = real_ptb, real_texts, real_images


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
    ap.add_argument("--synthetic-images", action="store_true", help="generated images (see above)")
    ap.add_argument("--bootstrap", type=int, default=0, help="CI resamples (0: time the scoring alone)")
    args = ap.parse_args()
    benches, metrics = args.benchmarks.split(","), args.metrics.split(",")
    with tempfile.TemporaryDirectory(prefix="reconscore-meta-cost-") as tmp:
        root = args.data_root
        if args.synthetic_images:
            root = synthetic_root(args.data_root, benches, Path(tmp) / "data")
        common = {"data_root": root, "n_boot": args.bootstrap, "preset": args.preset}
        common |= {"encoder": args.encoder} if args.encoder else {}
        # warm-up, untimed: imports, the first JVM start and model files are paid once, by neither side
        _timed({"benchmarks": benches[:1], "metrics": metrics, **common}, Path(tmp) / "warm-up")
        suite, suite_seen = _timed({"benchmarks": benches, "metrics": metrics, **common}, Path(tmp) / "suite")
        alone, alone_seen = 0.0, Counter()
        for b in benches:
            for m in metrics:
                s, seen = _timed({"benchmarks": [b], "metrics": [m], **common}, Path(tmp) / f"{b}-{m}")
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
