"""The `paper` protocol against the authors' code (github.com/hhu-czy/ReconScore) and the ReconScore paper's Table 9.

Captions: the authors' scripts/image_generator.py builds the prompt as
    "I want a remote sensing image with a realistic satellite perspective view. " + caption +
    " Remember, I want a vertical remote sensing satellite perspective from top to bottom."
with the caption exactly as read from the JSON file.
"""

import json

import pytest

from eval.cli import main
from recon_score.artifact_cache import ArtifactCache
from recon_score.images import load_image
from recon_score.presets import PRESETS, get_preset
from recon_score.scorer import ReconScorer

MULTILINE = "Two  planes are parked\non the apron,\n\tnext to  a hangar.\n"


def _authors_prompt(caption: str) -> str:
    # generate_image in the authors' scripts/image_generator.py
    return (
        "I want a remote sensing image with a realistic satellite perspective view. "
        + caption
        + " Remember, I want a vertical remote sensing satellite perspective from top to bottom."
    )


@pytest.fixture(scope="module")
def ucm(sample_dir):
    return load_image(sample_dir / "images" / "UCM_1.tif")


def test_prompt_bytes_are_the_authors(smoke_scorer, ucm):
    assert smoke_scorer.preset.collapse_whitespace is False
    (res,) = smoke_scorer.score(ucm, [MULTILINE])
    assert res.ok, res.error
    assert res.prompt.encode("utf-8") == _authors_prompt(MULTILINE).encode("utf-8")
    assert res.caption == MULTILINE


def test_whitespace_collapsing_is_a_named_variant(ucm):
    s = ReconScorer.from_preset(
        "smoke", overrides={"collapse_whitespace": True}, device="cpu", cache=ArtifactCache(enabled=False)
    )
    (res,) = s.score(ucm, [MULTILINE])
    assert res.prompt == _authors_prompt("Two planes are parked on the apron, next to a hangar.")
    assert s.config()["preset"]["collapse_whitespace"] is True


@pytest.mark.parametrize("caption", ["", " \n\t ", None])
def test_empty_captions_are_still_refused(smoke_scorer, ucm, caption):
    (res,) = smoke_scorer.score(ucm, [caption])
    assert not res.ok and "caption" in res.error


def _authors_size(raw_w: int, raw_h: int, max_side: int) -> tuple[int, int]:
    # calculate_target_size + get_closest_multiple_of_16 in the authors' scripts/image_generator.py
    long_side = max(raw_w, raw_h)
    scale = max_side / long_side if long_side > max_side else 1.0
    return int(round(raw_w * scale / 16) * 16), int(round(raw_h * scale / 16) * 16)


def _authors_render(
    folder, caption: str, ref_img_path, *, max_side: int, seed: int, steps: int, tiling: bool
):
    """The authors' generate_image (scripts/image_generator.py) on a pipeline loaded as their batch_generate.py
    loads it on a CPU: ZImagePipeline.from_pretrained(float32), vae.enable_tiling(), one call per caption."""
    import torch
    from diffusers import ZImagePipeline
    from PIL import Image

    pipe = ZImagePipeline.from_pretrained(folder, torch_dtype=torch.float32, use_safetensors=True)
    pipe.set_progress_bar_config(disable=True)
    if tiling:
        pipe.vae.enable_tiling()
    with Image.open(ref_img_path) as ref_img:
        gen_width, gen_height = _authors_size(*ref_img.size, max_side)
    result = pipe(
        prompt=_authors_prompt(caption),
        height=gen_height,
        width=gen_width,
        num_inference_steps=steps,
        guidance_scale=0.0,
        generator=torch.Generator("cpu").manual_seed(seed),
    )
    return result.images[0]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((256, 256), (256, 256)),  # the bundled UCM tile: kept
        ((600, 400), (256, 176)),  # long side over max_side (smoke: 256): scaled down, 170.7 -> 176
        ((200, 120), (192, 128)),  # never scaled up; 12.5 grid steps round half to even: 200 -> 192
    ],
)
def test_reconstruction_is_the_authors_pipeline_call(smoke_scorer, sample_dir, tmp_path, size, expected):
    """Our reconstruction against a direct diffusers ZImagePipeline call with the authors' arguments (prompt
    template, size rule, steps, guidance 0, default max_sequence_length 512, a CPU generator seeded with the
    image's seed): the same pixels, byte for byte (same machine, same batch of one)."""
    import numpy as np
    from PIL import Image

    path = tmp_path / "ref.png"
    Image.open(sample_dir / "images" / "UCM_3.tif").convert("RGB").resize(size, Image.BICUBIC).save(path)
    caption = "many buildings and green trees are around a playground with a red running track"
    (res,) = smoke_scorer.score(path, [caption])
    assert res.ok, res.error
    preset = smoke_scorer.preset
    assert (preset.guidance_scale, preset.max_sequence_length, res.seed) == (0.0, 512, 42)
    assert (res.width, res.height) == expected == _authors_size(*size, preset.max_side)
    folder = smoke_scorer.renderer.resolved.path
    theirs = _authors_render(
        folder,
        caption,
        path,
        max_side=preset.max_side,
        seed=res.seed,
        steps=preset.steps,
        tiling=preset.vae_tiling,
    )
    ours = np.asarray(res.reconstruction.convert("RGB"))
    assert ours.shape == (expected[1], expected[0], 3)
    np.testing.assert_array_equal(ours, np.asarray(theirs.convert("RGB")))


def test_paper_uses_the_authors_size_rule():
    assert get_preset("paper").size_rounding == "nearest"
    assert get_preset("smoke").size_rounding == "nearest"  # smoke shrinks sizes, never swaps rules


