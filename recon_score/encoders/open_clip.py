"""open_clip encoders: one loader for OpenAI/LAION CLIP, RemoteCLIP, SkyCLIP, CLIP LAION-RS and SigLIP.

Names:
    ARCH/PRETRAINED      a tag from open_clip.list_pretrained() (weights come from the HF cache or hub)
    ARCH@/path/ckpt.pt   a local checkpoint for a known architecture (RemoteCLIP and SkyCLIP ship these)
    hf-hub:ORG/REPO      open_clip's hub format
    local-dir:/path      open_clip's folder format (open_clip_config.json + open_clip_model.safetensors)
    smoke:open-clip      (the whole spec) a tiny random ViT in local-dir format, real CLIP BPE tokenizer
    shapes:open-clip/ARCH  (the whole spec) ARCH at its published size, random weights

Activation: OpenAI's CLIP was trained with QuickGELU. open_clip 3.x builds `ViT-B-32` with nn.GELU even for
`pretrained="openai"` and only warns ("QuickGELU mismatch"), which shifts every embedding. A tag whose pretrained
config says `quick_gelu` (every `openai` tag, some LAION/DFN ones) is built with `force_quick_gelu=True`, as the
CLIPScore authors' `clip.load` builds it; the activation that ran is part of the encoder's identity
(`EncoderInfo.extra["activation"]`, in run.json and the embedding cache keys).
"""

from __future__ import annotations

from pathlib import Path

import torch

from recon_score import synthetic
from recon_score.encoders.base import Encoder, EncoderInfo
from recon_score.errors import ModelNotAvailableError, UnknownEncoderError
from recon_score.hub import is_offline


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

    def _embed_images(self, images):
        x = torch.stack([self.preprocess(im.convert("RGB")) for im in images]).to(self.device)
        return self.model.encode_image(x)

    def _embed_texts(self, texts):
        tokens = self.tokenizer(texts).to(self.device)
        return self.model.encode_text(tokens)

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
        SEARLE's ``encode_with_pseudo_tokens`` do. Everything after the embedding lookup is open_clip's own
        `encode_text`, so pooling and projection always match the plain text path."""
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

    if synthetic.is_synthetic(name):
        return _build_synthetic(synthetic.parse(name), device)
    spec = f"open_clip:{name}"
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
    dim = getattr(model, "embed_dim", None) or (
        model.text_projection.shape[1] if getattr(model, "text_projection", None) is not None else None
    )
    info = EncoderInfo(
        spec=spec,
        kind="embedding",
        modalities=("image", "text"),
        source=_location(model_name, pretrained, how),
        dim=dim,
        extra={"activation": activation_of(model)},
    )
    return OpenCLIPEncoder(model, preprocess, tokenizer, info, device)


def _build_synthetic(name: synthetic.SyntheticName, device: str) -> Encoder:
    """`smoke:open-clip`: a tiny ViT in open_clip's local-dir layout (real CLIP BPE tokenizer);
    `shapes:open-clip/ARCH`: the architecture at full size with random weights (benchmarks)."""
    import open_clip

    if name.prefix == "smoke":
        path, revision = synthetic.resolve(name.name)
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}")
        tokenizer = open_clip.get_tokenizer(f"local-dir:{path}")
        source = f"{revision} {path} (random weights; numbers are meaningless)"
    else:
        from recon_score.synthetic.shapes import SHAPES_NOTE, build_open_clip

        if name.arch not in open_clip.list_models():
            reason = f"unknown open_clip architecture {name.arch!r}; see open_clip.list_models()"
            raise UnknownEncoderError(name.name, known=[], reason=reason)
        model, preprocess = build_open_clip(name.arch, device=device)
        tokenizer, source = open_clip.get_tokenizer(name.arch), SHAPES_NOTE
    info = EncoderInfo(
        spec=name.name,
        kind="embedding",
        modalities=("image", "text"),
        source=source,
        dim=model.text_projection.shape[1] if model.text_projection is not None else None,
        extra={"activation": activation_of(model)},
    )
    return OpenCLIPEncoder(model, preprocess, tokenizer, info, device)


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


def check(name: str, *, weights_dir: Path | None) -> dict:
    if synthetic.is_synthetic(name):
        return synthetic.check(name)
    try:
        model_name, pretrained, how = _split(name)
    except ValueError as err:
        return {"available": False, "location": "", "source": "", "detail": str(err)}
    if how == "path":
        p = Path(pretrained).expanduser()
        return {
            "available": p.is_file(),
            "location": str(p),
            "source": "local checkpoint",
            "detail": "" if p.is_file() else "file not found",
        }
    if how == "local-dir":
        p = Path(model_name.split(":", 1)[1]).expanduser()
        ok = (p / "open_clip_config.json").is_file()
        return {
            "available": ok,
            "location": str(p),
            "source": "local open_clip folder",
            "detail": "" if ok else "no open_clip_config.json",
        }
    from huggingface_hub import try_to_load_from_cache

    if how == "hf-hub":
        repo = model_name.split(":", 1)[1]
        hit = try_to_load_from_cache(repo, "open_clip_config.json")
        return {
            "available": isinstance(hit, str),
            "location": repo,
            "source": f"https://huggingface.co/{repo}",
            "detail": "in HF cache" if isinstance(hit, str) else "not in HF cache",
        }
    import open_clip

    cfg = open_clip.get_pretrained_cfg(model_name, pretrained) or {}
    if not cfg:
        return {"available": False, "location": "", "source": "", "detail": f"unknown tag {name!r}"}
    if cfg.get("hf_hub"):
        repo_id = "/".join(cfg["hf_hub"].strip("/").split("/")[:2])
        for filename in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
            hit = try_to_load_from_cache(repo_id, filename)
            if isinstance(hit, str):
                return {
                    "available": True,
                    "location": hit,
                    "source": f"https://huggingface.co/{repo_id}",
                    "detail": "in HF cache",
                }
        return {
            "available": False,
            "location": repo_id,
            "source": f"https://huggingface.co/{repo_id}",
            "detail": "not in HF cache",
        }
    return {
        "available": False,
        "location": cfg.get("url", ""),
        "source": cfg.get("url", ""),
        "detail": "URL download on first use",
    }
