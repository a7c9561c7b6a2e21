"""Real-size image encoders on the CPU: the project's encoder path vs a bare call of the same modules.

Models: the DreamSim ensemble (three ViT-B/16 towers + LoRA, `shapes:dreamsim`) and OpenAI-shaped CLIP
ViT-B/32 and ViT-L/14 (`shapes:open-clip/ARCH-quickgelu`), all at full size with random weights (no download:
the cost equals the trained models'). For each batch size:
  project  Encoder.encode_images(PIL images, batch_size=B): preprocessing from PIL, batching, L2 norm, copy out
  bare     model.embed(x) / model.encode_image(x) on tensors preprocessed beforehand
ratio = project images/s / bare images/s (1.0 = no overhead; the gap is mostly PIL preprocessing, which the bare
call does not pay). What a CPU-only user pays for `study encoders` or `metrics add --metrics clipscore`.

Usage: python benchmarks/encoder_cpu.py [--batches 1,8,32] [--images 32] [--encoders dreamsim,b32,l14]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPECS = {
    "dreamsim": "shapes:dreamsim",
    "b32": "shapes:open-clip/ViT-B-32-quickgelu",
    "l14": "shapes:open-clip/ViT-L-14-quickgelu",
}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--images", type=int, default=32, help="images per measurement (at least one batch)")
    ap.add_argument("--encoders", default="dreamsim,b32,l14")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the minimum time is kept")
    ap.add_argument(
        "--spec", action="append", default=[], help="extra encoder spec (e.g. a scaled shapes one)"
    )
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from PIL import Image

    from recon_score.encoders import build_encoder, release_encoders
    from recon_score.synthetic.shapes import count_params

    rng = np.random.default_rng(0)
    batches = [int(b) for b in args.batches.split(",")]
    specs = [SPECS[k] for k in args.encoders.split(",") if k] + args.spec
    rows = []
    print(
        f"CPU, torch threads={torch.get_num_threads()}, float32, random-weight full-size models, "
        f"min of {args.rounds} round(s); a shared machine: figures are noisy, read the ratios"
    )
    print(
        f"{'encoder':38s} {'params':>7s} {'batch':>5s} {'project img/s':>13s} {'bare img/s':>10s} {'ratio':>6s}"
    )
    for spec in specs:
        enc = build_encoder(spec, device="cpu")
        model = enc.model
        if hasattr(enc, "transform"):  # DreamSim
            prep, call = enc.transform, model.embed
        else:
            prep, call = enc.preprocess, model.encode_image
        params = count_params(model)
        for b in batches:
            n = max(b, args.images // b * b)
            images = [Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)) for _ in range(n)]
            tensors = torch.stack([prep(im) for im in images])

            def project(images=images, b=b, enc=enc):
                enc.encode_images(images, batch_size=b)

            def bare(tensors=tensors, b=b, call=call):
                with torch.inference_mode():
                    for i in range(0, len(tensors), b):
                        call(tensors[i : i + b])

            if b == batches[0]:
                project(images[:b], b)  # warm-up (allocator, lazy inits)
            best = {"project": float("inf"), "bare": float("inf")}
            for _ in range(args.rounds):
                for name, fn in (("project", project), ("bare", bare)):
                    t0 = time.perf_counter()
                    fn()
                    best[name] = min(best[name], time.perf_counter() - t0)
            row = {
                "encoder": spec,
                "params": params,
                "batch": b,
                "images": n,
                "project_img_s": n / best["project"],
                "bare_img_s": n / best["bare"],
            }
            row["ratio"] = row["project_img_s"] / row["bare_img_s"]
            rows.append(row)
            print(
                f"{spec:38s} {params / 1e6:6.0f}M {b:5d} {row['project_img_s']:13.2f} {row['bare_img_s']:10.2f} "
                f"{row['ratio']:6.2f}",
                flush=True,
            )
        release_encoders()
    return rows


if __name__ == "__main__":
    main()
