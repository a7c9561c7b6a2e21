"""Synthetic models: the one prefix table, and the `smoke:` models (real model classes with tiny random weights,
loadable like real checkpoints)."""

import numpy as np
import pytest
import torch

from recon_score import synthetic
from recon_score.encoders import FAMILIES, parse_spec
from recon_score.hub import locate, resolve_model
from recon_score.synthetic.smoke import FIXTURE_NAMES, ensure_fixture, fixture_path


def test_every_listed_model_has_a_maker_and_encoders_a_loader():
    """The table is the one list: each smoke family has a builder, each shapes pipeline/LM a folder writer, and
    each encoder entry parses as an encoder spec of an existing family."""
    from recon_score.synthetic import shapes, smoke

    assert set(smoke._builders()) == set(FIXTURE_NAMES)
    shapes_models = [m for m in synthetic.MODELS.values() if m.prefix == "shapes"]
    assert set(shapes._WRITERS) == {m.family for m in shapes_models if m.encoder is None}
    for row in synthetic.list_models():
        name = (
            row["name"]
            .replace("[@SCALE]", "")
            .replace("/ARCH", "/ViT-B-32")
            .replace("[/RELEASE]", "/longclip-B")
        )
        assert synthetic.parse(name).name == name
        if row["encoder"]:
            assert parse_spec(name) == (row["encoder"], name) and row["encoder"] in FAMILIES


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("smoke:z-image", ("smoke", "z-image", 1.0, "")),
        ("shapes:z-image@0.02", ("shapes", "z-image", 0.02, "")),
        ("shapes:qwen3-vl@0.5", ("shapes", "qwen3-vl", 0.5, "")),
        ("shapes:open-clip/ViT-L-14-quickgelu", ("shapes", "open-clip", 1.0, "ViT-L-14-quickgelu")),
    ],
)
def test_parse(name, parsed):
    n = synthetic.parse(name)
    assert (n.prefix, n.family, n.scale, n.arch) == parsed and n.name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("smoke:flux", "unknown synthetic model 'smoke:flux'.*; known: smoke:z-image"),
        ("shapes:qwen3-vl-8b", "unknown synthetic model"),  # the family is spelled as in smoke: qwen3-vl
        ("smoke:z-image@0.5", "spell it smoke:z-image$"),  # smoke models have one size
        ("shapes:z-image/ViT-B-32", r"spell it shapes:z-image\[@SCALE\]"),
        ("shapes:open-clip", "spell it shapes:open-clip/ARCH"),
        ("shapes:z-image@0", r"scale must be in \(0, 1\]"),
        ("shapes:z-image@big", "must be a number"),
    ],
)
def test_malformed_names_are_explained(name, why):
    with pytest.raises(ValueError, match=why):
        synthetic.parse(name)
    assert locate(name).available is False


def test_check_says_whether_a_smoke_model_is_built():
    info = locate("smoke:hf-dinov2")
    assert info.available is True and info.location == str(fixture_path("hf-dinov2"))
    assert info.detail == ("built" if (fixture_path("hf-dinov2") / ".complete").exists() else "not built yet")
    ensure_fixture("hf-dinov2")
    assert locate("smoke:hf-dinov2").detail == "built"


def test_fixtures_are_cached_on_disk():
    path = ensure_fixture("dreamsim")
    assert path == fixture_path("dreamsim") and (path / ".complete").exists()
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert ensure_fixture("dreamsim") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime  # not rebuilt
    with pytest.raises(KeyError, match="known"):
        ensure_fixture("flux-17")


def test_z_image_fixture_round_trips_exactly():
    from diffusers import ZImagePipeline

    resolved = resolve_model("smoke:z-image")
    assert resolved.revision.startswith("fixture:")

    def render(pipe):
        return pipe(
            prompt="two planes on a runway",
            height=64,
            width=96,
            num_inference_steps=2,
            guidance_scale=0.0,
            generator=torch.Generator("cpu").manual_seed(42),
            output_type="np",
        ).images

    pipe = ZImagePipeline.from_pretrained(resolved.path)
    pipe.set_progress_bar_config(disable=True)
    a, b = render(pipe), render(pipe)
    assert a.shape == (1, 64, 96, 3)
    np.testing.assert_array_equal(a, b)  # same seed, same pixels
    assert a.std() > 0.01  # not a constant image


