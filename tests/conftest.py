"""Offline test environment: no hub, a private cache per session, tiny models built on first use."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE = REPO / "recon_score" / "sample"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Every session builds fixtures and caches into its own folder: tests never see a user's cache.
    RECONSCORE_TEST_CACHE names another fresh folder (tests/hostile.sh keeps the tiny models off its 3 MB
    tmpfs, where the hostile inputs and run folders go)."""
    chosen = os.environ.get("RECONSCORE_TEST_CACHE")
    root = Path(chosen) if chosen else tmp_path_factory.mktemp("reconscore-cache")
    old = {k: os.environ.get(k) for k in ("RECONSCORE_CACHE", "RECONSCORE_WEIGHTS")}
    os.environ["RECONSCORE_CACHE"] = str(root)
    os.environ["RECONSCORE_WEIGHTS"] = str(root / "weights")
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def rs_mini() -> Path:
    """Real remote-sensing images (../shared/data/rs_mini); falls back to the bundled sample."""
    p = SHARED_DATA / "rs_mini" / "images"
    return p if p.is_dir() else SAMPLE / "images"


@pytest.fixture(scope="session")
def sample_rows() -> list[dict]:
    return [json.loads(line) for line in (SAMPLE / "captions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def smoke_scorer():
    from recon_score.artifact_cache import ArtifactCache
    from recon_score.scorer import ReconScorer

    return ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