TABLE9 = ["paper", "flux1-dev", "flux2-dev", "flux2-klein", "text2earth"]


@pytest.mark.parametrize("name", TABLE9)
def test_table9_presets_follow_sec_5_2(name):
    """The ReconScore paper Sec. 5.2: 28 denoising steps and 512 input tokens for every T2I model (Text2Earth: 77, Table 9)."""
    p = get_preset(name)
    assert p.steps == 28
    assert p.max_sequence_length == (None if name == "text2earth" else 512)
    assert (p.max_side, p.size_multiple, p.size_rounding, p.seed) == (1024, 16, "nearest", 42)
    assert p.prompt_template == get_preset("paper").prompt_template
    sources = p.sources
    assert "Sec. 5.2" in sources["steps"] and "Table 9" in sources["t2i_model"]


def test_distilled_settings_are_separate_presets():
    assert PRESETS["flux2-klein-fast"].steps == 4
    assert PRESETS["flux2-klein-fast"].t2i_model == PRESETS["flux2-klein"].t2i_model
    assert "not the ReconScore paper" in PRESETS["flux2-klein-fast"].sources["steps"]


def test_presets_cli_prints_values_and_sources(capsys):
    assert main(["presets", "show", "paper"]) == 0
    out = capsys.readouterr().out
    assert "size_rounding: nearest  # authors' code scripts/image_generator.py" in out
    assert "collapse_whitespace: false" in out
    assert main(["presets", "show", "flux2-klein"]) == 0
    assert "\nsteps: 28  # the ReconScore paper Sec. 5.2" in capsys.readouterr().out
    assert main(["presets", "list"]) == 0
    listed = capsys.readouterr().out
    assert "text2earth" in listed and "lcybuaa/Text2Earth" in listed and "flux2-klein-fast" in listed
    assert main(["presets", "show", "text2earth", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["t2i_model"] == "lcybuaa/Text2Earth"


def test_size_rounding_is_recorded_in_run_json(tmp_path):
    out = tmp_path / "run"
    argv = ["score", "--preset", "smoke", "--out", str(out), "--limit", "1", "--device", "cpu"]
    assert main([*argv, "--size-rounding", "floor", "--no-cache"]) == 0
    run = json.loads((out / "run.json").read_text())
    text = json.dumps(run)
    assert '"size_rounding": "floor"' in text and '"collapse_whitespace": false' in text


def test_requested_dtype_is_applied_to_every_component():
    """diffusers < 0.40 ignores `from_pretrained(dtype=...)` for its own models; the loader must not."""
    import torch

    from recon_score.hub import resolve_model
    from recon_score.render import load_pipeline

    path = resolve_model("smoke:z-image").path
    pipe = load_pipeline(path, "bfloat16")
    modules = {k: v for k, v in pipe.components.items() if isinstance(v, torch.nn.Module)}
    assert {"transformer", "vae", "text_encoder"} <= set(modules)
    for name, module in modules.items():
        dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
        assert dtypes == {torch.bfloat16}, name


def test_a_silently_ignored_dtype_is_an_error():
    import torch

    from recon_score.errors import ReconScoreError
    from recon_score.render import check_component_dtypes

    class Pipe:  # what diffusers 0.39 returns for dtype=bfloat16: its own models still float32
        def __init__(self):
            self.components = {"transformer": torch.nn.Linear(4, 4), "scheduler": object()}

    with pytest.raises(ReconScoreError, match=r"transformer in float32, not the requested bfloat16.*0\.40"):
        check_component_dtypes(Pipe(), "bfloat16", name="smoke:z-image")
    check_component_dtypes(Pipe(), "float32", name="smoke:z-image")


def _pipeline_folder(path, cls, script=None):
    path.mkdir()
    index = {
        "_class_name": cls,
        "_diffusers_version": "0.30.0",
        "unet": ["diffusers", "UNet2DConditionModel"],
    }
    (path / "model_index.json").write_text(json.dumps(index))
    if script:
        (path / script).write_text("# a custom pipeline\n")
    return path


def test_models_check_names_a_format_diffusers_cannot_build(tmp_path, capsys):
    """Text2Earth's README loads it with custom_pipeline='pipeline_text2earth_diffusion' (a Python file in the
    repo); a folder whose pipeline class only that file defines is reported with the exact reason."""
    from recon_score.errors import ReconScoreError
    from recon_score.render import load_pipeline

    folder = _pipeline_folder(
        tmp_path / "Text2Earth", "Text2EarthDiffusionPipeline", "pipeline_text2earth_diffusion.py"
    )
    assert main(["models", "check", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "NOT available" in out and "'Text2EarthDiffusionPipeline', which diffusers" in out
    assert "pipeline_text2earth_diffusion.py" in out and "remote code" in out
    with pytest.raises(ReconScoreError, match="Text2EarthDiffusionPipeline"):
        load_pipeline(folder, "float32")
    ok = _pipeline_folder(tmp_path / "sd", "StableDiffusionPipeline", "pipeline_text2earth_diffusion.py")
    assert main(["models", "check", str(ok)]) == 0
    assert "loads as diffusers' StableDiffusionPipeline" in capsys.readouterr().out


def test_protocol_doc_commands_run(capsys):
    """Every command in docs/protocol.md's shell blocks runs and succeeds."""
    import re
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    lines = [ln for block in re.findall(r"```shell\n(.*?)```", doc, re.S) for ln in block.splitlines() if ln]
    assert lines
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "reconscore", line
        assert main(argv[1:]) == 0, line
    assert "size_rounding: nearest" in capsys.readouterr().out
