"""Feature cache (safetensors, resumable, keyed by encoder and items) and top-k search (exact and FAISS)."""

import errno
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from recon_score import atomic_io
from recon_score.encoders import build_encoder
from recon_score.errors import ReconScoreError
from recon_score.images import load_image
from retrieval.features import FeatureStore, encoder_info
from retrieval.index import FaissIndex, exact_topk, topk_recall
from tests.retrieval import layouts


@pytest.fixture(scope="module")
def encoder():
    return build_encoder("smoke:open-clip", device="cpu")


@pytest.fixture
def images(tmp_path):
    return tmp_path, [layouts.image(tmp_path / f"im{i}.png", i).rsplit("/", 1)[-1] for i in range(7)]


def test_images_are_cached_and_resume_shard_by_shard(tmp_path, images, encoder):
    root, paths = images
    store = FeatureStore(tmp_path / "cache", shard_size=3, progress=False)
    first = store.images(encoder, root, paths)
    assert first.shape == (7, encoder.info.dim) and store.computed == 7
    shards = sorted((tmp_path / "cache").rglob("shard-*.safetensors"))
    assert len(shards) == 3
    again = FeatureStore(tmp_path / "cache", shard_size=3, progress=False)
    assert torch.equal(again.images(encoder, root, paths), first) and again.computed == 0
    shards[1].unlink()  # a run killed during shard 1
    resumed = FeatureStore(tmp_path / "cache", shard_size=3, progress=False)
    assert torch.equal(resumed.images(encoder, root, paths), first) and resumed.computed == 3
    expected = encoder.encode_images([load_image(root / p) for p in paths])
    torch.testing.assert_close(first, expected, atol=1e-5, rtol=0)


def test_changed_files_and_disabled_cache(tmp_path, images, encoder):
    root, paths = images
    store = FeatureStore(tmp_path / "cache", progress=False)
    store.images(encoder, root, paths)
    st = os.stat(root / paths[0])
    os.utime(root / paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    store.images(encoder, root, paths)
    assert store.computed == 14  # another fingerprint: extracted again
    off = FeatureStore(tmp_path / "nocache", enabled=False, progress=False)
    off.texts(encoder, ["a red car", "a boat"])
    assert not (tmp_path / "nocache").exists() and off.computed == 2
    texts = FeatureStore(tmp_path / "cache", progress=False)
    t = texts.texts(encoder, ["a red car", "a boat"])
    assert torch.equal(texts.text_encoder(encoder)(["a red car", "a boat"]), t) and texts.computed == 2


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT])
def test_a_refused_encoder_memo_is_skipped(tmp_path, monkeypatch, encoder, code):
    """The memo only spares the next run a build: a read-only, forbidden or full cache must not fail this one."""

    def refuse(path, data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(atomic_io, "_stage", refuse)
    builds = []

    def build():
        builds.append(1)
        return encoder

    for _ in range(2):
        info = encoder_info("smoke:open-clip", weights_dir=None, memo=tmp_path / "memo", build=build)
        assert info["spec"] == encoder.info.spec and info["dim"] == encoder.info.dim
    assert len(builds) == 2 and not (tmp_path / "memo").exists()  # nothing memoed: built again next time


def test_other_encoder_memo_errors_still_fail(tmp_path, monkeypatch, encoder):
    def broken(path, data):
        raise OSError(errno.EIO, "I/O error", str(path))

    monkeypatch.setattr(atomic_io, "_stage", broken)
    with pytest.raises(OSError, match="I/O error"):
        encoder_info("smoke:open-clip", weights_dir=None, memo=tmp_path / "memo", build=lambda: encoder)


def test_a_read_only_feature_cache_names_the_way_out(tmp_path, monkeypatch, encoder):
    def refuse(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(atomic_io, "_stage", refuse)
    with pytest.raises(
        atomic_io.WriteError, match=r"^cannot write in .*: read-only filesystem; .*--no-cache$"
    ):
        FeatureStore(tmp_path / "cache", progress=False).texts(encoder, ["a red car"])


def test_exact_topk_and_faiss():
    g = torch.Generator().manual_seed(0)
    db = F.normalize(torch.randn(300, 16, generator=g), dim=-1)
    q = F.normalize(torch.randn(20, 16, generator=g), dim=-1)
    scores, idx = exact_topk(q, db, 5, chunk_entries=1000)
    full = torch.sort(q @ db.T, dim=1, descending=True, stable=True)
    assert torch.equal(idx, full.indices[:, :5]) and torch.allclose(scores, full.values[:, :5])
    _, fidx = FaissIndex(db, "faiss-flat").search(q, 5)
    assert topk_recall(fidx, idx) == 1.0
    hnsw = FaissIndex(db, "faiss-hnsw", m=16, ef_search=64)
    assert topk_recall(hnsw.search(q, 5)[1], idx) >= 0.9
    ivf = FaissIndex(db, "faiss-ivf", nlist=4, nprobe=4)  # probing every list is exact
    assert topk_recall(ivf.search(q, 5)[1], idx) == 1.0


def test_topk_recall_by_hand():
    exact = torch.tensor([[1, 2, 3], [4, 5, 6]])
    approx = torch.tensor([[3, 2, 9], [7, 8, 9]])
    assert topk_recall(approx, exact) == pytest.approx((2 / 3 + 0) / 2)


def test_missing_faiss_gives_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ReconScoreError, match="pip install faiss-cpu"):
        FaissIndex(torch.eye(4), "faiss-flat")
