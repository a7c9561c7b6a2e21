"""open_clip encoders: one loader for OpenAI/LAION CLIP, RemoteCLIP, SkyCLIP, CLIP LAION-RS and SigLIP; the
spellings (ARCH/TAG, ARCH@/path, hf-hub:, local-dir:) are in docs/models.md.

Activation: OpenAI's CLIP was trained with QuickGELU, but open_clip 3.x builds `ViT-B-32` with nn.GELU even for
`pretrained="openai"` and only warns. A tag whose pretrained config says `quick_gelu` is built with
`force_quick_gelu=True`, as the CLIPScore authors' `clip.load` builds it; the activation that ran is part of the
encoder's identity (`EncoderInfo.extra["activation"]`, in run.json and the embedding cache keys).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from recon_score.checkpoints import load_strict, read_checkpoint
from recon_score.encoders.base import (
    Box,
    Encoder,
    EncoderInfo,
    PatchGrid,
    centre_crop_box,
    shorter_side,
    token_grid,
)
from recon_score.errors import ModelNotAvailableError, UnknownEncoderError
from recon_score.hub import ResolvedModel, is_offline
from recon_score.paths import WeightsLocation


def _split(name: str) -> tuple[str, str | None, str]:
    """-> (model_name for open_clip, pretrained or None, how) ; how in {tag, path, hf-hub, local-dir}."""
    if name.startswith(("hf-hub:", "local-dir:")):
        return name, None, name.split(":", 1)[0]
    if "@" in name:
        arch, path = name.split("@", 1)
        return arch, path, "path"
    if "/" in name:
        arch, tag = name.split("/", 1)
        return arch, tag, "tag"
    raise ValueError(
        f"open_clip spec {name!r} needs a pretrained tag or a checkpoint: ARCH/TAG (e.g. ViT-B-32/openai), "
        "ARCH@/path/to/ckpt, hf-hub:ORG/REPO or local-dir:/path"
    )


class OpenCLIPEncoder(Encoder):
    def __init__(self, model, preprocess, tokenizer, info: EncoderInfo, device: str):
        self.model = model.to(device).eval().requires_grad_(False)
        self.preprocess, self.tokenizer = preprocess, tokenizer
        self.info, self.device = info, torch.device(device)
        self.batch_size = 64
        self.context_length = getattr(tokenizer, "context_length", 77)

    def _pixels(self, images) -> torch.Tensor:
        return torch.stack([self.preprocess(im.convert("RGB")) for im in images]).to(self.device)

    def _embed_images(self, images):
        return self.model.encode_image(self._pixels(images))

    def _embed_texts(self, texts):
        tokens = self.tokenizer(texts).to(self.device)
        return self.model.encode_text(tokens)

    @property
    def has_patch_tokens(self) -> bool:
        visual = getattr(self.model, "visual", None)
        return hasattr(visual, "output_tokens") and hasattr(visual, "grid_size")

    def _embed_with_patches(self, images):
        """`encode_image` and the visual tower's patch tokens (open_clip's `output_tokens`) from one forward: a
        forward hook keeps the tokens and hands `encode_image` the pooled output it always gets."""
        visual = self.model.visual
        x = self._pixels(images)
        kept: list[torch.Tensor] = []

        def split(_module, _inputs, out):
            kept.append(out[1])
            return out[0]

        before, visual.output_tokens = visual.output_tokens, True
        hook = visual.register_forward_hook(split)
        try:
            emb = self.model.encode_image(x)
        finally:
            hook.remove()
            visual.output_tokens = before
        rows, cols = visual.grid_size
        boxes = [preprocess_box(self.preprocess, im.width, im.height) for im in images]
        return emb, [PatchGrid(token_grid(kept[0], rows, cols), boxes)]

    @property
    def pseudo_token_width(self) -> int | None:
        """Width of the text tower's word embeddings when pseudo-tokens can be injected (CLIP-style towers)."""
        emb = getattr(self.model, "token_embedding", None)
        return emb.embedding_dim if isinstance(emb, torch.nn.Embedding) else None

    def placeholder_id(self, placeholder: str) -> int:
        """Token id of `placeholder` ('*' for Pic2Word, '$' for SEARLE); it must be a single BPE token."""
        ids = self.tokenizer.encode(placeholder) if hasattr(self.tokenizer, "encode") else []
        if len(ids) != 1:
            raise ValueError(
                f"placeholder {placeholder!r} is {len(ids)} tokens for the {self.info.spec} tokenizer; "
                "textual inversion needs a single token"
            )
        return ids[0]

    @torch.inference_mode()
    def encode_texts_with_pseudo_tokens(
        self, texts: list[str], pseudo: torch.Tensor, *, placeholder: str, batch_size: int | None = None
    ) -> torch.Tensor:
        """(n, d) L2-normalised: each text encoded with the word embedding of its first `placeholder` token
        replaced by the matching row of `pseudo` (n, width), as Pic2Word's ``encode_text_img_retrieval`` and
        SEARLE's ``encode_with_pseudo_tokens`` do; the rest is open_clip's own `encode_text`."""
        width = self.pseudo_token_width
        if width is None:
            raise TypeError(
                f"encoder {self.info.spec!r} has no token-embedding table to inject pseudo-tokens into"
            )
        if pseudo.shape != (len(texts), width):
            raise ValueError(
                f"expected pseudo-tokens of shape ({len(texts)}, {width}), got {tuple(pseudo.shape)}"
            )
        bs = batch_size or self.batch_size
        out = [
            self.pseudo_token_features(texts[s : s + bs], pseudo[s : s + bs], placeholder=placeholder)
            .float()
            .cpu()
            for s in range(0, len(texts), bs)
        ]
        return torch.nn.functional.normalize(torch.cat(out), dim=-1)

    def pseudo_token_features(
        self, texts: list[str], pseudo: torch.Tensor, *, placeholder: str
    ) -> torch.Tensor:
        """(n, d) unnormalised text features of one batch, the first `placeholder` token's word embedding
        replaced by `pseudo` (n, width); differentiable with respect to `pseudo` (SEARLE's OTI optimises it)."""
        ph = self.placeholder_id(placeholder)
        table = self.model.token_embedding
        tokens = self.tokenizer(texts).to(self.device)
        hit = tokens == ph
        lost = (~hit.any(dim=1)).nonzero().flatten().tolist()
        if lost:
            raise ValueError(
                f"text {texts[lost[0]]!r} has no {placeholder!r} token after tokenization "
                f"(truncated at {self.context_length} tokens?)"
            )
        rows = torch.arange(tokens.shape[0], device=self.device)
        cols = hit.int().argmax(dim=1)  # first occurrence
        chunk = pseudo.to(self.device, table.weight.dtype)

        def inject(_module, _args, output):
            output = output.clone()
            output[rows, cols] = chunk
            return output

        handle = table.register_forward_hook(inject)
        try:
            return self.model.encode_text(tokens)
        finally:
            handle.remove()

    def count_tokens(self, text: str) -> int:
        """Tokens including start/end markers; > context_length means the tokenizer truncates."""
        inner = getattr(self.tokenizer, "encode", None)
        if inner is None:
            return 0
        return len(inner(text)) + 2


