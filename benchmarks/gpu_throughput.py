"""ReconScore and RemoteDescriber at real scale: the `paper` models at published sizes, random weights, bf16.

One prepared run for a lent GPU machine (benchmarks/gpu/run.sh); `--scale 0.02 --device cpu` runs the same code
path with scaled-down widths (the test suite does). Models come from the `shapes:` names through the project's
own loaders: Z-Image DiT 6.15B + Qwen3-4B text encoder + FLUX.1 VAE, DreamSim ensemble, Qwen3-VL-8B.

Measured, per size x batch, --repeats times with the two paths interleaved (the first path alternates):
  scorer   ReconScorer(batch_size=B).score(image, B captions), caches off
  bare     the same work without the project: one ZImagePipeline call with the B prompts (batched the same way)
           + DreamSim on the original and the B renders
  ratio    bare s/image / scorer s/image (> 1: the scorer is faster), from the median of the repeats; the
           spread (max - min) / median of each path is printed with it
  split    text encoder, DiT steps, VAE decode, DreamSim (CUDA-synchronised hooks, both paths)
  DiT FLOP/s from the analytic count below; MFU against the chip's bf16 dense peak (datasheet) and against a
  bf16 matmul measured on the same device in the same run (the attainable peak)
  peak GPU memory of each path at each (size, batch)
The describer phase runs first (its VLM is freed before the T2I models load). Each call runs --steps DiT steps
(default 2, to fit the time budget); "s/img@28" extrapolates to --full-steps by adding (full - steps) x the
measured time per DiT step: the other stages do not depend on the step count. A size whose warm-up would start
after --budget-s is skipped with its rows.
Describer: N candidates with num_return_sequences=N in one call vs N calls of one, fixed output length
(min_new_tokens = max_new_tokens, so EOS never ends a row early). Peak GPU memory per phase.
Switches (off by default, recorded in the JSON): --attention-backend (diffusers), --compile (torch.compile DiT).

Usage: python benchmarks/gpu_throughput.py [--device cuda] [--scale 1] [--sizes 256,496,512,1024]
       [--batches 1,4,8,16] [--repeats 3] [--steps 2] [--budget-s 420] [--json FILE]
       (the JSON also goes to $OUT/gpu_throughput.json when OUT is set)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# bf16 dense tensor-core peaks (vendor datasheets, no sparsity), matched on the device name
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "4090": 165e12}

FLOP_FORMULA = (
    "DiT FLOPs per forward = sum over images of L_main*f(N_img+N_cap) + L_noise*f(N_img) + L_ctx*f(N_cap), "
    "f(n) = 2*n*(4*d^2 + 3*d*h) + 4*n^2*d; N_img = (H/16)*(W/16), N_cap = caption tokens, each padded to a "
    "multiple of 32; d = dim, h = int(d/3*8) (Z-Image: d 3840, h 10240, L_main 30, L_noise = L_ctx = 2); "
    "embedders, adaLN and the final layer (< 1%) not counted"
)


def dit_flops(dit, n_img: int, n_cap: int) -> float:
    pad = lambda n: n + (-n) % 32  # noqa: E731 - Z-Image's SEQ_MULTI_OF
    d = dit.config.dim
    h = int(d / 3 * 8)

    def f(n: int) -> float:
        return 2.0 * n * (4 * d * d + 3 * d * h) + 4.0 * n * n * d

    ni, nc = pad(n_img), pad(n_cap)
    return dit.config.n_layers * f(ni + nc) + dit.config.n_refiner_layers * (f(ni) + f(nc))


class Split:
    """Wall time per stage, from hooks that synchronise the device before reading the clock."""

    def __init__(self, device: str):
        import torch

        self.sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
        self.t: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.flops = 0.0
        self._start: dict[str, float] = {}

    def reset(self) -> None:
        self.t.clear()
        self.calls.clear()
        self.flops = 0.0

    def _begin(self, name: str) -> None:
        self.sync()
        self._start[name] = time.perf_counter()

    def _end(self, name: str) -> None:
        self.sync()
        self.t[name] += time.perf_counter() - self._start.pop(name)
        self.calls[name] += 1

    def module(self, name: str, module, on_call=None) -> None:
        def pre(_m, args, kwargs):
            if on_call is not None:
                on_call(args, kwargs)
            self._begin(name)

        module.register_forward_pre_hook(pre, with_kwargs=True)
        module.register_forward_hook(lambda *_: self._end(name))

    def method(self, name: str, owner, attr: str) -> None:
        fn = getattr(owner, attr)

        def timed(*args, **kwargs):
            self._begin(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self._end(name)

        setattr(owner, attr, timed)


def _peak_reset(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if str(device).startswith("cuda") else None


def _image(size: int):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(size)
    return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))


def _captions(n: int, tag: int) -> list[str]:
    """Distinct RS-style captions of similar length (UCM/RSICD references are 10-30 words)."""
    return [
        f"many buildings and green trees are around a playground with a red running track, number {tag}-{k}, "
        "and a road with some cars crosses the dense residential area next to a parking lot"
        for k in range(n)
    ]


def t2i_phase(args, out: dict, deadline: float, save) -> None:
    import torch

    from recon_score.artifact_cache import ArtifactCache
    from recon_score.presets import get_preset
    from recon_score.prompts import format_prompt
    from recon_score.scorer import ReconScorer

    suffix = "" if args.scale == 1 else f"@{args.scale:g}"
    preset = get_preset("paper").replace(
        t2i_model=f"shapes:z-image{suffix}",
        encoder=f"shapes:dreamsim{suffix}",
        steps=args.steps,
        max_sequence_length=args.max_sequence_length,
        meaningless=True,
    )
    _peak_reset(args.device)
    t0 = time.perf_counter()
    scorer = ReconScorer(
        preset,
        device=args.device,
        cache=ArtifactCache(enabled=False),
        attention_backend=args.attention_backend,
        compile_dit=args.compile,
    )
    pipe, enc = scorer.renderer.pipe, scorer.encoder
    out["t2i"]["load_s"] = time.perf_counter() - t0
    out["t2i"]["dtype"] = scorer.renderer.dtype
    out["t2i"]["dit_dim"] = pipe.transformer.config.dim
    n = 8192 if str(args.device).startswith("cuda") else 256
    out["t2i"]["matmul"] = f"{n}x{n}x{n} {str(pipe.transformer.dtype).replace('torch.', '')}"
    out["t2i"]["matmul_flops_per_s"] = matmul_flops_per_s(args.device, pipe.transformer.dtype, n)
    split = Split(args.device)
    tokens: list[tuple[int, int]] = []

    def on_dit(a, kw):
        x, caps = (a[0] if a else kw["x"]), (a[2] if len(a) > 2 else kw["cap_feats"])
        for lat, cap in zip(x, caps):
            n_img = (lat.shape[-2] // 2) * (lat.shape[-1] // 2)
            tokens.append((n_img, cap.shape[0]))
            split.flops += dit_flops(pipe.transformer, n_img, cap.shape[0])

    split.module("text_encoder", pipe.text_encoder)
    split.module("dit", pipe.transformer, on_call=on_dit)
    split.method("vae_decode", pipe.vae, "decode")
    split.method("dreamsim", enc.model, "embed")

    def bare(image, captions, size: int) -> None:
        """The same work straight through diffusers and DreamSim: one pipeline call for the batch, as the
        scorer renders it, then the original and the renders embedded and compared."""
        with torch.inference_mode():
            renders = pipe(
                prompt=[format_prompt(preset.prompt_template, cap) for cap in captions],
                height=size,
                width=size,
                num_inference_steps=preset.steps,
                guidance_scale=preset.guidance_scale,
                max_sequence_length=preset.max_sequence_length,
                generator=[torch.Generator("cpu").manual_seed(preset.seed) for _ in captions],
            ).images
            a = enc.model.embed(enc.transform(image).unsqueeze(0).to(args.device))
            b = enc.model.embed(torch.stack([enc.transform(r) for r in renders]).to(args.device))
            torch.nn.functional.cosine_similarity(a, b).tolist()

    def timed(fn, b: int) -> dict:
        scorer.cache.forget()  # every repeat renders and embeds: the last repeat's renders stay in memory otherwise
        split.reset()
        tokens.clear()
        _peak_reset(args.device)
        t = time.perf_counter()
        fn()
        split.sync()
        wall = time.perf_counter() - t
        full = wall + (args.full_steps / args.steps - 1) * split.t["dit"]  # other stages: per call
        return {
            "s_per_image": wall / b,
            "s_per_image_full": full / b,
            "split_s_per_image": {k: v / b for k, v in split.t.items()},
            "dit_calls": split.calls["dit"],
            "dit_flops_per_s": split.flops / split.t["dit"] if split.t["dit"] else None,
            "tokens": sorted(set(tokens)),
            "peak_memory_gb": _peak_gb(args.device),
        }

    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if peak is None and str(args.device).startswith("cuda"):
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    out["t2i"]["peak_flops"] = peak
    attainable = out["t2i"]["matmul_flops_per_s"]
    rows = out["t2i"]["rows"]
    for size in args.sizes:
        image = _image(size)
        if time.perf_counter() > deadline:  # the warm-up counts against the budget too
            rows.extend({"size": size, "batch": b, "skipped": "time budget"} for b in args.batches)
            continue
        scorer.batch_size = 1
        scorer.score(image, _captions(1, -size))  # warm-up: kernels and autotuning for this resolution
        for b in args.batches:
            row = {"size": size, "batch": b}
            if time.perf_counter() > deadline:
                rows.append({**row, "skipped": "time budget"})
                continue
            scorer.batch_size = b
            paths = {
                "scorer": lambda im=image, b=b, s=size: scorer.score(im, _captions(b, s)),
                "bare": lambda im=image, b=b, s=size: bare(im, _captions(b, s), s),
            }
            runs: dict[str, list[dict]] = {"scorer": [], "bare": []}
            for rep in range(args.repeats):  # interleaved; the path that goes first alternates
                for name in ("scorer", "bare") if rep % 2 == 0 else ("bare", "scorer"):
                    runs[name].append(timed(paths[name], b))
            row.update({name: _median_run(r) for name, r in runs.items()})
            row["ratio"] = row["bare"]["s_per_image"] / row["scorer"]["s_per_image"]
            row["ratio_full"] = row["bare"]["s_per_image_full"] / row["scorer"]["s_per_image_full"]
            fl = row["scorer"]["dit_flops_per_s"]
            row["mfu"] = fl / peak if (fl and peak) else None
            row["mfu_matmul"] = fl / attainable if (fl and attainable) else None
            rows.append(row)
            save(out)
            print(_t2i_line(row), flush=True)
    out["t2i"]["peak_memory_gb"] = _peak_gb(args.device)
    scorer.renderer.unload()
    from recon_score.encoders import release_encoders

    release_encoders()


def _median_run(runs: list[dict]) -> dict:
    """The run of median wall time (its split, FLOP/s and extrapolation stay consistent with it), with every
    repeat's s/image, their spread (max - min) / median and the highest peak memory of the repeats."""
    ordered = sorted(runs, key=lambda r: r["s_per_image"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    times = [r["s_per_image"] for r in runs]
    mid["repeats_s_per_image"] = times
    mid["spread"] = (max(times) - min(times)) / mid["s_per_image"] if mid["s_per_image"] else 0.0
    peaks = [r["peak_memory_gb"] for r in runs if r["peak_memory_gb"] is not None]
    mid["peak_memory_gb"] = max(peaks) if peaks else None
    return mid


def matmul_flops_per_s(device: str, dtype, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` on `device`: the attainable peak the MFU is also read against."""
    import torch

    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(2):
        a @ b
    sync()
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync()
    return 2.0 * n**3 * repeats / (time.perf_counter() - t)


def vlm_phase(args, out: dict, deadline: float) -> None:
    import torch

    from describer.backends import CaptionRequest, Sampling
    from describer.backends.transformers import TransformersBackend
    from describer.prompts import GUIDELINE_PROMPT

    vlm = out["vlm"]
    if time.perf_counter() > deadline:
        vlm["skipped"] = "time budget"
        return
    suffix = "" if args.scale == 1 else f"@{args.scale:g}"
    _peak_reset(args.device)
    t0 = time.perf_counter()
    cap = TransformersBackend(f"shapes:qwen3-vl{suffix}", device=args.device, dtype="bfloat16")
    cap._load()
    cap._model.generation_config.min_new_tokens = args.vlm_tokens  # fixed length: EOS cannot end a row early
    vlm["load_s"] = time.perf_counter() - t0
    image = _image(256)
    n, tok = args.n, args.vlm_tokens

    def sync():
        if str(args.device).startswith("cuda"):
            torch.cuda.synchronize()

    def timed(fn) -> float:
        sync()
        t = time.perf_counter()
        got = fn()
        sync()
        assert got == n, f"expected {n} candidates, got {got}"
        return time.perf_counter() - t

    def batched() -> int:
        return len(
            cap.generate(
                [CaptionRequest(image, seed=1)], GUIDELINE_PROMPT, Sampling(n=n, max_new_tokens=tok)
            )[0]
        )

    def one_by_one() -> int:
        s = Sampling(n=1, max_new_tokens=tok)
        return sum(
            len(cap.generate([CaptionRequest(image, seed=k)], GUIDELINE_PROMPT, s)[0]) for k in range(n)
        )

    cap.generate(
        [CaptionRequest(image, seed=0)], GUIDELINE_PROMPT, Sampling(n=1, max_new_tokens=2)
    )  # warm-up
    t_b = timed(batched)
    t_1 = timed(one_by_one)
    vlm.update(
        {
            "n": n,
            "new_tokens": tok,
            "image": "256x256",
            "batched_cand_per_s": n / t_b,
            "one_per_call_cand_per_s": n / t_1,
            "ratio": t_1 / t_b,
            "peak_memory_gb": _peak_gb(args.device),
        }
    )
    cap.unload()


def _t2i_line(r: dict) -> str:
    s, b = r["scorer"], r["bare"]
    sp = s["split_s_per_image"]
    pct = lambda v: f"{100 * v:5.1f}%" if v else "     -"  # noqa: E731
    mem = lambda m: f"{m['peak_memory_gb']:6.1f}" if m["peak_memory_gb"] is not None else "     -"  # noqa: E731
    fl = s["dit_flops_per_s"]
    return (
        f"{r['size']:>5} {r['batch']:>3} {s['s_per_image']:9.3f} {pct(s['spread'])} {b['s_per_image']:9.3f} "
        f"{pct(b['spread'])} {r['ratio']:5.2f} {s['s_per_image_full']:9.3f} {b['s_per_image_full']:9.3f} "
        f"{r['ratio_full']:5.2f} {(fl or 0) / 1e12:8.2f} {pct(r['mfu'])} {pct(r['mfu_matmul'])} "
        f"{mem(s)} {mem(b)} | {sp.get('text_encoder', 0):7.3f} {sp.get('dit', 0):7.3f} "
        f"{sp.get('vae_decode', 0):7.3f} {sp.get('dreamsim', 0):7.3f}"
    )


def _t2i_header(args) -> str:
    return (
        f"{'size':>5} {'B':>3} {'scorer':>9} {'spread':>6} {'bare':>9} {'spread':>6} {'ratio':>5} "
        f"{'scorer@' + str(args.full_steps):>9} {'bare@' + str(args.full_steps):>9} {'ratio':>5} "
        f"{'DiT TF/s':>8} {'MFU':>6} {'MFU-mm':>6} {'GB sc':>6} {'GB bare':>6} | {'textenc':>7} {'DiT':>7} "
        f"{'VAE':>7} {'DreamSim':>7}\n(seconds per image, median of {args.repeats} interleaved repeats; spread = "
        "(max - min) / median; MFU against the datasheet bf16 peak, MFU-mm against the matmul measured here; "
        "peak GPU memory per path; split from the scorer run)"
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--scale", type=float, default=1.0, help="width factor of the shapes models (1 = published)"
    )
    ap.add_argument("--sizes", default="256,496,512,1024")
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each (size, batch)")
    ap.add_argument("--steps", type=int, default=2, help="DiT steps actually run per call")
    ap.add_argument("--full-steps", type=int, default=28, help="steps the extrapolated figures stand for")
    ap.add_argument(
        "--max-sequence-length", type=int, default=None, help="text-encoder tokens (default: the paper's 512)"
    )
    ap.add_argument("--n", type=int, default=10, help="describer candidates per image")
    ap.add_argument("--vlm-tokens", type=int, default=64, help="fixed number of new tokens per candidate")
    ap.add_argument("--budget-s", type=float, default=420, help="T2I configs not started by then are skipped")
    ap.add_argument(
        "--peak-tflops", type=float, default=None, help="bf16 peak if the device is not in the table"
    )
    ap.add_argument("--attention-backend", default=None, help="diffusers attention backend, e.g. flash")
    ap.add_argument(
        "--compile", action="store_true", help="torch.compile the DiT (adds compile time per shape)"
    )
    ap.add_argument("--skip-vlm", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.batches = [int(b) for b in args.batches.split(",")]
    start = time.perf_counter()
    deadline = start + args.budget_s

    import torch

    from recon_score.runtime import provenance, utc_now

    if str(args.device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # bf16 weights; TF32 would only touch fp32 leftovers
    out: dict = {
        "benchmark": "gpu_throughput",
        "date": utc_now(),
        "note": "random weights at published sizes (shapes:): timings are real, scores meaningless",
        "device": torch.cuda.get_device_name() if str(args.device).startswith("cuda") else str(args.device),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "switches": {
            "attention_backend": args.attention_backend or "diffusers default",
            "compile_dit": args.compile,
        },
        "flop_formula": FLOP_FORMULA,
        "extrapolation": f"{args.steps} DiT steps run per call; *@{args.full_steps} figures add "
        f"({args.full_steps}-{args.steps}) x the measured time per step",
        "t2i": {"rows": []},
        "vlm": {},
        "provenance": provenance(),
    }
    print(
        f"device {out['device']}, scale {args.scale:g}, {args.steps} steps run, extrapolated to {args.full_steps}"
    )
    print(FLOP_FORMULA)
    if not args.skip_vlm:
        vlm_phase(args, out, deadline)
        v = out["vlm"]
        if "skipped" in v:
            print(f"describer: skipped ({v['skipped']})")
        else:
            print(
                f"describer N={v['n']}, {v['new_tokens']} new tokens each (EOS ignored): num_return_sequences "
                f"{v['batched_cand_per_s']:.2f} cand/s vs one per call {v['one_per_call_cand_per_s']:.2f} cand/s, "
                f"ratio {v['ratio']:.2f}; VLM phase peak GPU memory {v['peak_memory_gb']} GB"
            )
    save = _saver(args)
    save(out)
    print(_t2i_header(args))
    t2i_phase(args, out, deadline, save)
    print(
        f"T2I phase peak GPU memory: {out['t2i']['peak_memory_gb']} GB (load {out['t2i']['load_s']:.1f} s); "
        f"matmul {out['t2i']['matmul']}: {out['t2i']['matmul_flops_per_s'] / 1e12:.2f} TFLOP/s"
    )
    out["total_s"] = time.perf_counter() - start
    print(f"total {out['total_s']:.1f} s")
    save(out)
    return out


def _saver(args):
    """Writes the JSON after every row, so a run cut short by its timeout still leaves its numbers."""
    targets = [args.json] if args.json else []
    if os.environ.get("OUT"):
        targets.append(Path(os.environ["OUT"]) / "gpu_throughput.json")

    def save(out: dict) -> None:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(out, indent=2, default=str), encoding="utf-8")

    return save


if __name__ == "__main__":
    main()
