"""Every writing command's final outputs are the Run's: deleted, a rerun restores their bytes; killed (SIGKILL once
it holds the folder's lock), a rerun gives the bytes of an uninterrupted run. Each command on the smallest
fixture its own tests use."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from eval.cli import main
from tests.eval.metric_helpers import DATA
from tests.recon_score.test_kill_rerun import _files, _killed
from tests.smoke_cli import caption_folder, evaluate, smoke

Argv = Callable[[Path], list[str]]


def _score(tmp_path: Path, sample_dir: Path) -> Argv:
    root = caption_folder(tmp_path / "data", sample_dir, ["a farm", "a road"])
    return lambda o: smoke("score", o, "--captions", str(root / "caps.jsonl"), "--images", str(root))


def _describe(tmp_path: Path, sample_dir: Path) -> Argv:
    return lambda o: smoke("describe", o, "--n", "2", "--limit", "1", "--t2i-batch-size", "2")


def _evaluate(tmp_path: Path, sample_dir: Path) -> Argv:
    root = tmp_path / "split"
    (root / "images").mkdir(parents=True)
    images = []
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
        images.append({"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": f"a farm {i} ."}]})
    (root / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
    caps = tmp_path / "caps.csv"
    caps.write_text("image,caption\n1.tif,a farm 1 .\n2.tif,a road\n")
    return lambda o: evaluate("ucm-captions", root, caps, "bleu1,rouge", o)


def _pairs(tmp_path: Path, sample_dir: Path) -> Argv:
    from tests.describer.test_pairs import _fake_run

    run = _fake_run(tmp_path)
    return lambda o: ["pairs", str(run), "--out", str(o), "--policy", "all"]


def _correlate(tmp_path: Path, sample_dir: Path) -> Argv:
    thumb = DATA / "thumb" / "mscoco_THumB-1.0.jsonl"
    argv = [
        "correlate",
        "--preferences",
        str(thumb),
        "--format",
        "thumb",
        "--metrics",
        "rouge",
        "--bootstrap",
        "10",
    ]
    return lambda o: [*argv, "--out", str(o)]


def _benchmarks(tmp_path: Path, sample_dir: Path) -> Argv:
    argv = ["correlate", "--benchmarks", "flickr8k-expert,thumb", "--data-root", str(DATA), "--metrics", "rouge",
            "--bootstrap", "10"]  # fmt: skip
    return lambda o: [*argv, "--out", str(o)]


def _study(tmp_path: Path, sample_dir: Path) -> Argv:
    pool = tmp_path / "pool"
    argv = smoke(
        "describe", pool, "--n", "2", "--limit", "1", "--t2i-batch-size", "2", "--eval-candidates", "all"
    )
    assert main(argv) == 0
    return lambda o: ["study", "n-sweep", "--run", f"ucm={pool}", "--ns", "1,2", "--out", str(o)]


def _collect(tmp_path: Path, sample_dir: Path) -> Argv:
    from tests.eval.annotate_helpers import SAMPLE, in_order, page_data, sample_candidates, write_export

    table = sample_candidates(tmp_path / "candidates.csv", limit=3)
    study = tmp_path / "study"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(SAMPLE), "--annotators", "2"]
    assert main([*argv, "--out", str(study)]) == 0
    exports = []
    for k, order in ((1, [0, 1, 2]), (2, [2, 1, 0])):
        data = page_data(study / "pages" / f"annotator-{k}.html")
        exports.append(
            str(write_export(tmp_path / f"a{k}.jsonl", data, in_order(data, lambda it, order=order: order)))
        )
    return lambda o: ["annotate", "collect", str(study), *exports, "--bootstrap", "10", "--out", str(o)]


COMMANDS = {"score": _score, "describe": _describe, "evaluate": _evaluate, "pairs": _pairs,
            "correlate": _correlate, "correlate-benchmarks": _benchmarks, "study": _study,
            "annotate-collect": _collect}  # fmt: skip


@pytest.mark.parametrize("command", ["score", "evaluate", "pairs", "correlate", "correlate-benchmarks", "study",
                                     "annotate-collect", "describe"])  # fmt: skip
def test_deleted_final_outputs_come_back_byte_for_byte(command, tmp_path, sample_dir):
    argv = COMMANDS[command](tmp_path, sample_dir)
    out = tmp_path / "out"
    code = main(argv(out))  # pairs reports its fixture's missing image (nonzero)
    want = _files(out)
    assert want and (code == 0 or command == "pairs")
    for p in want:
        (out / p).unlink()
    assert main(argv(out)) == code
    assert _files(out) == want


@pytest.mark.parametrize("command", ["correlate", "correlate-benchmarks", "study", "annotate-collect"])
def test_killed_anywhere_reruns_to_the_same_bytes(command, tmp_path, sample_dir):
    argv = COMMANDS[command](tmp_path, sample_dir)
    ref, out = tmp_path / "ref", tmp_path / "killed"
    code = main(argv(ref))
    assert _killed(argv(out), out, tmp_path) == -signal.SIGKILL
    assert main(argv(out)) == code
    assert _files(out) == _files(ref) and _files(ref)
