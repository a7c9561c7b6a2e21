"""`shapes:` models: published sizes on the meta device, random weights materialised through the real loaders."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from recon_score.errors import ModelNotAvailableError
from recon_score.hub import resolve_model
from recon_score.synthetic import shapes

REPO = Path(__file__).resolve().parents[2]


def _within(count: int, key: str, tol: float = 0.02) -> None:
    published = shapes.PUBLISHED_PARAMS[key]
    assert abs(count - published) <= tol * published, f"{key}: {count:,} vs published {published:,}"


def _all_meta(module) -> bool:
    return all(p.is_meta for p in module.parameters())


def test_full_size_parameter_counts_on_meta():
    """The shapes cannot drift: every full-size model matches its published parameter count (2%), and building it
    allocates no parameter storage."""
    dit = shapes.meta_dit()
    assert shapes.count_params(dit) == 6_154_908_736  # diffusers' defaults = Z-Image
    for key, model in (
        ("z-image/text_encoder", shapes.meta_text_encoder()),
        ("z-image/vae", shapes.meta_vae()),
        ("qwen3-vl-8b", shapes.meta_vlm()),
    ):
        _within(shapes.count_params(model), key)
        assert _all_meta(model)
    assert _all_meta(dit)
    ensemble = shapes.meta_dreamsim_ensemble()
    towers = ensemble.base_model.model.extractor_list
    assert [e.model_type for e in towers] == ["dino_vitb16", "clip_vitb16", "open_clip_vitb16"]
    for tower in towers:
        _within(shapes.count_params(tower.model), "dreamsim/tower")
    assert any("lora_A" in n for n, _ in ensemble.named_parameters())
    for arch in ("ViT-B-32-quickgelu", "ViT-L-14-quickgelu"):
        _within(shapes.count_params(shapes.meta_open_clip(arch)[0]), f"open_clip/{arch}")


def test_text_encoder_matches_z_image_dit_input_width():
    assert (
        shapes.z_image_dit_config(1.0)["cap_feat_dim"] == shapes.qwen3_4b_config(1.0)["hidden_size"] == 2560
    )
    for s in (0.02, 0.1, 0.5):
        assert shapes.z_image_dit_config(s)["cap_feat_dim"] == shapes.qwen3_4b_config(s)["hidden_size"]


def test_materialize_keeps_ties_buffers_and_dtype():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=100,
        tie_word_embeddings=True,
    )
    reference = Qwen3ForCausalLM(cfg)  # transformers' own construction: the rotary table to reproduce
    with shapes.empty_weights():
        model = Qwen3ForCausalLM(cfg)
    shapes.materialize(model, device="cpu", dtype=torch.bfloat16, seed=3)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in model.parameters())
    assert all(torch.isfinite(p.float()).all() for p in model.parameters())
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    out = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(out.float()).all()


def test_analytic_dit_flops_match_torch_flop_counter():
    """The benchmark's FLOP formula against an outside count: torch's FlopCounterMode on a scaled DiT."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    gpu = _load_benchmark()
    dit = shapes.materialize(shapes.meta_dit(0.02), device="cpu", dtype=torch.float32)
    latent = torch.randn(16, 1, 8, 8)  # a 64x64 image: 4x4 patches of 2 on the 8x8 latent = 16 tokens
    cap = torch.randn(40, dit.config.cap_feat_dim)
    # the math SDPA kernel runs attention as matmuls, which the counter sees (it has no formula for CPU flash)
    with sdpa_kernel(SDPBackend.MATH), torch.inference_mode(), FlopCounterMode(display=False) as counter:
        dit([latent], torch.tensor([0.5]), [cap], return_dict=False)
    analytic = gpu.dit_flops(dit, 16, 40)
    counted = counter.get_total_flops()
    assert abs(analytic - counted) <= 0.03 * counted, (analytic, counted)


def test_bad_shapes_names_fail_clearly():
    with pytest.raises(
        ModelNotAvailableError, match=r"unknown synthetic model 'shapes:nope'.*; known: .*shapes:z-image"
    ):
        resolve_model("shapes:nope")
    with pytest.raises(ModelNotAvailableError, match=r"scale must be in \(0, 1\]"):
        resolve_model("shapes:z-image@2")
    with pytest.raises(ModelNotAvailableError, match="encoder with no folder"):
        resolve_model("shapes:dreamsim")


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("gpu_throughput", REPO / "benchmarks" / "gpu_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_benchmark_runs_end_to_end_scaled_down(tmp_path):
    """benchmarks/gpu_throughput.py on the CPU with widths x0.02: the same loaders, scorer, pipeline and captioner
    as the GPU run. Checks what the table is made of, not timings."""
    gpu = _load_benchmark()
    target = tmp_path / "g.json"
    gpu.main(
        [
            "--device=cpu",
            "--scale=0.02",
            "--sizes=64",
            "--batches=1,2",
            "--steps=1",
            "--full-steps=3",
            "--max-sequence-length=96",  # the 36-layer text encoder at 512 tokens dominates a CPU run
            "--n=2",
            "--vlm-tokens=2",
            "--budget-s=100000",
            "--repeats=2",
            f"--json={target}",
        ]
    )
    out = json.loads(target.read_text())
    rows = out["t2i"]["rows"]
    assert [(r["size"], r["batch"]) for r in rows] == [(64, 1), (64, 2)]
    for r in rows:
        for path in ("scorer", "bare"):
            m = r[path]
            split = m["split_s_per_image"]
            assert set(split) == {"text_encoder", "dit", "vae_decode", "dreamsim"}
            # the stages are timed inside the wall time, each once
            assert sum(split.values()) <= m["s_per_image"] * (1 + 1e-6)
            # 28-step extrapolation: only the DiT scales with steps (1 measured, 3 full)
            assert m["s_per_image_full"] == pytest.approx(m["s_per_image"] + 2 * split["dit"], rel=1e-9)
            assert m["tokens"] and all(n_img == 16 for n_img, _ in m["tokens"])
            # the median of the interleaved repeats, with their spread; peak memory per path (None on a CPU)
            assert len(m["repeats_s_per_image"]) == 2 and m["s_per_image"] in m["repeats_s_per_image"]
            assert m["spread"] >= 0 and "peak_memory_gb" in m
        # both paths render a batch in one pipeline call (1 step each): the ratio is overhead, not batching
        assert r["scorer"]["dit_calls"] == 1 and r["bare"]["dit_calls"] == 1
        assert r["ratio"] == pytest.approx(r["bare"]["s_per_image"] / r["scorer"]["s_per_image"], rel=1e-9)
        fl = r["scorer"]["dit_flops_per_s"]
        assert r["mfu_matmul"] == pytest.approx(fl / out["t2i"]["matmul_flops_per_s"], rel=1e-9)
    assert out["t2i"]["matmul_flops_per_s"] > 0
    assert out["t2i"]["dit_dim"] == 128
    assert out["switches"] == {"attention_backend": "diffusers default", "compile_dit": False}
    v = out["vlm"]
    assert (v["n"], v["new_tokens"]) == (2, 2)
    assert v["ratio"] == pytest.approx(v["batched_cand_per_s"] / v["one_per_call_cand_per_s"], rel=1e-9)
