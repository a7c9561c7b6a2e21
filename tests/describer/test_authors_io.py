"""What the VLM sees and what comes out of it, against the authors' `RemoteDescriber.py` (hhu-czy/ReconScore).

The authors build a message holding the image *path*, call `qwen_vl_utils.process_vision_info(messages)` (the real
package here), hand its images to the processor, sample with `generate`, and decode with
`batch_decode(..., skip_special_tokens=True, clean_up_tokenization_spaces=False)`; the text is used unchanged.
"""

import json
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from describer.backends import CaptionRequest, Sampling, build_captioner, clean_generation
from recon_score.errors import ReconScoreError
from recon_score.images import load_image

qwen_vl_utils = pytest.importorskip("qwen_vl_utils")

PROMPT = "Describe the image."


@pytest.mark.parametrize(
    "raw",
    [
        "**Overview**\n\nA farm.\n- three barns\n- a  pond  ",
        "  leading and trailing\t",
        "one line",
    ],
)
def test_generation_is_kept_as_generated(raw):
    """The authors print and score `output_text[0]` as decoded: nothing is joined or stripped."""
    assert clean_generation(raw).text == raw
    assert clean_generation(raw, collapse_whitespace=True).text == " ".join(raw.split())


def test_only_a_reasoning_block_is_removed():
    assert clean_generation("<think>plan\nit</think>\n\n**A** farm.\n").text == "**A** farm.\n"
    assert clean_generation("<think>never ends").error == "empty generation"
    assert clean_generation(" \n ").error == "empty generation"


