"""Text2Earth loaded as its README loads it (github.com/Chen-Yang-Liu/Text2Earth):

    scheduler = EulerDiscreteScheduler.from_pretrained(model_id, subfolder="scheduler")
    pipe = StableDiffusionPipeline.from_pretrained(model_id, torch_dtype=..., scheduler=scheduler,
                                                   custom_pipeline="pipeline_text2earth_diffusion", safety_checker=None)

A tiny Stable-Diffusion-format folder stands in for the release: its pipeline class exists only in the folder's
`pipeline_text2earth_diffusion.py` (written here) and its saved scheduler is DDIM (the README: "if you don't swap
the scheduler it will run with the default DDIM"). The file runs only with --trust-remote-code.
"""

import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest
import torch

from eval.cli import main
from recon_score.errors import ReconScoreError
from recon_score.presets import get_preset
from recon_score.render import Renderer, RenderRequest

CUSTOM = '''"""A custom pipeline: the class model_index.json names, defined only here."""
from diffusers import StableDiffusionPipeline


class Text2EarthDiffusionPipeline(StableDiffusionPipeline):
    def __call__(self, prompt=None, *args, **kwargs):
        prompt = [p + " (custom)" for p in prompt] if isinstance(prompt, list) else prompt + " (custom)"
        return super().__call__(prompt, *args, **kwargs)
'''


@pytest.fixture(scope="module")
def text2earth(tmp_path_factory):
    from diffusers import DDIMScheduler

    from recon_score.synthetic.smoke import ensure_fixture

    folder = tmp_path_factory.mktemp("t2e") / "Text2Earth"
    shutil.copytree(ensure_fixture("stable-diffusion"), folder)
    config = DDIMScheduler.load_config(folder / "scheduler")
    DDIMScheduler.from_config(config).save_pretrained(folder / "scheduler")
    index = json.loads((folder / "model_index.json").read_text())
    index.update(_class_name="Text2EarthDiffusionPipeline", scheduler=["diffusers", "DDIMScheduler"])
    (folder / "model_index.json").write_text(json.dumps(index))
    (folder / "pipeline_text2earth_diffusion.py").write_text(CUSTOM)
    return folder


def _preset(folder):
    return dataclasses.replace(get_preset("text2earth"), t2i_model=str(folder), steps=3, max_side=64)


def test_refused_without_trust_remote_code(text2earth):
    from recon_score.scorer import ReconScorer

    scorer = ReconScorer(_preset(text2earth), device="cpu")
    with pytest.raises(ReconScoreError, match=r"--trust-remote-code") as err:
        scorer.renderer.check_loadable()
    assert "pipeline_text2earth_diffusion.py" in str(err.value)
    with pytest.raises(ReconScoreError, match=r"--trust-remote-code"):
        _ = scorer.renderer.pipe  # the loader refuses too, whoever calls it


def test_loads_and_renders_as_the_readme(text2earth):
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline

    renderer = Renderer(_preset(text2earth), device="cpu", trust_remote_code=True)
    request = RenderRequest(prompt="Seven green circular farmlands", width=64, height=64, seed=42)
    ours = renderer.render([request])[0]
    pipe = renderer.pipe
    assert type(pipe).__name__ == "Text2EarthDiffusionPipeline"
    assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"

    scheduler = EulerDiscreteScheduler.from_pretrained(text2earth, subfolder="scheduler")
    readme = StableDiffusionPipeline.from_pretrained(
        text2earth,
        torch_dtype=torch.float32,
        scheduler=scheduler,
        custom_pipeline="pipeline_text2earth_diffusion",
        safety_checker=None,
        trust_remote_code=True,
    )
    theirs = readme(
        request.prompt,
        height=64,
        width=64,
        num_inference_steps=3,
        guidance_scale=4.0,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))

    ident = renderer.identity()
    digest = hashlib.sha256((text2earth / "pipeline_text2earth_diffusion.py").read_bytes()).hexdigest()
    assert ident["custom_pipeline"] == {
        "name": "pipeline_text2earth_diffusion",
        "sha256": digest,
        "trust_remote_code": True,
    }
    assert ident["scheduler"] == "EulerDiscreteScheduler"


def test_score_cli_opt_in_recorded(text2earth, tmp_path, capsys):
    args = ["score", "--preset", "text2earth", "--t2i-model", str(text2earth), "--encoder", "smoke:dreamsim"]
    args += ["--steps", "2", "--max-side", "64", "--limit", "1", "--device", "cpu", "--no-cache"]
    assert main([*args, "--out", str(tmp_path / "refused")]) == 1
    err = capsys.readouterr().err
    assert "--trust-remote-code" in err and "Traceback" not in err
    assert main([*args, "--trust-remote-code", "--out", str(tmp_path / "run")]) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    t2i = run["config"]["t2i"]
    assert t2i["pipeline"] == "Text2EarthDiffusionPipeline" and t2i["scheduler"] == "EulerDiscreteScheduler"
    assert t2i["custom_pipeline"]["trust_remote_code"] is True
    assert run["config"]["preset"]["custom_pipeline"] == "pipeline_text2earth_diffusion"


def test_a_missing_pipeline_file_is_named(text2earth, tmp_path):
    folder = tmp_path / "no-file"
    shutil.copytree(text2earth, folder)
    (folder / "pipeline_text2earth_diffusion.py").unlink()
    renderer = Renderer(_preset(folder), device="cpu", trust_remote_code=True)
    with pytest.raises(ReconScoreError, match=r"no pipeline_text2earth_diffusion\.py in"):
        _ = renderer.pipe
