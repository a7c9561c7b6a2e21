"""One check, before any model loads, that every model a command needs is here or can be fetched.

A command lists its `ModelNeed`s and calls `require_models` once: each model is looked up locally without any
network call, and when the hub cannot be used every missing model is named in one error, instead of one model at
a time after hub retries (or after a 20 GB download of the first). See docs/models.md, "Before anything loads".
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from recon_score.errors import ModelNotAvailableError, ReconScoreError
from recon_score.hub import is_offline

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ModelNeed:
    """A model a command will load: `spec` is an encoder spec (`family:name`) if `encoder`, else a hub id, local
    folder or `smoke:` fixture; `option` is the command-line option that names another one."""

    role: str  # e.g. "T2I model", "similarity encoder", "VLM", "CLIP encoder (clipscore)"
    spec: str
    option: str
    encoder: bool = False
    revision: str | None = None
    weights_dir: Path | None = None
    # how the caller names a weights folder (CLI flag or Python argument)
    weights_option: str = "--weights-dir"


@dataclass(frozen=True)
class ModelStatus:
    need: ModelNeed
    available: bool
    detail: str  # where it is, or what is missing
    host: str | None  # where a missing model would come from (None: nowhere, e.g. a missing local path)
    download: str | None  # the command that fetches it
    local: str | None = None  # how to use local files instead (default: point the need's option at them)


class ModelsMissingError(ModelNotAvailableError):
    """Every model a command needs that is neither here nor reachable, each with its download command."""

    def __init__(self, missing: list[ModelStatus], why: str, command: str | None = None):
        self.missing = missing
        self.model = ", ".join(s.need.spec for s in missing)
        self.searched, self.fix = [s.detail for s in missing], "see the download commands"
        who = f"`reconscore {command}`" if command else "This run"
        lines = [f"{who} needs {len(missing)} model(s) not available here ({why}); nothing was loaded:"]
        for s in missing:
            lines.append(f"- {s.need.role} {s.need.spec!r}: {s.detail}")
            if s.download:
                lines.append(f"    download: {s.download}")
            lines.append(f"    or {s.local or f'point {s.need.option} at local weights'}")
        lines.append(
            "`reconscore models check SPEC` checks one model; docs/models.md lists what each preset needs."
        )
        ReconScoreError.__init__(self, "\n".join(lines))


def recon_needs(preset, weights_dir: Path | str | None = None) -> list[ModelNeed]:
    """What a ReconScore preset (recon_score.presets.ReconPreset) loads: its T2I model and its encoder."""
    return [
        ModelNeed("T2I model", preset.t2i_model, "--t2i-model", revision=preset.t2i_revision),
        ModelNeed(
            "similarity encoder",
            preset.encoder,
            "--encoder",
            encoder=True,
            weights_dir=Path(weights_dir) if weights_dir else None,
        ),
    ]


def python_needs(needs: list[ModelNeed]) -> list[ModelNeed]:
    """The same needs for a Python caller (ReconScorer.from_preset): hints name its arguments, not CLI flags."""
    import dataclasses

    field = {"--t2i-model": "t2i_model", "--encoder": "encoder"}
    return [
        dataclasses.replace(
            n,
            option=f"overrides={{{field[n.option]!r}: ...}}" if n.option in field else n.option,
            weights_option="weights_dir=",
        )
        for n in needs
    ]


def needs_of(*objects) -> list[ModelNeed]:
    """The needs of every object that declares them (`model_needs()`: scorers, captioners, metrics, selectors)."""
    return [n for obj in objects if hasattr(obj, "model_needs") for n in obj.model_needs()]


def check_need(need: ModelNeed) -> ModelStatus:
    """Whether `need` is here, without any network call; if not, where from and how to fetch it."""
    if need.encoder:
        return _check_encoder(need)
    from recon_score.hub import HUB, locate

    info = locate(need.spec, revision=need.revision)
    if info.available:
        return ModelStatus(need, True, info.location, None, None)
    if info.source != HUB:  # a local path that does not exist
        return ModelStatus(need, False, f"{info.location} {info.detail}", None, None)
    return ModelStatus(
        need, False, "not in the HF cache", _hub_host(), _hf_download(need.spec, need.revision)
    )


def _check_encoder(need: ModelNeed) -> ModelStatus:
    from recon_score.encoders import check_encoder
    from recon_score.hub import HUB

    info = check_encoder(need.spec, weights_dir=need.weights_dir)
    if info.available:
        return ModelStatus(need, True, info.location, None, None)
    family, _, name = need.spec.partition(":")
    detail = ", ".join(x for x in (info.detail, info.location) if x) or "not found"
    if family == "dreamsim" and info.location:
        folder = info.location
        code = (
            "from dreamsim import dreamsim; "
            f"dreamsim(pretrained=True, dreamsim_type={json.dumps(name)}, cache_dir={json.dumps(folder)})"
        )
        return ModelStatus(
            need,
            False,
            f"{info.detail or 'missing'} in {folder}",
            "github.com",
            f"python -c {shlex.quote(code)}  (on a machine with network; then copy the folder here)",
            f"put the files in DIR/dreamsim and pass {need.weights_option}"
            f"{'DIR' if need.weights_option.endswith('=') else ' DIR'} (or set RECONSCORE_WEIGHTS=DIR)",
        )
    source = info.source
    if source.startswith("https://huggingface.co/"):
        repo = source.removeprefix("https://huggingface.co/")
        return ModelStatus(need, False, detail, _hub_host(), _hf_download(repo, None))
    if family == "hf" and source == HUB:
        return ModelStatus(need, False, "not in the HF cache", _hub_host(), _hf_download(name, None))
    if source.startswith("http"):
        return ModelStatus(need, False, detail, urllib.parse.urlsplit(source).netloc, None)
    return ModelStatus(need, False, detail, None, None)


def _hub_host() -> str:
    from huggingface_hub import constants

    return urllib.parse.urlsplit(constants.ENDPOINT).netloc


def _hf_download(repo: str, revision: str | None) -> str:
    rev = f" --revision {shlex.quote(revision)}" if revision else ""
    return f"hf download {shlex.quote(repo)}{rev}"


def reachable(host: str, *, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One HEAD request to https://HOST, no retries: any HTTP answer means the host is there."""
    try:
        urllib.request.urlopen(urllib.request.Request(f"https://{host}", method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def work_offline() -> None:
    """From now on this process does not ask the hub (cached files load without retries)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True


def require_models(needs: list[ModelNeed], *, command: str | None = None) -> list[ModelStatus]:
    """Check every need; raise ModelsMissingError naming all that cannot be had. Downloads nothing itself: a
    missing model whose host answers downloads on first use; when the hub does not answer, the process works
    offline from then on (no retries for cached files)."""
    seen, statuses = set(), []
    for need in needs:
        key = (need.spec, need.encoder, need.revision, need.weights_dir)
        if key not in seen:
            seen.add(key)
            statuses.append(check_need(need))
            s = statuses[-1]
            log.debug("%s %r: %s %s", need.role, need.spec, "here," if s.available else "missing:", s.detail)
    absent = [s for s in statuses if not s.available]
    remote = [s for s in absent if s.host is not None]
    reasons = ["not found"] if len(remote) < len(absent) else []
    if remote and is_offline():
        reasons.append("HF_HUB_OFFLINE=1 is set")
    elif remote:
        down = {h for h in {s.host for s in remote} if not reachable(h)}
        if _hub_host() in down:
            work_offline()
        if down:
            reasons.append(f"{', '.join(sorted(down))} did not answer")
        for s in remote:
            if s.host not in down:
                log.warning(
                    "%s %s is not here: it will be downloaded from %s", s.need.role, s.need.spec, s.host
                )
        remote = [s for s in remote if s.host in down]
    missing = [s for s in absent if s.host is None] + remote
    if missing:
        raise ModelsMissingError(missing, "; ".join(reasons), command)
    return statuses
