"""Computed (not measured) cost of the training path: describe --eval-candidates all -> pairs -> one DPO epoch.

Counts come from the presets (paper: N = 10 candidates, 28 DiT steps, 512 T2I tokens, 512 new VLM tokens) and
the models' published shapes (parameters counted on the meta device, no weights); FLOPs from the DiT formula of
benchmarks/gpu_throughput.py and the usual 2·P per token forward, 6·P forward + backward. Token counts are upper
bounds: a caption never exceeds max_new_tokens, the T2I prompt never exceeds max_sequence_length, and a
byte-level BPE never gives more tokens than the text has bytes. Seconds are at 100% of the chip's bf16 peak, a
lower bound; the GPU benchmark (benchmarks/gpu_throughput.py) measures the real rate.

Usage: python benchmarks/training_cost.py [--images 210] [--size 256] [--selection-seeds 1] [--policy best-worst]
"""

from __future__ import annotations

import argparse
import importlib.util
from math import comb
from pathlib import Path

PEAK = "H200"


def _gpu_module():
    path = Path(__file__).resolve().parent / "gpu_throughput.py"
    spec = importlib.util.spec_from_file_location("gpu_throughput", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pairs_per_image(n: int, policy: str) -> int:
    """At most (the filters only remove pairs)."""
    return {"best-worst": 1, "best-vs-each": n - 1, "all": comb(n, 2)}[policy]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=210, help="images described (UCM-captions test split: 210)")
    ap.add_argument("--size", type=int, default=256, help="square image side in pixels (UCM: 256)")
    ap.add_argument("--selection-seeds", type=int, default=1, help="describe --selection-seeds K")
    ap.add_argument("--policy", default="best-worst", choices=["best-worst", "best-vs-each", "all"])
    args = ap.parse_args()

    from describer.presets import DESCRIBER_PRESETS
    from describer.prompts import GUIDELINE_PROMPT
    from recon_score.presets import get_preset
    from recon_score.synthetic.shapes import count_params, meta_dit, meta_vlm

    gpu = _gpu_module()
    rp, dp = get_preset("paper"), DESCRIBER_PRESETS["paper"]
    n, k, steps = dp.n, args.selection_seeds, rp.steps
    dit, vlm_params = meta_dit(), count_params(meta_vlm())
    n_cap = rp.max_sequence_length  # the pipeline truncates the prompt there
    n_img = (args.size // 16) ** 2
    render = steps * gpu.dit_flops(dit, n_img, n_cap)
    renders = (
        args.images * n * (k + 1)
    )  # K selection renders + 1 held-out render per candidate (--eval-candidates all)
    vision = (args.size // 32) ** 2  # Qwen3-VL: patch 16, merge 2
    prompt_tokens = vision + len(GUIDELINE_PROMPT.encode())
    gen = args.images * n * dp.max_new_tokens
    vlm_gen = 2 * vlm_params * (args.images * n * prompt_tokens + gen)  # prefill + decode, forward only
    pairs = args.images * pairs_per_image(n, args.policy)
    seq = 2 * (prompt_tokens + dp.max_new_tokens)  # chosen and rejected sequences of one pair
    dpo = pairs * seq * (6 + 2) * vlm_params  # policy forward + backward, reference forward
    peak = gpu.PEAK_BF16[PEAK]
    print(
        f"computed upper bounds, paper presets; N={n}, K={k}, {args.images} images at {args.size}x{args.size}"
    )
    print(f"DiT {count_params(dit):,} params; VLM {vlm_params:,} params; T2I caption tokens <= {n_cap}")
    print(f"{'stage':<34}{'count':>14}{'PFLOP':>12}{'s at ' + PEAK + ' peak':>18}")
    for name, count, flops in (
        ("describe: VLM generation (tokens)", args.images * n * dp.max_new_tokens, vlm_gen),
        ("describe: T2I renders", renders, renders * render),
        ("pairs (no model)", pairs, 0.0),
        ("DPO, one epoch (pairs)", pairs, dpo),
    ):
        print(f"{name:<34}{count:>14,}{flops / 1e15:>12.1f}{flops / peak:>18.1f}")


if __name__ == "__main__":
    main()
