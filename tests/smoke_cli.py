"""The argv of the CLI runs many tests start (the smoke preset's tiny offline models, on CPU), and the cache a CLI
subprocess gets, spelt once."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path


def own_cache(folder: Path) -> str:
    """A RECONSCORE_CACHE of a subprocess's own (its reconstructions and embeddings start empty) that shares the
    session's tiny models, so each is built once (concurrent builds wait on its lock: recon_score.synthetic.smoke)."""
    from recon_score.paths import cache_root

    models = cache_root() / "fixtures"
    models.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True)
    (folder / "fixtures").symlink_to(models, target_is_directory=True)
    return str(folder)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread, as in a CLI subprocess started with OMP_NUM_THREADS=1: a run in this process then
    computes the bytes that subprocess would (kernels may sum in another order on more threads)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def smoke(command: str, out: Path | str, *args: str) -> list[str]:
    """`reconscore COMMAND --preset smoke ARGS --out OUT --device cpu`, as a list for `eval.cli.main`."""
    return [command, "--preset", "smoke", *args, "--out", str(out), "--device", "cpu"]


def evaluate(
    dataset: str, root: Path | str, captions: Path | str, metrics: str, out: Path, *args: str
) -> list[str]:
    """`reconscore evaluate --dataset DATASET --root ROOT --captions CAPTIONS --metrics METRICS ARGS --out OUT`."""
    return ["evaluate", "--dataset", dataset, "--root", str(root), "--captions", str(captions), "--metrics", metrics,
            *args, "--out", str(out)]  # fmt: skip


def correlate_ranking(preferences: Path | str, metrics: str, out: Path | str, *args: str) -> list[str]:
    """`reconscore correlate` on a ranking file with the smoke preset's models on the bundled sample's images."""
    sample = Path(__file__).resolve().parent.parent / "recon_score" / "sample"
    return ["correlate", "--preferences", str(preferences), "--format", "ranking", "--metrics", metrics,
            "--images", str(sample), "--encoder", "smoke:open-clip", *smoke("", out, *args)[1:]]  # fmt: skip


def retrieve_patterncom(root: Path | str, out: Path | str, methods: str, *args: str) -> list[str]:
    """`reconscore retrieve` on a synthetic PatternCom layout (tests/retrieval/layouts.py) with the smoke CLIP."""
    return ["retrieve", "--benchmark", "patterncom", "--root", str(root), "--encoder", "smoke:open-clip",
            "--out", str(out), "--methods", methods, *args, "--device", "cpu"]  # fmt: skip


def two_systems(tmp_path: Path, images_root: Path) -> list[str]:
    """Score runs TMP/terse and TMP/rich (one caption each for images/UCM_1..3.tif under `images_root`, ids r1..r3)
    and return their `--run NAME=DIR` arguments for `reconscore study encoders`."""
    from eval.cli import main

    caps, runs = tmp_path / "c.jsonl", []
    for name, text in (("terse", "farm"), ("rich", "a wide farmland with rows of green crops and a road")):
        rows = [{"id": f"r{i}", "image": f"images/UCM_{i}.tif", "caption": text} for i in (1, 2, 3)]
        caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert (
            main(smoke("score", tmp_path / name, "--captions", str(caps), "--images", str(images_root))) == 0
        )
        runs += ["--run", f"{name}={tmp_path / name}"]
    return runs


def caption_folder(root: Path, sample_dir: Path, captions: Sequence[str]) -> Path:
    """ROOT/img/<i>.tif (the sample's UCM_<i>.tif, i from 1) and ROOT/caps.jsonl, one row per caption with ids
    a, b, c, ...: the small data folder of the run-folder and resume tests."""
    (root / "img").mkdir(parents=True)
    for i in range(1, len(captions) + 1):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "img" / f"{i}.tif")
    rows = [
        {"id": chr(ord("a") + k), "image": f"img/{k + 1}.tif", "caption": c} for k, c in enumerate(captions)
    ]
    (root / "caps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def outputs(out: Path, skip: Sequence[str] = ()) -> dict[str, bytes]:
    """A run folder's final outputs by relative path: every file but its record, journal and lock (which hold
    times and invocations) and those under the top-level names in `skip`."""
    own = ("run.json", "journal", ".lock", *skip)
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[0] not in own
    }


def assert_restored(
    argv: list[str], out: Path, *, volatile: str | None = None, skip: Sequence[str] = (), code: int = 0
) -> None:
    """Delete every final output of the finished run `out` and rerun `argv`: the same bytes come back (the Run
    writes a command's whole output again; the artifact cache may answer its renders). `volatile`: a measured
    column (a timing) that differs on every run: tables holding it are compared as CSV without it, and files
    naming it otherwise (their markdown) by presence. `skip`: top-level names left alone (runs kept inside)."""
    import io

    import pandas as pd

    from eval.cli import main

    want = outputs(out, skip)
    assert want, f"{out} has no output to delete"
    for rel in want:
        (out / rel).unlink()
    assert main(argv) == code
    got = outputs(out, skip)
    assert sorted(got) == sorted(want)
    for rel, data in want.items():
        if volatile is None or volatile.encode() not in data:
            assert got[rel] == data, rel
        elif rel.endswith(".csv"):
            old, new = (pd.read_csv(io.BytesIO(b)).drop(columns=volatile) for b in (data, got[rel]))
            pd.testing.assert_frame_equal(new, old)