class ProcessorSpy:
    """Delegates to the real processor and keeps the images it was called with."""

    def __init__(self, inner):
        self.inner, self.images = inner, []

    def __call__(self, *args, **kwargs):
        self.images.append(kwargs.get("images"))
        return self.inner(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def odd_png(tmp_path_factory):
    """An RGB PNG whose sides are not multiples of 28, so qwen-vl-utils' resize is visible (250x190 -> 252x196)."""
    path = tmp_path_factory.mktemp("img") / "tile.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (190, 250, 3), dtype=np.uint8)).save(path)
    return path


def _captioner(image_input, monkeypatch):
    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu", image_input=image_input)
    cap._load()
    spy = ProcessorSpy(cap._processor)
    monkeypatch.setattr(cap, "_processor", spy)
    return cap, spy


def test_pixels_reaching_the_processor_are_qwen_vl_utils_output(odd_png, monkeypatch):
    cap, spy = _captioner("qwen-vl-utils", monkeypatch)
    request = CaptionRequest(load_image(odd_png), seed=1)
    cap.generate([request], PROMPT, Sampling(n=1, max_new_tokens=2))
    (seen,) = spy.images
    # the authors' call: the path in the message, process_vision_info's defaults
    messages = [{"role": "user", "content": [{"type": "image", "image": str(odd_png)}, {"type": "text"}]}]
    authors, _ = qwen_vl_utils.process_vision_info(messages)
    assert len(seen) == 1 and seen[0].size == authors[0].size == (252, 196)
    assert np.array_equal(np.asarray(seen[0]), np.asarray(authors[0]))
    ident = cap.identity()["image_input"]
    assert ident["mode"] == "qwen-vl-utils" and ident["image_patch_size"] == 14
    assert ident["qwen_vl_utils"] == qwen_vl_utils_version()


def qwen_vl_utils_version():
    from importlib.metadata import version

    return version("qwen-vl-utils")


def test_direct_hands_the_image_as_read(odd_png, monkeypatch):
    cap, spy = _captioner("direct", monkeypatch)
    image = load_image(odd_png)
    cap.generate([CaptionRequest(image, seed=1)], PROMPT, Sampling(n=1, max_new_tokens=2))
    assert spy.images[0][0].size == (250, 190)
    assert np.array_equal(np.asarray(spy.images[0][0]), np.asarray(image))
    assert cap.identity()["image_input"] == {"mode": "direct"}


def _authors_caption(model, processor, path, sampling):
    """`Image_captioning` of RemoteDescriber.py, with this test's sampling values."""
    messages = [
        {"role": "user", "content": [{"type": "image", "image": str(path)}, {"type": "text", "text": PROMPT}]}
    ]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    image_inputs, video_inputs = qwen_vl_utils.process_vision_info(messages)
    inputs = processor(
        text=[text], images=image_inputs, videos=video_inputs, padding=True, return_tensors="pt"
    )
    ids = model.generate(
        **inputs,
        max_new_tokens=sampling.max_new_tokens,
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
    )
    trimmed = [out[len(inp) :] for inp, out in zip(inputs.input_ids, ids)]
    return processor.batch_decode(trimmed, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]


def test_candidates_equal_the_authors_captions(odd_png):
    """Same model, image, seed and sampling: each candidate is the authors' caption, byte for byte."""
    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu", image_input="qwen-vl-utils")
    sampling = Sampling(n=1, max_new_tokens=40, temperature=1.0, top_p=0.95, top_k=50)
    ours, theirs = [], []
    for seed in range(4):
        (cands,) = cap.generate([CaptionRequest(load_image(odd_png), seed=seed)], PROMPT, sampling)
        ours.append(cands[0].text)
        torch.manual_seed(seed)
        with torch.inference_mode():
            theirs.append(_authors_caption(cap._model, cap._processor, odd_png, sampling))
    assert ours == theirs
    # the tiny model writes whitespace runs, so a collapsed caption would differ
    assert any(t != " ".join(t.split()) for t in theirs)


def test_an_extreme_aspect_ratio_is_a_candidate_error():
    """qwen-vl-utils' smart_resize refuses a ratio over 200; the image's candidates say so, the run goes on."""
    cap = build_captioner("transformers", "smoke:qwen3-vl", device="cpu", image_input="qwen-vl-utils")
    strip = Image.new("RGB", (450, 2))
    (cands,) = cap.generate([CaptionRequest(strip, seed=0)], PROMPT, Sampling(n=2, max_new_tokens=2))
    assert [c.text for c in cands] == [None, None]
    assert all("aspect ratio must be smaller than 200" in c.error for c in cands)


def test_missing_qwen_vl_utils_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_vl_utils", None)  # `import qwen_vl_utils` raises ImportError
    with pytest.raises(ReconScoreError, match=r"pip install 'reconscore\[qwen\]'.*--vlm-image-input direct"):
        build_captioner("transformers", "smoke:qwen3-vl", image_input="qwen-vl-utils")
    build_captioner("transformers", "smoke:qwen3-vl", image_input="direct")  # needs nothing


def test_describe_records_both_settings(tmp_path, sample_dir):
    from eval.cli import main

    out = tmp_path / "run"
    args = ["describe", "--preset", "smoke", "--n", "2", "--limit", "1", "--max-new-tokens", "4"]
    assert (
        main(
            [
                *args,
                "--vlm-image-input",
                "direct",
                "--collapse-whitespace",
                "--out",
                str(out),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    meta = json.loads((out / "run.json").read_text())
    assert meta["preset"]["vlm_image_input"] == "direct" and meta["preset"]["collapse_whitespace"] is True
    assert meta["captioner"]["image_input"] == {"mode": "direct"}
    assert meta["captioner"]["collapse_whitespace"] is True


def test_a_served_vlm_gets_the_same_pixels(odd_png, monkeypatch):
    """openai backend: the PNG sent to the server holds qwen-vl-utils' output (the server then applies the
    processor, as the authors' processor call does)."""
    import base64
    import io

    from tests.describer.test_backends import FakeServer

    monkeypatch.setenv("TEST_KEY", "sk-test")
    messages = [{"role": "user", "content": [{"type": "image", "image": str(odd_png)}, {"type": "text"}]}]
    (authors,), _ = qwen_vl_utils.process_vision_info(messages)
    with FakeServer() as srv:
        cap = build_captioner(
            "openai", "m", base_url=srv.url, api_key_env="TEST_KEY", image_input="qwen-vl-utils"
        )
        (cands,) = cap.generate([CaptionRequest(load_image(odd_png), seed=5)], PROMPT, Sampling(n=1))
    assert cands[0].text == "caption 5 of a 252x196 tile"
    url = srv.requests[-1]["body"]["messages"][0]["content"][0]["image_url"]["url"]
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert np.array_equal(np.asarray(sent.convert("RGB")), np.asarray(authors))


def test_preset_flag_offers_exactly_the_image_inputs():
    """--vlm-image-input's choices (kept in describer.presets so --help loads no backend) are the modes."""
    from describer.backends.vision import IMAGE_INPUTS
    from describer.presets import DESCRIBER_OVERRIDES

    assert set(DESCRIBER_OVERRIDES["vlm_image_input"].choices) == set(IMAGE_INPUTS)