def preprocess_box(preprocess, width: int, height: int) -> Box:
    """The part of a width x height image that a torchvision Resize + CenterCrop pipeline keeps."""
    from torchvision import transforms

    resized, crop = (float(width), float(height)), None
    for t in getattr(preprocess, "transforms", []):
        if isinstance(t, transforms.Resize):
            size = [t.size] if isinstance(t.size, int) else list(t.size)
            resized = shorter_side(width, height, size[0]) if len(size) == 1 else (size[1], size[0])
        elif isinstance(t, transforms.CenterCrop):
            crop = (t.size[1], t.size[0])
    return centre_crop_box(resized, crop)


def needs_quick_gelu(model_name: str, pretrained: str | None) -> bool:
    """What open_clip's own pretrained config says for ARCH/TAG (False for checkpoints and folders)."""
    import open_clip

    if not pretrained:
        return False
    return bool((open_clip.get_pretrained_cfg(model_name, pretrained) or {}).get("quick_gelu", False))


def activation_of(model: torch.nn.Module) -> str:
    """The MLP activation the built model really uses: "quick_gelu", "gelu", or the class name."""
    from open_clip.transformer import QuickGELU

    kinds = set()
    for module in model.modules():
        if isinstance(module, QuickGELU):
            kinds.add("quick_gelu")
        elif isinstance(module, torch.nn.GELU):
            kinds.add("gelu")
    return "+".join(sorted(kinds)) or "none"


