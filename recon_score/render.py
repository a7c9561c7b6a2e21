"""Text-to-image reconstruction over diffusers: Z-Image by default, FLUX.1/FLUX.2 and any DiffusionPipeline.

One CPU generator per item, seeded per image (the authors' code), so an item's latents do not depend on its
batch: pixels agree with one-by-one generation up to float summation order, and a batch is bit-reproducible.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from recon_score.errors import ReconScoreError
from recon_score.hub import ResolvedModel, resolve_model
from recon_score.presets import ReconPreset
from recon_score.runtime import loading_bars_off, parse_dtype

log = logging.getLogger(__name__)

OFFLOAD_MODES = ("none", "model", "sequential")


@dataclass(frozen=True)
class RenderRequest:
    prompt: str
    width: int
    height: int
    seed: int


def effective_dtype(preset_dtype: str, device: str) -> str:
    """bf16/fp16 are GPU dtypes; on CPU they are slow and poorly supported, so CPU runs use float32."""
    if not str(device).startswith("cuda"):
        return "float32"
    return str(parse_dtype(preset_dtype)).replace("torch.", "")


def load_pipeline(
    path,
    dtype: str,
    *,
    name: str | None = None,
    custom_pipeline: str | None = None,
    scheduler: str | None = None,
    trust_remote_code: bool = False,
):
    """`DiffusionPipeline.from_pretrained(path, dtype=...)`, then a check that the weights really are in `dtype`
    (diffusers before 0.40 silently leaves its models in float32). custom_pipeline / scheduler: as Text2Earth's
    README loads it; the custom pipeline file is remote code, refused unless `trust_remote_code`."""
    from diffusers import DiffusionPipeline

    name = name or str(path)
    problem, _ = pipeline_format(Path(path), custom_pipeline=custom_pipeline)
    if problem:
        raise ReconScoreError(f"cannot load the diffusers pipeline {name!r} from {path}: {problem}")
    kwargs: dict[str, Any] = {}
    if custom_pipeline:
        if not trust_remote_code:
            raise remote_code_refused(name, Path(path), custom_pipeline)
        kwargs.update(custom_pipeline=custom_pipeline, safety_checker=None, trust_remote_code=True)
    try:
        if scheduler:
            kwargs["scheduler"] = _scheduler_class(scheduler).from_pretrained(
                str(path), subfolder="scheduler"
            )
        pipe = DiffusionPipeline.from_pretrained(str(path), dtype=parse_dtype(dtype), **kwargs)
    except (OSError, ValueError) as err:
        raise ReconScoreError(f"could not load the diffusers pipeline {name!r} from {path}: {err}") from err
    check_component_dtypes(pipe, dtype, name=name)
    return pipe


def remote_code_refused(name: str, folder: Path, custom_pipeline: str) -> ReconScoreError:
    """The one refusal of a custom pipeline file without --trust-remote-code."""
    return ReconScoreError(
        f"{name!r} loads with custom_pipeline={custom_pipeline!r}, the class in {folder / (custom_pipeline + '.py')}: "
        "Python code from the model folder, which diffusers would execute. Read that file, "
        "then pass --trust-remote-code to run it"
    )


def _scheduler_class(name: str):
    import diffusers

    cls = getattr(diffusers, name, None)
    if cls is None or not hasattr(cls, "from_pretrained") or not name.endswith("Scheduler"):
        raise ReconScoreError(
            f"scheduler {name!r} is not a scheduler class of diffusers {diffusers.__version__}"
        )
    return cls


def custom_pipeline_digest(path: Path, custom_pipeline: str) -> str:
    """sha256 of the custom pipeline file: the code that makes the pixels, so part of the cache key."""
    import hashlib

    return hashlib.sha256((path / f"{custom_pipeline}.py").read_bytes()).hexdigest()


def pipeline_format(path: Path, *, custom_pipeline: str | None = None) -> tuple[str | None, str | None]:
    """(problem, note) about loading folder `path` with the installed diffusers, from its model_index.json:
    why diffusers cannot build it (e.g. a pipeline class in a Python file of the repo, which runs only for a
    preset that names it with --trust-remote-code), or a note that a loadable folder also ships such a file."""
    import json

    import diffusers

    index = path / "model_index.json"
    if not index.is_file():
        return f"no model_index.json in {path}: not a diffusers pipeline folder", None
    try:
        spec = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"{index} is not valid JSON ({err})", None
    scripts = sorted(p.name for p in path.glob("*.py"))
    custom = (
        f"; the folder ships {', '.join(scripts)} (a custom pipeline for `custom_pipeline=`: remote code, which "
        "reconscore runs only for a preset that names it, with --trust-remote-code)"
        if scripts
        else ""
    )
    cls = spec.get("_class_name", "")
    version = f"diffusers {diffusers.__version__}"
    if custom_pipeline and not (path / f"{custom_pipeline}.py").is_file():
        return f"no {custom_pipeline}.py in {path}: the custom pipeline the preset loads is missing", None
    if not custom_pipeline and not hasattr(diffusers, cls):
        return (
            f"model_index.json names the pipeline class {cls!r}, which {version} does not define{custom}",
            None,
        )
    for comp, entry in spec.items():
        if comp.startswith("_") or not isinstance(entry, list) or len(entry) != 2 or entry[0] is None:
            continue
        library, comp_cls = entry
        if library == "diffusers" and not hasattr(diffusers, comp_cls):
            return f"component {comp!r} is {comp_cls!r}, which {version} does not define{custom}", None
        if importlib.util.find_spec(library.split(".")[0]) is None:
            return (
                f"component {comp!r} comes from {library!r}, which is not an installed package (a module shipped "
                f"with the repository: remote code, which reconscore does not execute){custom}"
            ), None
    if custom_pipeline:
        return None, f"loads with custom_pipeline={custom_pipeline!r} (the class in {custom_pipeline}.py)"
    note = (
        f"loads as diffusers' {cls}{custom}; the run uses {cls} as diffusers defines it" if scripts else None
    )
    return None, note


def call_params(cls) -> set[str]:
    """The keyword arguments `cls.__call__` takes. A custom pipeline that forwards **kwargs to its base class
    (Text2Earth-style) takes the base's too, so settings such as guidance_scale still reach it."""
    params: set[str] = set()
    for klass in cls.__mro__:
        call = klass.__dict__.get("__call__")
        if call is None:
            continue
        sig = inspect.signature(call).parameters
        params |= {n for n, p in sig.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not any(p.kind == p.VAR_KEYWORD for p in sig.values()):
            break
    return params


def check_component_dtypes(pipe, dtype: str, *, name: str) -> None:
    """Every torch component holds most of its floating-point weights in `dtype` (a few modules may stay
    float32 by design, e.g. T5's `wo` layers in transformers)."""
    import diffusers

    want = parse_dtype(dtype)
    for comp_name, comp in getattr(pipe, "components", {}).items():
        if not isinstance(comp, torch.nn.Module):
            continue
        counts: dict[torch.dtype, int] = {}
        for param in comp.parameters():
            if param.is_floating_point():
                counts[param.dtype] = counts.get(param.dtype, 0) + param.numel()
        if counts and max(counts, key=counts.get) != want:
            got = max(counts, key=counts.get)
            raise ReconScoreError(
                f"the diffusers pipeline {name!r} loaded its {comp_name} in {str(got).replace('torch.', '')}, not "
                f"the requested {dtype} (diffusers {diffusers.__version__}; reconscore needs diffusers>=0.40, "
                "whose from_pretrained understands `dtype`)"
            )


class Renderer:
    """Loads the T2I pipeline on first use: a run whose reconstructions are all cached never loads it."""

    def __init__(
        self,
        preset: ReconPreset,
        *,
        device: str,
        offload: str = "none",
        show_progress: bool = False,
        attention_backend: str | None = None,
        compile_dit: bool = False,
        trust_remote_code: bool = False,
    ):
        """attention_backend (a diffusers AttentionBackendName) and compile_dit (torch.compile of the DiT) are off
        by default: no measurement shows yet that they pay off (docs/performance.md); set, they enter identity().
        trust_remote_code: allow a preset's `custom_pipeline` file to run."""
        if offload not in OFFLOAD_MODES:
            raise ValueError(f"offload must be one of {OFFLOAD_MODES}, got {offload!r}")
        self.preset, self.device, self.offload = preset, device, offload
        self.trust_remote_code = trust_remote_code
        self.attention_backend, self.compile_dit = attention_backend, compile_dit
        self.dtype = effective_dtype(preset.dtype, device)
        self.show_progress = show_progress
        self._resolved: ResolvedModel | None = None
        self._pipe = None
        self._tokenizer = None
        self._pipeline_class: str | None = None

    # -- identity (cache keys, run.json) ----------------------------------------------------------------------
    @property
    def resolved(self) -> ResolvedModel:
        if self._resolved is None:
            self._resolved = resolve_model(
                self.preset.t2i_model,
                revision=self.preset.t2i_revision,
                kind="diffusers pipeline",
                option="--t2i-model",
                downloader="diffusers",
            )
        return self._resolved

    @property
    def pipeline_class(self) -> str:
        if self._pipeline_class is None:
            import json

            index = self.resolved.path / "model_index.json"
            if not index.exists():
                raise ReconScoreError(
                    f"{self.resolved.path} has no model_index.json: not a diffusers pipeline folder"
                )
            self._pipeline_class = json.loads(index.read_text(encoding="utf-8")).get("_class_name", "unknown")
        return self._pipeline_class

    def identity(self) -> dict:
        """Everything besides prompt/size/seed that changes the pixels: part of every reconstruction cache key."""
        import diffusers

        return {
            "t2i_model": self.preset.t2i_model,
            "revision": self.resolved.revision,
            "pipeline": self.pipeline_class,
            "diffusers": diffusers.__version__,
            "steps": self.preset.steps,
            "guidance_scale": float(self.preset.guidance_scale),
            "max_sequence_length": self.preset.max_sequence_length,
            "dtype": self.dtype,
            "vae_tiling": self.preset.vae_tiling,
            "device_type": torch.device(self.device).type,
            **({"attention_backend": self.attention_backend} if self.attention_backend else {}),
            **({"compile_dit": True} if self.compile_dit else {}),
            **self._custom_identity(),
        }

    def _custom_identity(self) -> dict:
        """The custom pipeline (its file's digest: the code that makes the pixels) and scheduler, when set."""
        out: dict[str, Any] = {}
        if self.preset.scheduler:
            out["scheduler"] = self.preset.scheduler
        if self.preset.custom_pipeline:
            file = self.resolved.path / f"{self.preset.custom_pipeline}.py"
            out["custom_pipeline"] = {
                "name": self.preset.custom_pipeline,
                "sha256": custom_pipeline_digest(self.resolved.path, self.preset.custom_pipeline)
                if file.is_file()
                else None,
                "trust_remote_code": self.trust_remote_code,
            }
        return out

    def check_loadable(self) -> None:
        """Refuse now, before any work, what load_pipeline would refuse later (remote code not allowed)."""
        if self.preset.custom_pipeline and not self.trust_remote_code:
            raise remote_code_refused(
                f"{self.preset.t2i_model} (preset {self.preset.name})",
                self.resolved.path,
                self.preset.custom_pipeline,
            )

    # -- loading ----------------------------------------------------------------------------------------------
    @property
    def pipe(self):
        if self._pipe is None:
            if self.show_progress:
                self._pipe = self._load()
            else:  # per-component loading bars drown the run's own progress bar
                with loading_bars_off("diffusers", "transformers"):
                    self._pipe = self._load()
        return self._pipe

    def _load(self):
        path = self.resolved.path
        log.info(
            "loading %s (%s) from %s as %s", self.preset.t2i_model, self.pipeline_class, path, self.dtype
        )
        # a synthetic pipeline made straight on the device (recon_score.hub)
        if self.resolved.build is not None:
            target = self.device if self.offload == "none" else "cpu"
            pipe = self.resolved.build(device=target, dtype=parse_dtype(self.dtype))
        else:
            pipe = load_pipeline(
                path,
                self.dtype,
                name=self.preset.t2i_model,
                custom_pipeline=self.preset.custom_pipeline,
                scheduler=self.preset.scheduler,
                trust_remote_code=self.trust_remote_code,
            )
        if self.preset.vae_tiling and hasattr(pipe, "vae") and hasattr(pipe.vae, "enable_tiling"):
            pipe.vae.enable_tiling()
        if self.offload == "model":
            pipe.enable_model_cpu_offload(device=self.device)
        elif self.offload == "sequential":
            pipe.enable_sequential_cpu_offload(device=self.device)
        else:
            pipe.to(self.device)
        dit = getattr(pipe, "transformer", None)
        if self.attention_backend and dit is not None:
            dit.set_attention_backend(self.attention_backend)
        if self.compile_dit and dit is not None:
            dit.compile()
        pipe.set_progress_bar_config(disable=not self.show_progress)
        self._tokenizer = getattr(pipe, "tokenizer", None)
        return pipe

    def unload(self) -> None:
        """Free the pipeline (the describer alternates VLM and T2I phases on one GPU)."""
        self._pipe = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- token budget -----------------------------------------------------------------------------------------
    def _call_params(self) -> set[str]:
        from diffusers import DiffusionPipeline

        cls = self._pipe.__class__ if self._pipe is not None else None
        if cls is None:
            import diffusers

            cls = getattr(diffusers, self.pipeline_class, DiffusionPipeline)
        return call_params(cls)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            sub = "tokenizer_2" if (self.resolved.path / "tokenizer_2").is_dir() else "tokenizer"
            folder = self.resolved.path / sub
            self._tokenizer = AutoTokenizer.from_pretrained(str(folder)) if folder.is_dir() else False
        return self._tokenizer or None

    @property
    def token_limit(self) -> int | None:
        if "max_sequence_length" in self._call_params() and self.preset.max_sequence_length:
            return int(self.preset.max_sequence_length)
        tok = self.tokenizer
        limit = getattr(tok, "model_max_length", None) if tok is not None else None
        return int(limit) if limit and limit < 100_000 else None

    def count_tokens(self, prompt: str) -> int | None:
        """Tokens the text encoder sees for `prompt` (Z-Image wraps it in its chat template first)."""
        tok = self.tokenizer
        if tok is None:
            return None
        text = prompt
        if self.pipeline_class.startswith("ZImage") and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}],
                tokenize=False,
                add_generation_prompt=True,
                enable_thinking=True,
            )
        return len(tok(text, add_special_tokens=True)["input_ids"])

    # -- generation -------------------------------------------------------------------------------------------
    def render(self, requests: list[RenderRequest]) -> list[Image.Image]:
        """One pipeline call for requests of one size; returns 8-bit RGB images in request order."""
        if not requests:
            return []
        sizes = {(r.width, r.height) for r in requests}
        if len(sizes) != 1:
            raise ValueError(f"one render call takes one size, got {sorted(sizes)}")
        ((width, height),) = sizes
        pipe = self.pipe
        params = self._call_params()
        kwargs: dict[str, Any] = {
            # a copy: ZImagePipeline rewrites the prompt list in place with its chat template
            "prompt": [r.prompt for r in requests],
            "height": height,
            "width": width,
            "num_inference_steps": self.preset.steps,
            "generator": [torch.Generator("cpu").manual_seed(int(r.seed)) for r in requests],
            "output_type": "pil",
        }
        if "guidance_scale" in params:
            kwargs["guidance_scale"] = float(self.preset.guidance_scale)
        if "max_sequence_length" in params and self.preset.max_sequence_length:
            kwargs["max_sequence_length"] = int(self.preset.max_sequence_length)
        with torch.inference_mode():
            out = pipe(**kwargs)
        images = out.images if hasattr(out, "images") else out[0]
        return [im.convert("RGB") for im in images]
