"""recon_score.torchmetrics.ReconScore: a torchmetrics Metric whose states sync across processes (gloo)."""

import json
import os
import socket

import numpy as np
import pytest
import torch

pytest.importorskip("torchmetrics")

from recon_score.artifact_cache import ArtifactCache
from recon_score.errors import InputError
from recon_score.images import load_image
from recon_score.scorer import ReconScorer
from recon_score.torchmetrics import ReconScore

CAPTIONS = ["There is a piece of farmland .", "two planes are parked near the terminal", "a river"]
# Same process, same pixels: equal by construction. Across processes the tiny models run the same CPU kernels,
# but thread counts may differ, so float summation order may too: 1e-3 ReconScore points (of 100).
CROSS_PROCESS_ABS = 1e-3


def _images(sample_dir) -> torch.Tensor:
    """(3, 3, H, W) uint8: two sample tiles and a flipped one."""
    a = np.array(load_image(sample_dir / "images" / "UCM_1.tif"))
    b = np.array(load_image(sample_dir / "images" / "UCM_2.tif"))
    return torch.from_numpy(np.stack([a, b, a[::-1].copy()])).permute(0, 3, 1, 2).contiguous()


def test_update_compute_equal_scorer(smoke_scorer, sample_dir):
    images = _images(sample_dir)
    metric = ReconScore(scorer=smoke_scorer)
    metric.update(images[:2], CAPTIONS[:2])  # BCHW uint8
    metric.update([images[2].float() / 255.0], CAPTIONS[2:])  # a list of float CHW tensors
    ref = [r.recon_score for r in smoke_scorer.score(list(images), CAPTIONS)]
    assert metric.per_item().tolist() == pytest.approx(ref, abs=1e-9)
    assert float(metric.compute()) == pytest.approx(float(np.mean(ref)), abs=1e-9)
    assert int(metric.n_scored) == 3 and int(metric.n_failed) == 0
    metric.reset()
    assert metric.per_item().numel() == 0 and torch.isnan(metric.compute())


def test_errors_raise_or_skip(smoke_scorer, sample_dir):
    images = _images(sample_dir)
    bad = [images[0], images[1].float()]  # the second is 0..255 as float
    with pytest.raises(
        InputError, match=r"item 1 of the batch: image 1: float tensor values must lie in \[0, 1\]"
    ):
        ReconScore(scorer=smoke_scorer).update(bad, CAPTIONS[:2])
    skip = ReconScore(scorer=smoke_scorer, on_error="skip")
    skip.update(bad, CAPTIONS[:2])
    assert int(skip.n_scored) == 1 and int(skip.n_failed) == 1
    with pytest.raises(ValueError, match="on_error must be one of"):
        ReconScore(scorer=smoke_scorer, on_error="ignore")


def _worker(rank: int, world: int, port: int, out: str, sample_dir: str) -> None:
    """One DDP process: scores its share of the items, then compute() and per_item() all-reduce/all-gather."""
    from pathlib import Path

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        images = _images(Path(sample_dir))
        metric = ReconScore("smoke", scorer_device="cpu", cache=ArtifactCache(enabled=False))
        share = [0, 1] if rank == 0 else [2]  # uneven shares: the "cat" state gathers different lengths
        metric.update(images[share], [CAPTIONS[i] for i in share])
        mean, items = float(metric.compute()), metric.per_item().tolist()
        local = len(metric.scores)  # sync_context restored the local states afterwards
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump({"mean": mean, "items": items, "n": float(metric.n_scored), "local": local}, f)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multiprocess
def test_two_process_gloo_sync_equals_one_process(tmp_path, sample_dir):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), str(sample_dir)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    scorer = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    ref = [r.recon_score for r in scorer.score(list(_images(sample_dir)), CAPTIONS)]
    for g in got:  # every process sees the global numbers: rank 0's items, then rank 1's
        assert g["n"] == 0 or g["local"] >= 1
        assert g["items"] == pytest.approx(ref, abs=CROSS_PROCESS_ABS)
        assert g["mean"] == pytest.approx(float(np.mean(ref)), abs=CROSS_PROCESS_ABS)