def _fix(spec: str) -> str:
    return (
        f"Download the weights on a machine with network (open_clip caches them in the HF cache) and copy the "
        f"HF cache here (HF_HOME), or use 'open_clip:ARCH@/path/to/checkpoint' / 'open_clip:local-dir:/path' "
        f"for local files. Requested: {spec!r}."
    )


def build(name: str, *, device: str, weights_dir: Path | None) -> Encoder:
    import open_clip

    spec = f"open_clip:{name}"
    release, _, where = name.partition("@")
    if release in RELEASES:
        _refuse_suffix(release, where)
        return build_release(release, where or None, device=device, weights_dir=weights_dir)
    model_name, pretrained, how = _split(name)
    if how == "path":
        ckpt = Path(pretrained).expanduser()
        if not ckpt.is_file():
            raise ModelNotAvailableError(
                spec, searched=[str(ckpt)], fix=_fix(spec), reason="checkpoint file not found"
            )
        pretrained = str(ckpt)
    elif how == "local-dir":
        folder = Path(model_name.split(":", 1)[1]).expanduser()
        if not (folder / "open_clip_config.json").is_file():
            raise ModelNotAvailableError(
                spec, searched=[str(folder)], fix=_fix(spec), reason="no open_clip_config.json in that folder"
            )
    elif how == "tag":
        known = open_clip.list_pretrained_tags_by_model(model_name)
        if model_name not in open_clip.list_models():
            raise ValueError(f"unknown open_clip architecture {model_name!r}; see open_clip.list_models()")
        if pretrained not in known:
            raise ValueError(
                f"open_clip has no pretrained tag {pretrained!r} for {model_name}; known: {', '.join(known)}"
            )
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            model_name,
            pretrained=pretrained,
            load_weights=True,
            device=device,
            force_quick_gelu=how == "tag" and needs_quick_gelu(model_name, pretrained),
        )
        tokenizer = open_clip.get_tokenizer(model_name)
    except (OSError, RuntimeError, ValueError) as err:
        reason = f"{type(err).__name__}: {err}"[:400]
        if is_offline():
            reason += " (HF_HUB_OFFLINE=1 is set, so nothing was downloaded)"
        raise ModelNotAvailableError(
            spec, searched=[_location(model_name, pretrained, how)], fix=_fix(spec), reason=reason
        ) from err
    info = _info(spec, _location(model_name, pretrained, how), model)
    return OpenCLIPEncoder(model, preprocess, tokenizer, info, device)


def _info(spec: str, source: str, model, **extra) -> EncoderInfo:
    """An open_clip model's record: image and text embeddings, the activation it was built with (and `extra`)."""
    dim = getattr(model, "embed_dim", None) or (
        model.text_projection.shape[1] if getattr(model, "text_projection", None) is not None else None
    )
    extra = {"activation": activation_of(model), **extra}
    return EncoderInfo(
        spec=spec, kind="embedding", modalities=("image", "text"), source=source, dim=dim, extra=extra
    )


def load(model: ResolvedModel, *, device: str) -> Encoder:
    """A synthetic encoder as recon_score.hub resolved it: a folder in open_clip's local-dir layout, or a model
    `build` makes on the device, standing for a release (its preprocessing and tokenizer) or an architecture."""
    import open_clip

    if model.stands_for in RELEASES:
        return build_release(model.stands_for, None, device=device, weights_dir=None, given=model)
    if model.build is None:
        folder = f"local-dir:{model.path}"
        net, _, preprocess = open_clip.create_model_and_transforms(folder)
        tokenizer = open_clip.get_tokenizer(folder)
    else:
        from open_clip.transform import PreprocessCfg, image_transform_v2

        net = model.build(device=device)
        preprocess = image_transform_v2(PreprocessCfg(**net.visual.preprocess_cfg), is_train=False)
        tokenizer = open_clip.get_tokenizer(model.stands_for)
    return OpenCLIPEncoder(net, preprocess, tokenizer, _info(model.name, model.source, net), device)