def test_stable_diffusion_fixture_has_real_clip_tokenizer():
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(resolve_model("smoke:stable-diffusion").path)
    assert len(pipe.tokenizer) == 49408 and pipe.tokenizer.model_max_length == 77
    pipe.set_progress_bar_config(disable=True)
    img = pipe(
        "a harbor with ships",
        height=64,
        width=64,
        num_inference_steps=2,
        generator=torch.Generator("cpu").manual_seed(0),
        output_type="np",
    ).images
    assert img.shape == (1, 64, 64, 3)


def test_qwen3_vl_fixture_samples_reproducibly():
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = ensure_fixture("qwen3-vl")
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (112, 112, 3), dtype=np.uint8))
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}
    ]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[image], return_tensors="pt")

    def sample():
        torch.manual_seed(7)
        return model.generate(
            **inputs, do_sample=True, temperature=0.8, top_p=0.9, max_new_tokens=8, num_return_sequences=3
        )

    a, b = sample(), sample()
    assert a.shape[0] == 3
    torch.testing.assert_close(a, b)
    assert processor.batch_decode(a[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def _rank_builds_fixture(rank: int, world: int, init_file: str, cache: str) -> None:
    import os

    import torch.distributed as dist

    os.environ["RECONSCORE_CACHE"] = cache
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        from recon_score.synthetic.smoke import _missing_weights, ensure_fixture

        path = ensure_fixture("hf-dinov2")
        assert not _missing_weights(path), _missing_weights(path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.multiprocess
def test_fixture_built_inside_torch_distributed_has_weights(tmp_path):
    """transformers writes weights on rank 0 only; a fixture built first by rank 1 must still be complete
    (the CI failure of the two-process scoring test)."""
    import torch.multiprocessing as mp

    cache = tmp_path / "cache"
    mp.spawn(_rank_builds_fixture, args=(2, str(tmp_path / "init"), str(cache)), nprocs=2, join=True)
    from recon_score.synthetic.smoke import FIXTURE_VERSION

    path = cache / "fixtures" / f"v{FIXTURE_VERSION}" / "hf-dinov2"
    assert (path / ".complete").exists() and (path / "model.safetensors").exists()


def test_missing_weights_detects_weightless_components(tmp_path):
    from recon_score.synthetic.smoke import _missing_weights

    (tmp_path / "text_encoder").mkdir()
    (tmp_path / "text_encoder" / "config.json").write_text("{}")
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text("{}")
    (tmp_path / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    (tmp_path / "model_index.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    assert _missing_weights(tmp_path) == ["text_encoder"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "--encoder",
            "dreamsim:smoke",
            "'dreamsim:smoke': unknown dreamsim model 'smoke'",
        ),
        (
            "--encoder",
            "hf:smoke:hf-clip",
            "'hf:smoke:hf-clip': spell it 'smoke:hf-clip'",
        ),
        (
            "--t2i-model",
            "shapes:qwen3-vl-8b",
            "'shapes:qwen3-vl-8b':  unknown synthetic model 'shapes:qwen3-vl-8b' (did you mean 'shapes:qwen3-vl'?)",
        ),
    ],
)
def test_cli_names_a_misspelled_synthetic_model(tmp_path, capsys, option, value, message):
    """Another spelling of a synthetic model cannot start a run: one error (the preflight's list of missing models)
    naming it and why, exit 1, no traceback."""
    from eval.cli import main

    argv = ["score", "--preset", "smoke", option, value, "--limit", "1", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err  # (a first use may print the smoke models' build progress before)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in err and "Traceback" not in err, err


def test_the_hub_hands_each_synthetic_encoder_a_folder_or_a_builder():
    """One place resolves synthetic names: a folder in the loading library's own layout where it loads one, else a
    builder that makes the model on the device; nothing is built while resolving."""
    from recon_score.errors import UnknownEncoderError
    from recon_score.hub import resolve_encoder

    folder = resolve_encoder("smoke:open-clip")
    assert folder.build is None and (folder.path / "open_clip_config.json").is_file()
    assert "random weights" in folder.source
    release = resolve_encoder("smoke:open-clip/pacs-ViT-B-32")
    assert release.path is None and release.stands_for == "pacs-ViT-B-32" and callable(release.build)
    arch = resolve_encoder("shapes:open-clip/ViT-B-32-quickgelu")
    assert (
        arch.path is None and arch.stands_for == "ViT-B-32-quickgelu" and arch.revision.startswith("shapes:")
    )
    tiny = resolve_encoder("smoke:dreamsim")  # its own small format: read by a builder, not by dreamsim
    assert (tiny.path / "model.safetensors").is_file() and callable(tiny.build)
    with pytest.raises(UnknownEncoderError, match="'ViT-B-32' is not a released CLIP fine-tune"):
        resolve_encoder("smoke:open-clip/ViT-B-32")
    with pytest.raises(UnknownEncoderError, match="unknown open_clip architecture 'ViT-Q'"):
        resolve_encoder("shapes:open-clip/ViT-Q")


def test_shapes_pipelines_come_with_their_builder():
    resolved = resolve_model("shapes:z-image@0.02")
    assert (resolved.path / "model_index.json").is_file() and callable(resolved.build)
    assert resolve_model("smoke:z-image").build is None  # a real diffusers folder: the pipeline loads it


@pytest.mark.parametrize(
    "module",
    [
        "recon_score/encoders/__init__.py",
        "recon_score/encoders/open_clip.py",
        "recon_score/encoders/dreamsim.py",
        "recon_score/encoders/dreamsim_files.py",
        "recon_score/encoders/hf.py",
        "recon_score/render.py",
        "describer/backends/transformers.py",
    ],
)
def test_loaders_do_not_resolve_synthetic_names(module):
    """The loaders load what recon_score.hub hands them: none asks the synthetic registry about a name."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / module).read_text(encoding="utf-8")
    assert "from recon_score import synthetic" not in text
    for call in ("synthetic.is_synthetic", "synthetic.parse", "synthetic.resolve", "synthetic.check"):
        assert call not in text, f"{module} calls {call}"


def test_seeded_makes_manual_seeds_draws_and_leaves_the_callers_state(tmp_path):
    """`seeded(s)` draws what torch.manual_seed(s) makes torch draw, then puts the caller's generator back; a
    tiny model built with it has the weights of a build after torch.manual_seed and leaves the state alone."""
    import open_clip

    from recon_score.runtime import seeded
    from recon_score.synthetic.tiny_models import OPEN_CLIP_TINY_CFG, build_open_clip

    torch.manual_seed(5)
    want = torch.randn(3)
    reference = open_clip.CLIP(**OPEN_CLIP_TINY_CFG).state_dict()  # what torch.manual_seed(5) then init gives
    torch.manual_seed(77)
    before = torch.get_rng_state()
    with seeded(5):
        assert torch.equal(torch.randn(3), want)
        built = open_clip.CLIP(**OPEN_CLIP_TINY_CFG).state_dict()
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(built[k], v) for k, v in reference.items())
    build_open_clip(tmp_path / "clip", seed=3)
    assert torch.equal(torch.get_rng_state(), before)


def test_loading_the_renderer_leaves_the_libraries_progress_bars_as_they_were():
    """The renderer quiets diffusers' and transformers' loading bars while it loads, then puts them back: the
    caller's choice (on, or off) is what it was before."""
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    from recon_score.presets import get_preset
    from recon_score.render import Renderer
    from recon_score.runtime import loading_bars_off

    dlog.enable_progress_bar()  # the CLI, which other tests run in this process, turns them off for its run
    tlog.enable_progress_bar()
    assert Renderer(get_preset("smoke"), device="cpu").pipe is not None
    assert dlog.is_progress_bar_enabled() and tlog.is_progress_bar_enabled()
    tlog.disable_progress_bar()
    try:
        with loading_bars_off("transformers"):
            assert not tlog.is_progress_bar_enabled()
        assert not tlog.is_progress_bar_enabled()  # the caller had them off: they stay off
    finally:
        tlog.enable_progress_bar()
