"""CompoDiff from its released layout: the port reproduces the authors' denoiser and sampler, the method runs in
`retrieve` on a synthetic PatternCom, and its settings are the paper's.

Reference outputs come from the authors' compodiff/models.py on a tiny random checkpoint
(tests/retrieval/data/compodiff/PROVENANCE.md). Tolerance: max abs difference < 1e-5 in float32 for one denoiser
call and one guided call. The sampler chains 10 guided calls (guidance weights 1.5 and 7.5 scale each step's rounding
by up to ~10) on values up to ~4.5, so its bound is relative: 1e-4 of the largest reference value (measured: 0 on
one CPU, 4.7e-5 on another with a different BLAS kernel order; float32's epsilon is 1.2e-7).
"""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from retrieval.compodiff import CompoDiff, CompoDiffConfig, load_compodiff
from retrieval.methods import build_method
from tests.retrieval import layouts
from tests.smoke_cli import retrieve_patterncom

DATA = Path(__file__).parent / "data" / "compodiff"
TOL = 1e-5
SAMPLER_RTOL = 1e-4


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The tiny release folder, its weights unpacked."""
    folder = tmp_path_factory.mktemp("compodiff") / "compodiff_tiny"
    folder.mkdir()
    shutil.copy(DATA / "compodiff_tiny" / "config.json", folder)
    with gzip.open(DATA / "compodiff_tiny" / "pytorch_model.bin.gz") as fh:
        (folder / "pytorch_model.bin").write_bytes(fh.read())
    return folder


def test_the_port_reproduces_the_authors_denoiser_and_sampler(release):
    model = load_compodiff(release)
    assert model.cfg == CompoDiffConfig(
        embed_dim=16, depth=2, dim_head=8, heads=2, timesteps=100, text_width=32
    )
    r = {k: torch.from_numpy(v) for k, v in np.load(DATA / "compodiff_reference.npz").items()}
    mask = torch.zeros(2, 64, 64)
    with torch.no_grad():
        out = model.net(r["image_embed"], r["image_cond"], r["text_cond"], mask, r["time"])
        assert (out - r["forward"]).abs().max().item() < TOL
        guided = model.net.guided(
            r["image_embed"], r["image_cond"], r["text_cond"], r["negative_cond"], mask, r["time"], (1.5, 7.5)
        )
        assert (guided - r["guided"]).abs().max().item() < TOL
    sampled = model.sample(
        r["image_cond"], r["text_cond"], r["negative_cond"], steps=10, num_samples=2, seed=0
    )
    bound = SAMPLER_RTOL * max(1.0, r["sampled"].abs().max().item())
    assert (sampled - r["sampled"]).abs().max().item() < bound


def test_the_sampler_leaves_the_callers_random_state_alone(release):
    """The sampler draws the authors' noise from generators seeded inside it and restored after it: the caller's
    next draw is the one it would have made without sampling, and the sample does not depend on that state."""
    model = load_compodiff(release)
    r = {k: torch.from_numpy(v) for k, v in np.load(DATA / "compodiff_reference.npz").items()}
    args = (r["image_cond"], r["text_cond"], r["negative_cond"])
    torch.manual_seed(123)
    untouched = torch.rand(4)
    torch.manual_seed(123)
    first = model.sample(*args, steps=10, num_samples=2, seed=0)
    assert torch.equal(torch.rand(4), untouched)
    torch.manual_seed(999)
    assert torch.equal(model.sample(*args, steps=10, num_samples=2, seed=0), first)


def test_the_defaults_are_the_papers_and_bad_settings_are_refused():
    cfg = build_method("compodiff").config
    assert (cfg.steps, cfg.source_weight, cfg.negative_prompt) == (10, 0.4, "low quality")
    assert (cfg.image_scale, cfg.text_scale, cfg.num_samples) == (1.5, 7.5, 2)
    with pytest.raises(ValueError, match="source_weight must be in"):
        build_method("compodiff", {"source_weight": "1.5"})


def test_a_checkpoint_with_parameters_the_config_does_not_use_is_refused(release, tmp_path):
    """A checkpoint with 2 layers under a config.json that asks for 1 used to load silently as a 1-layer model."""
    folder = tmp_path / "one_layer"
    shutil.copytree(release, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_depth": 1}))
    with pytest.raises(
        ValueError, match=r"checkpoint parameters that config\.json's model does not use.*layers\.1"
    ):
        load_compodiff(folder)


def test_clip_inputs_are_the_authors_fp16_rounded_towers_and_512_squash():
    """models.py CLIPHF: from_pretrained(torch_dtype=float16).to(float32); demo_search.py: resize((512, 512))
    before build_model's CLIPImageProcessor (clip_inputs/, made by make_compodiff_clip_inputs.py)."""
    import open_clip
    from PIL import Image

    from retrieval.methods.compodiff import load_text_encoder, squash

    ref = np.load(DATA / "clip_inputs" / "reference.npz")
    ids, mask = torch.from_numpy(ref["ids"]).long(), torch.from_numpy(ref["mask"]).long()
    diff = {}
    for mode in ("fp16-rounded", "as-stored"):
        with torch.no_grad():
            states = load_text_encoder(DATA / "clip_inputs" / "text_encoder", mode)(ids, attention_mask=mask)
        diff[mode] = float(np.abs(states.last_hidden_state.numpy() - ref["states"]).max())
    assert diff["fp16-rounded"] < 1e-5 < diff["as-stored"]
    mean, std = (
        open_clip.OPENAI_DATASET_MEAN,
        open_clip.OPENAI_DATASET_STD,
    )  # open_clip:ViT-L-14-quickgelu/openai
    transform = open_clip.image_transform(224, is_train=False, mean=mean, std=std, resize_mode="shortest")
    pacs = Path(__file__).parents[1] / "data" / "metrics" / "pacscore"
    for i in range(2):
        image = Image.open(pacs / f"image{i}.png")
        levels = lambda px: (px.numpy() * np.array(std)[:, None, None] + np.array(mean)[:, None, None]) * 255  # noqa: E731
        near = np.abs(levels(transform(squash(image, "squash-512"))) - ref["levels"][i])
        # open_clip's torchvision resize and the processor's PIL resize round 0.4% of values one level apart
        assert near.max() < 1.001 and (near > 0.5).mean() < 0.01
        assert (np.abs(levels(transform(squash(image, "none"))) - ref["levels"][i]) > 0.5).mean() > 0.5