def _location(model_name: str, pretrained: str | None, how: str) -> str:
    if how in ("path", "local-dir"):
        return pretrained or model_name.split(":", 1)[1]
    if how == "hf-hub":
        return f"https://huggingface.co/{model_name.split(':', 1)[1]}"
    import open_clip

    cfg = open_clip.get_pretrained_cfg(model_name, pretrained) or {}
    if cfg.get("hf_hub"):
        return f"https://huggingface.co/{cfg['hf_hub'].rstrip('/')}"
    return cfg.get("url", "unknown")


def _refuse_suffix(release: str, where: str) -> None:
    """A random-weight release is a synthetic model: one spelling, `smoke:open-clip/NAME`."""
    if where in ("smoke", "shapes"):
        reason = f"spell it '{where}:open-clip/{release}'"
        raise UnknownEncoderError(f"open_clip:{release}@{where}", known=[], reason=reason)


def check(name: str, *, weights_dir: Path | None) -> WeightsLocation:
    release, _, where = name.partition("@")
    if release in RELEASES:
        _refuse_suffix(release, where)
        return check_release(release, where or None, weights_dir=weights_dir)
    try:
        model_name, pretrained, how = _split(name)
    except ValueError as err:
        return WeightsLocation(False, detail=str(err))
    if how == "path":
        p = Path(pretrained).expanduser()
        return WeightsLocation(
            p.is_file(), str(p), "local checkpoint", "" if p.is_file() else "file not found"
        )
    if how == "local-dir":
        p = Path(model_name.split(":", 1)[1]).expanduser()
        ok = (p / "open_clip_config.json").is_file()
        return WeightsLocation(ok, str(p), "local open_clip folder", "" if ok else "no open_clip_config.json")
    from huggingface_hub import try_to_load_from_cache

    if how == "hf-hub":
        repo = model_name.split(":", 1)[1]
        hit = isinstance(try_to_load_from_cache(repo, "open_clip_config.json"), str)
        return WeightsLocation(hit, repo, f"https://huggingface.co/{repo}", _CACHED[hit])
    import open_clip

    cfg = open_clip.get_pretrained_cfg(model_name, pretrained) or {}
    if not cfg:
        return WeightsLocation(False, detail=f"unknown tag {name!r}")
    if cfg.get("hf_hub"):
        repo_id = "/".join(cfg["hf_hub"].strip("/").split("/")[:2])
        for filename in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
            hit = try_to_load_from_cache(repo_id, filename)
            if isinstance(hit, str):
                return WeightsLocation(True, hit, f"https://huggingface.co/{repo_id}", _CACHED[True])
        return WeightsLocation(False, repo_id, f"https://huggingface.co/{repo_id}", _CACHED[False])
    return WeightsLocation(False, cfg.get("url", ""), cfg.get("url", ""), "URL download on first use")


_CACHED = {True: "in HF cache", False: "not in HF cache"}


