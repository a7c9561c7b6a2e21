"""First contact without weights: one error names every missing model with its download command, before any
model loads and without hub retries (offline, an empty HF cache and an empty weights folder)."""

import pytest
from huggingface_hub import constants

from eval.cli import main
from recon_score import preflight
from recon_score.preflight import ModelNeed, ModelsMissingError, require_models


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("RECONSCORE_WEIGHTS", str(tmp_path / "weights"))
    return tmp_path


def _no_loading(monkeypatch):
    """Any attempt to build a model or resolve one through the hub fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded or resolved before the preflight")

    monkeypatch.setattr("recon_score.hub._download", refuse)
    monkeypatch.setattr("recon_score.scorer.build_encoder", refuse)
    monkeypatch.setattr("recon_score.encoders.build_encoder", refuse)


def test_score_paper_names_t2i_and_dreamsim_at_once(empty_caches, monkeypatch, capsys):
    _no_loading(monkeypatch)
    assert main(["score", "--preset", "paper", "--out", str(empty_caches / "run"), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "needs 2 model(s) not available here (HF_HUB_OFFLINE=1 is set)" in err
    assert "T2I model 'Tongyi-MAI/Z-Image'" in err and "download: hf download Tongyi-MAI/Z-Image" in err
    assert "similarity encoder 'dreamsim:ensemble'" in err
    dreamsim_dir = empty_caches / "weights" / "dreamsim"
    assert f'dreamsim(pretrained=True, dreamsim_type="ensemble", cache_dir="{dreamsim_dir}")' in err
    assert "--t2i-model" in err and "--weights-dir" in err
    assert "Retrying" not in err and "Traceback" not in err


def test_describe_paper_adds_the_vlm(empty_caches, monkeypatch, capsys):
    _no_loading(monkeypatch)
    assert main(["describe", "--preset", "paper", "--out", str(empty_caches / "d"), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "`reconscore describe` needs 3 model(s)" in err
    for needle in (
        "VLM (captioner) 'Qwen/Qwen3-VL-8B-Instruct'",
        "hf download Qwen/Qwen3-VL-8B-Instruct",
        "hf download Tongyi-MAI/Z-Image",
        "'dreamsim:ensemble'",
        "--captioner",
    ):
        assert needle in err


def test_correlate_clipscore_names_its_clip(empty_caches, monkeypatch, capsys, sample_dir):
    from pathlib import Path

    _no_loading(monkeypatch)
    prefs = Path(__file__).resolve().parents[2] / "preference_data" / "examples" / "ranking_example.jsonl"
    args = ["correlate", "--preferences", str(prefs), "--format", "ranking", "--metrics", "bleu4,clipscore"]
    assert main([*args, "--images", str(sample_dir), "--out", str(empty_caches / "c")]) == 1
    err = capsys.readouterr().err
    assert "encoder (clipscore) 'open_clip:ViT-B-32/openai'" in err
    # open_clip's own table says where the OpenAI ViT-B/32 weights live on the hub
    import open_clip

    repo = "/".join(open_clip.get_pretrained_cfg("ViT-B-32", "openai")["hf_hub"].strip("/").split("/")[:2])
    assert f"download: hf download {repo}" in err
    assert "Retrying" not in err


def test_present_models_pass_and_missing_local_paths_are_named(tmp_path):
    found = require_models([ModelNeed("T2I model", "smoke:z-image", "--t2i-model")])
    assert [s.available for s in found] == [True]
    with pytest.raises(ModelsMissingError, match=r"not found") as err:
        require_models(
            [
                ModelNeed("T2I model", str(tmp_path / "nowhere"), "--t2i-model"),
                ModelNeed("similarity encoder", "smoke:dreamsim", "--encoder", encoder=True),
            ]
        )
    assert [s.need.spec for s in err.value.missing] == [str(tmp_path / "nowhere")]


def test_an_unreachable_hub_is_found_once_and_the_run_goes_offline(empty_caches, monkeypatch):
    """Without HF_HUB_OFFLINE, one quick probe decides; the hub then stays unasked (no retries later)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    probed = []
    monkeypatch.setattr(preflight, "reachable", lambda host: probed.append(host) or False)
    needs = [
        ModelNeed("T2I model", "Tongyi-MAI/Z-Image", "--t2i-model"),
        ModelNeed("VLM (captioner)", "Qwen/Qwen3-VL-8B-Instruct", "--captioner"),
    ]
    with pytest.raises(ModelsMissingError, match=r"huggingface\.co did not answer"):
        require_models(needs)
    assert probed == ["huggingface.co"]
    assert constants.HF_HUB_OFFLINE is True  # both restored by monkeypatch at teardown


def test_a_host_that_does_not_exist_is_unreachable():
    assert preflight.reachable("reconscore-test.invalid", timeout=2) is False


@pytest.mark.parametrize(
    ("spec", "host", "download"),
    [
        (
            "hf:google/siglip2-base-patch16-224",
            "huggingface.co",
            "hf download google/siglip2-base-patch16-224",
        ),
        ("hf:/nowhere/siglip", None, None),  # a local folder that is not there: nothing to download
        ("open_clip:ViT-B-32@/nowhere/ckpt.pt", None, None),
    ],
)
def test_each_encoder_family_says_where_from(empty_caches, spec, host, download):
    status = preflight.check_need(ModelNeed("encoder", spec, "--encoder", encoder=True))
    assert not status.available and status.host == host and status.download == download


def test_a_name_not_in_a_family_is_a_typo_not_a_missing_download(empty_caches):
    from recon_score.errors import UnknownEncoderError

    with pytest.raises(UnknownEncoderError, match="unknown dreamsim model 'nope'; choose one of ensemble"):
        preflight.check_need(ModelNeed("encoder", "dreamsim:nope", "--encoder", encoder=True))