def test_a_release_without_weights_or_config_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"has no config\.json"):
        load_compodiff(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"neither model\.safetensors nor pytorch_model\.bin"):
        load_compodiff(tmp_path)


def _release_for_smoke(folder: Path) -> Path:
    """A random release in the hub layout (config.json + model.safetensors, keys `model.…`) sized for the smoke
    encoders: 32-d image space (smoke:open-clip), 32-wide text states (smoke:hf-clip)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = CompoDiff(
        CompoDiffConfig(embed_dim=32, depth=1, dim_head=8, heads=2, timesteps=50, text_width=32)
    )
    state = {}
    for key, value in model.state_dict().items():
        value = torch.randn_like(value) * 0.1 if "net." in key else value
        state["model." + (key if key.startswith("net.") else "noise_scheduler." + key)] = value.contiguous()
    betas = torch.linspace(1e-4, 0.05, 50, dtype=torch.float64)
    cumprod = torch.cumprod(1 - betas, 0)
    prev = torch.cat([torch.ones(1, dtype=torch.float64), cumprod[:-1]])
    state["model.noise_scheduler.alphas_cumprod_prev"] = prev.float()
    state["model.noise_scheduler.sqrt_recip_alphas_cumprod"] = (1 / cumprod).sqrt().float()
    state["model.noise_scheduler.sqrt_recipm1_alphas_cumprod"] = (1 / cumprod - 1).sqrt().float()
    folder.mkdir(parents=True)
    config = {"embed_dim": 32, "model_depth": 1, "model_dim": 8, "model_heads": 2, "timesteps": 50}
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "CompoDiff"}))
    save_file(state, str(folder / "model.safetensors"))
    return folder


def test_retrieve_runs_compodiff_on_a_synthetic_patterncom(tmp_path, capsys):
    release = _release_for_smoke(tmp_path / "CompoDiff-tiny")
    root, out = layouts.patterncom(tmp_path / "PatternNet"), tmp_path / "out"
    argv = retrieve_patterncom(root, out, "compodiff,image", "--checkpoint", f"compodiff={release}",
                               "--set", "compodiff.text_encoder=smoke:hf-clip", "--set", "compodiff.steps=4")  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    record = json.loads((out / "run.json").read_text())
    method = record["methods"]["compodiff"]
    assert (
        method["status"] == "ok"
        and method["config"]["source_weight"] == 0.4
        and method["config"]["steps"] == 4
    )
    assert any("4 steps (3 denoiser evaluations), source weight 0.4" in n for n in method["notes"])
    per_query = pd.read_parquet(out / "per_query.parquet")
    rows = per_query[per_query["method"] == "compodiff"]
    assert len(rows) == record["benchmark"]["queries"] and rows["ap"].between(0, 1).all()
    assert "| compodiff |" in (out / "table.md").read_text()


def test_source_weight_one_is_the_image_only_baseline(tmp_path):
    """w = 1 keeps only the reference embedding: CompoDiff's scores are then the `image` baseline's (with the
    reference read as the baseline reads it: not squashed, the run encoder's own weights)."""
    from retrieval.run import RetrieveConfig, run_retrieve

    release = _release_for_smoke(tmp_path / "CompoDiff-tiny")
    root = layouts.patterncom(tmp_path / "PatternNet")
    cfg = RetrieveConfig(
        benchmark="patterncom", root=root, encoder="smoke:open-clip", methods=["compodiff", "image"],
        out=tmp_path / "out", checkpoints={"compodiff": release}, device="cpu",
        overrides={"compodiff": {"text_encoder": "smoke:hf-clip", "steps": "2", "source_weight": "1",
                                 "clip_weights": "as-stored", "reference_resize": "none"}},
    )  # fmt: skip
    assert run_retrieve(cfg, progress=False).exit_code == 0
    per_query = pd.read_parquet(tmp_path / "out" / "per_query.parquet")
    ap = per_query.pivot(index="query_index", columns="method", values="ap")
    assert np.allclose(ap["compodiff"], ap["image"], atol=1e-6)


def test_the_reference_tower_is_a_rounded_copy_and_the_database_encoder_is_untouched():
    """clip_weights="fp16-rounded": every parameter of a copy of the run's open_clip image tower goes through fp16
    (what from_pretrained(torch_dtype=float16).to(float32) does to the authors' vision tower)."""
    from recon_score.encoders import build_encoder
    from retrieval.methods.compodiff import reference_encoder

    enc = build_encoder("smoke:open-clip", device="cpu")
    before = {k: v.clone() for k, v in enc.model.state_dict().items()}
    rounded, note = reference_encoder(enc, "fp16-rounded")
    assert note == "fp16-rounded copy" and rounded is not enc
    for key, value in rounded.model.named_parameters():
        assert torch.equal(value, before[key].half().float()), key
    assert all(torch.equal(v, before[k]) for k, v in enc.model.state_dict().items())
    assert any(
        not torch.equal(before[k].half().float(), before[k]) for k in before if before[k].is_floating_point()
    )
    assert reference_encoder(enc, "as-stored") == (enc, "as stored")