# -- released fine-tunes of CLIP that need their own key handling (PAC-S, Long-CLIP) ------------------------------
@dataclass(frozen=True)
class Release:
    """A CLIP fine-tune published as a plain state dict for an open_clip architecture."""

    arch: str  # open_clip architecture the weights fit (QuickGELU for OpenAI-based ones)
    context_length: int  # text positions
    filename: str  # the authors' file name
    hub: str | None  # HF repo holding `filename`, or None where the authors publish elsewhere only
    url: str  # where the authors publish it
    # "pacscore": {"state_dict": ...}; "longclip": positional_embedding + positional_embedding_res
    layout: str
    paper: str
    # open_clip (ARCH, TAG) whose pretrained config gives the image mean/std the authors normalise with; None:
    # OpenAI's (the `clip._transform` every OpenAI-based release uses)
    normalisation: tuple[str, str] | None = None
    # LoRA pairs (key infixes) the authors' evaluation leaves out: PAC-S++'s `build_model` ends with
    # `model.eval()`, which marks the MLP LoRA layers merged while their lora_B is still 0, and the later
    # `load_state_dict` never merges the loaded factors, so those pairs never act
    lora_unused: tuple[str, ...] = ()
    # round the weights the authors' `convert_weights` turns to fp16 (Long-CLIP's build_model does, then
    # `model.float()` on CPU) before loading them; recorded as the encoder's `checkpoint_dtype`
    round_fp16: bool = False


_PACS_URL = "https://github.com/aimagelab/pacscore#loading-clip-models (Google Drive)"
_PACSPP_URL = "https://ailb-web.ing.unimore.it/publicfiles/pac++/"
_MLP_LORA = (".mlp.c_fc.", ".mlp.c_proj.")


def _pacs_pp(arch: str, filename: str) -> Release:
    return Release(
        arch, 77, filename, None, _PACSPP_URL + filename, "pacs++", "PAC-S++", lora_unused=_MLP_LORA
    )


def _longclip(arch: str, size: str) -> Release:
    repo = f"BeichenZhang/LongCLIP-{size}"
    url = f"https://huggingface.co/{repo}"
    return Release(arch, 248, f"longclip-{size}.pt", repo, url, "longclip", "Long-CLIP", round_fp16=True)


RELEASES: dict[str, Release] = {
    "pacs-ViT-B-32": Release(
        "ViT-B-32-quickgelu", 77, "clip_ViT-B-32.pth", None, _PACS_URL, "pacscore", "PAC-S"
    ),
    "pacs-ViT-L-14": Release(
        "ViT-L-14",
        77,
        "openClip_ViT-L-14.pth",
        None,
        _PACS_URL,
        "pacscore",
        "PAC-S",
        normalisation=("ViT-L-14", "laion2b_s32b_b82k"),  # compute_metrics.py's create_model_and_transforms
    ),
    "pacs++-ViT-B-32": _pacs_pp("ViT-B-32-quickgelu", "PAC++_clip_ViT-B-32.pth"),
    "pacs++-ViT-L-14": _pacs_pp("ViT-L-14-quickgelu", "PAC++_clip_ViT-L-14.pth"),
    "longclip-B": _longclip("ViT-B-16-quickgelu", "B"),
    "longclip-L": _longclip("ViT-L-14-quickgelu", "L"),
}
# Named variants: every LoRA pair folded (what the PAC-S++ layers would add had they not been marked merged);
# Long-CLIP with the file's fp32 values as stored.
RELEASES |= {
    f"{name}-lora-all": replace(RELEASES[name], lora_unused=())
    for name in ("pacs++-ViT-B-32", "pacs++-ViT-L-14")
}
RELEASES |= {
    f"{name}-fp32": replace(RELEASES[name], round_fp16=False) for name in ("longclip-B", "longclip-L")
}
LONGCLIP_KEEP = 20  # Long-CLIP keeps CLIP's first 20 positions and uses its stretched copy from 20 on
_OPENAI_EXTRAS = ("input_resolution", "context_length", "vocab_size")  # dropped by the authors' build_model


def release_state_dict(release: Release, checkpoint: dict) -> dict:
    """The authors' checkpoint as an open_clip state dict. PAC-S's `["state_dict"]` holds keys open_clip's CLIP
    shares. Long-CLIP's text tower adds `positional_embedding * mask1 + positional_embedding_res * mask2` (mask1 =
    first 20 positions): one 248-row table of the first 20 rows of the one and the rest of the other."""
    import torch

    state = checkpoint.get("state_dict", checkpoint) if release.layout != "longclip" else checkpoint
    state = {k: v for k, v in state.items() if k not in _OPENAI_EXTRAS}
    if release.layout == "pacs++":
        state = merge_lora(state, unused=release.lora_unused)
    if release.layout == "longclip" and "positional_embedding_res" in state:
        pos, res = state["positional_embedding"], state.pop("positional_embedding_res")
        state["positional_embedding"] = torch.cat([pos[:LONGCLIP_KEEP], res[LONGCLIP_KEEP:]])
    return state


LORA_ALPHA = 1  # the authors' custom_loralib default; clip_lora.load(lora=4) passes only r


def merge_lora(state: dict, *, unused: tuple[str, ...] = ()) -> dict:
    """Fold each LoRA pair into its weight: W + (B @ A).view(W.shape) * alpha / r, which is what the authors'
    `custom_loralib` layers add in their forward (Linear, Conv2d, and MultiheadAttention's in_proj / out_proj).
    `X.lora_A` belongs to `X.weight`; `X.in_proj_weight_lora_A` to `X.in_proj_weight`. Pairs whose key
    contains one of `unused` are dropped without folding (the authors' evaluation never applies them)."""
    out = dict(state)
    for key in [k for k in state if k.endswith("lora_A")]:
        stem = key[: -len("lora_A")]
        target = stem[:-1] if stem.endswith("_") else stem + "weight"
        b_key = stem + "lora_B"
        if target not in state or b_key not in state:
            raise ModelNotAvailableError(
                key,
                searched=[],
                reason=f"LoRA factor without {target} or {b_key}",
                fix="Use the authors' file.",
            )
        weight, a, b = state[target], out.pop(key).float(), out.pop(b_key).float()
        if any(part in key for part in unused):
            continue
        rank = a.shape[0] // weight.shape[-1] if weight.ndim == 4 else a.shape[0]  # conv: r * kernel rows
        out[target] = weight.float() + (b @ a).view(weight.shape) * (LORA_ALPHA / rank)
    return out


def release_model(release: Release, *, device: str, mode: str):
    """The architecture of `release` (text context included); `mode`: "empty" (meta), "shapes" (full size,
    random), "smoke" (tiny, random)."""
    import open_clip

    from recon_score.synthetic.shapes import empty_weights, materialize, restore_causal_mask

    if mode == "smoke":
        from recon_score.runtime import seeded
        from recon_score.synthetic.tiny_models import OPEN_CLIP_TINY_CFG as tiny

        cfg = {**tiny, "text_cfg": {**tiny["text_cfg"], "context_length": release.context_length}}
        cfg["quick_gelu"] = bool(open_clip.get_model_config(release.arch).get("quick_gelu", False))
        with seeded(0):
            return open_clip.CLIP(**cfg).to(device)
    cfg = open_clip.get_model_config(release.arch)
    cfg = {**cfg, "text_cfg": {**cfg["text_cfg"], "context_length": release.context_length}}
    with empty_weights():
        model = open_clip.CLIP(**cfg)
    if mode == "empty":
        return model
    materialize(model, device=device, dtype=torch.float32)
    restore_causal_mask(model, device)
    return model


def find_release_file(
    name: str, release: Release, weights_dir: Path | None, *, download: bool = True
) -> Path:
    """RECONSCORE_WEIGHTS (or `weights_dir`) / filename, then the HF cache, then the hub (unless offline or
    `download` is False); else one error naming the file and where the authors publish it."""
    from recon_score.paths import weights_root

    folders = [p for p in (weights_dir, weights_root()) if p is not None]
    for folder in folders:
        if (folder / release.filename).is_file():
            return folder / release.filename
    searched = [str(f / release.filename) for f in folders]
    reason = "file not found"
    if release.hub:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        searched.append(f"HF cache and https://huggingface.co/{release.hub} ({release.filename})")
        hit = try_to_load_from_cache(release.hub, release.filename)
        if isinstance(hit, str):
            return Path(hit)
        if is_offline() or not download:
            reason = "not in the HF cache" + (" (HF_HUB_OFFLINE=1 is set)" if is_offline() else "")
        else:
            try:
                return Path(hf_hub_download(release.hub, release.filename))
            except Exception as err:
                reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    raise ModelNotAvailableError(
        f"open_clip:{name}",
        searched=searched,
        reason=reason,
        fix=f"Download {release.filename} ({release.paper}, {release.url}) into {folders[-1]} or name it with "
        f"'open_clip:{name}@/path/to/{release.filename}'.",
    )


def build_release(
    name: str,
    where: str | None,
    *,
    device: str,
    weights_dir: Path | None,
    given: ResolvedModel | None = None,
) -> Encoder:
    """`NAME` (weights found by name), `NAME@/path/file` (read with weights_only=True, loaded strictly), or
    `given`: the release's architecture with random weights (recon_score.hub's `smoke:open-clip/NAME`)."""
    import open_clip

    from recon_score.synthetic.shapes import restore_causal_mask

    release = RELEASES[name]
    if given is not None:
        model, source = given.build(device=device), given.source
    else:
        path = Path(where).expanduser() if where else find_release_file(name, release, weights_dir)
        if not path.is_file():
            raise ModelNotAvailableError(
                f"open_clip:{name}",
                searched=[str(path)],
                reason="checkpoint file not found",
                fix=f"Download {release.filename} ({release.paper}, {release.url}).",
            )
        state = release_state_dict(release, read_checkpoint(path, f"open_clip:{name}"))
        model = release_model(release, device=device, mode="empty")
        model = load_strict(model, state, f"{path} ({release.paper} {name})").to(device)
        if release.round_fp16:
            round_to_fp16(model)
        restore_causal_mask(model, device)
        source = str(path)
    preprocess = release_transform(release, model.visual.image_size)
    tokenizer = open_clip.SimpleTokenizer(context_length=release.context_length)
    spec = given.name if given else f"open_clip:{name}" + (f"@{where}" if where else "")
    stored = "float16 (rounded, as the authors' build_model)" if release.round_fp16 else "as stored"
    info = _info(spec, source, model, context_length=release.context_length, checkpoint_dtype=stored)
    return OpenCLIPEncoder(model, preprocess, tokenizer, info, device)


def release_transform(release: Release, size):
    """The authors' eval transform: bicubic shortest-side resize, centre crop, and the mean/std of the open_clip
    pretrained config the authors built their model from (OpenAI's where they used `clip.load`)."""
    import open_clip
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    mean, std = OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    if release.normalisation:
        cfg = open_clip.get_pretrained_cfg(*release.normalisation) or {}
        mean, std = cfg.get("mean") or mean, cfg.get("std") or std
    return open_clip.image_transform(
        size, is_train=False, mean=mean, std=std, interpolation="bicubic", resize_mode="shortest"
    )


@torch.no_grad()
def round_to_fp16(model: torch.nn.Module, *, everything: bool = False) -> None:
    """Round, in place (dtype kept), what OpenAI CLIP's `convert_weights` casts to fp16: Linear/Conv weights and
    biases, MultiheadAttention projections and biases, and `text_projection` / `proj`; with `everything`, every
    floating parameter (what `from_pretrained(torch_dtype=float16)` casts)."""
    if everything:
        for param in model.parameters():
            param.copy_(param.half())
        return
    names = (
        "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k", "bias_v",
    )  # fmt: skip
    for module in model.modules():
        tensors = []
        if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)):
            tensors += [module.weight, module.bias]
        if isinstance(module, torch.nn.MultiheadAttention):
            tensors += [getattr(module, n) for n in names]
        tensors += [getattr(module, n, None) for n in ("text_projection", "proj")]
        for t in tensors:
            if isinstance(t, torch.Tensor):
                t.copy_(t.half().float())


def check_release(name: str, where: str | None, *, weights_dir: Path | None) -> WeightsLocation:
    release = RELEASES[name]
    if where:
        p = Path(where).expanduser()
        return WeightsLocation(p.is_file(), str(p), release.url, "" if p.is_file() else "file not found")
    try:
        path = find_release_file(name, release, weights_dir, download=False)
    except ModelNotAvailableError as err:
        return WeightsLocation(False, release.filename, release.url, str(err))
    return WeightsLocation(True, str(path), release.url)
