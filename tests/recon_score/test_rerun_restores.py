"""Every writing command's final outputs are the Run's: deleted, a rerun restores their bytes; killed (SIGKILL once
it holds the folder's lock, or at a journal append: run_engine's kill point), a rerun gives the bytes of an
uninterrupted run. Each command on the smallest fixture its own tests use.

Every `study` subcommand's delete case lives beside its own test (tests/eval/test_studies.py and the other study
test files: `tests.smoke_cli.assert_restored`); they all write through one `write_study`, whose kill case is here.
Where each command's kill case lives: score tests/recon_score/test_run.py, describe tests/describer/test_describe.py,
generate tests/eval/test_generate_resume.py, evaluate and pairs tests/recon_score/test_kill_rerun.py, metrics add
(folder) tests/eval/test_metrics_add_rerun.py; the others here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from eval.cli import main
from tests.eval.metric_helpers import DATA
from tests.recon_score.test_kill_rerun import REPO, _killed
from tests.recon_score.test_kill_rerun import _files as _run_files
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


def _build(tmp_path: Path, sample_dir: Path) -> Argv:
    from tests.eval.annotate_helpers import SAMPLE, sample_candidates

    table = sample_candidates(tmp_path / "candidates.csv", limit=3)
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(SAMPLE), "--annotators", "2"]
    return lambda o: [*argv, "--out", str(o)]


def _collect(tmp_path: Path, sample_dir: Path) -> Argv:
    from tests.eval.annotate_helpers import in_order, page_data, write_export

    study = tmp_path / "study"
    assert main(_build(tmp_path, sample_dir)(study)) == 0
    exports = []
    for k, order in ((1, [0, 1, 2]), (2, [2, 1, 0])):
        data = page_data(study / "pages" / f"annotator-{k}.html")
        exports.append(
            str(write_export(tmp_path / f"a{k}.jsonl", data, in_order(data, lambda it, order=order: order)))
        )
    return lambda o: ["annotate", "collect", str(study), *exports, "--bootstrap", "10", "--out", str(o)]


def _generate(tmp_path: Path, sample_dir: Path) -> Argv:
    caps = tmp_path / "caps.jsonl"
    rows = [
        {"id": f"s{i}", "image": "images/UCM_1.tif", "caption": f"a farmland with {i} trees"}
        for i in range(3)
    ]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["generate", "perturb", "--captions", str(caps), "--model", "smoke:qwen3-text", "--device", "cpu",
            "--max-new-tokens", "4"]  # fmt: skip
    return lambda o: [*argv, "--out", str(o)]


def _retrieve(tmp_path: Path, sample_dir: Path) -> Argv:
    from tests.retrieval import layouts
    from tests.smoke_cli import retrieve_patterncom

    root = layouts.patterncom(tmp_path / "pc")
    return lambda o: retrieve_patterncom(root, o, "text,image,sum")


def _metrics(tmp_path: Path, sample_dir: Path) -> Argv:
    """`metrics add RUN`: the table and its record beside the run's scores.jsonl (OUT is the run folder)."""
    from tests.eval.test_metrics_add_rerun import _argv, _run

    return lambda o: _argv(o if o.exists() else _run(o))


def _metrics_file(tmp_path: Path, sample_dir: Path) -> Argv:
    """`metrics add SCORES.jsonl --out OUT/metrics.jsonl`: one file (and its record) made from another."""
    from tests.eval.test_metrics_add_rerun import _argv, _run

    scores = _run(tmp_path / "table") / "scores.jsonl"

    def argv(o: Path) -> list[str]:
        o.mkdir(exist_ok=True)
        return [*_argv(scores), "--out", str(o / "metrics.jsonl")]

    return argv


COMMANDS = {"score": _score, "describe": _describe, "evaluate": _evaluate, "pairs": _pairs,
            "correlate": _correlate, "correlate-benchmarks": _benchmarks, "study": _study,
            "annotate-build": _build, "annotate-collect": _collect, "generate": _generate, "retrieve": _retrieve,
            "metrics-add": _metrics, "metrics-add-file": _metrics_file}  # fmt: skip
# what a command's own tests say is not an output: its input (metrics add RUN), a file target's record (times)
NOT_OUTPUTS = {"metrics-add": ("scores.jsonl", "scores.metrics.json"), "metrics-add-file": ("metrics.json",)}


def _files(out: Path, command: str = "") -> dict[str, bytes]:
    """The final outputs' bytes (not a file target's hidden journal and lock, `.NAME.journal/`, `.NAME.lock`)."""
    skip = NOT_OUTPUTS.get(command, ())
    return {p: b for p, b in _run_files(out).items() if not p.startswith(".") and p not in skip}


@pytest.mark.parametrize("command", ["score", "evaluate", "pairs", "correlate", "correlate-benchmarks", "study",
                                     "annotate-build", "annotate-collect", "describe", "generate", "retrieve",
                                     "metrics-add", "metrics-add-file"])  # fmt: skip
def test_deleted_final_outputs_come_back_byte_for_byte(command, tmp_path, sample_dir):
    argv = COMMANDS[command](tmp_path, sample_dir)
    out = tmp_path / "out"
    code = main(argv(out))  # pairs reports its fixture's missing image (nonzero)
    want = _files(out, command)
    assert want and (code == 0 or command == "pairs")
    records = [out / n for n in NOT_OUTPUTS.get(command, ()) if n.endswith(".json")]
    for p in [*want, *records]:
        (out / p).unlink()
    assert main(argv(out)) == code
    assert _files(out, command) == want
    assert all(p.is_file() for p in records)


@pytest.mark.parametrize("command", ["correlate", "correlate-benchmarks", "study", "annotate-collect"])
def test_killed_anywhere_reruns_to_the_same_bytes(command, tmp_path, sample_dir):
    argv = COMMANDS[command](tmp_path, sample_dir)
    ref, out = tmp_path / "ref", tmp_path / "killed"
    code = main(argv(ref))
    assert _killed(argv(out), out, tmp_path) == -signal.SIGKILL
    assert main(argv(out)) == code
    assert _files(out) == _files(ref) and _files(ref)


def test_a_killed_rebuild_of_a_study_reruns_to_its_bytes(tmp_path, sample_dir):
    """A study's id is minted once per folder (exports name it), so two folders never share bytes: a rebuild
    killed once it holds the lock, rerun, gives the bytes of the build it replaces."""
    argv = COMMANDS["annotate-build"](tmp_path, sample_dir)
    out = tmp_path / "study"
    assert main(argv(out)) == 0
    want = _files(out)
    (out / ".lock").unlink()  # the kill waits for the rebuild to take it
    assert _killed(argv(out), out, tmp_path) == -signal.SIGKILL
    assert main(argv(out)) == 0
    assert _files(out) == want and want


def test_the_consensus_pass_restores_and_reruns_to_its_bytes(tmp_path, sample_dir):
    """`annotate build --only contested --collected C` writes its round and page into the study C collected:
    deleted, a rerun restores their bytes; killed once it holds the study's lock, a rerun gives them again."""
    collected = tmp_path / "collected"
    assert main(COMMANDS["annotate-collect"](tmp_path, sample_dir)(collected)) == 0
    argv = ["annotate", "build", "--only", "contested", "--collected", str(collected)]
    study = tmp_path / "study"
    assert main(argv) == 0
    want = _files(study)
    own = ["consensus.json", "pages/consensus.html"]
    assert all(rel in want for rel in own)
    for rel in own:
        (study / rel).unlink()
    assert main(argv) == 0
    assert _files(study) == want
    (study / ".lock").unlink()  # the kill waits for the pass to take it
    assert _killed(argv, study, tmp_path) == -signal.SIGKILL
    assert main(argv) == 0
    assert _files(study) == want


def _killed_at(argv: list[str], append: int) -> int:
    """`reconscore ARGV` SIGKILLed at its `append`th journal append (tests/killpoint.py)."""
    # the test's own cache: a synthetic encoder's identity names the folder it was built in
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.killpoint", str(append), *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=300,
    )
    return proc.returncode


@pytest.mark.parametrize(("command", "append"), [("retrieve", 2), ("metrics-add-file", 1)])
def test_killed_at_a_journal_append_reruns_to_the_same_bytes(command, append, tmp_path, sample_dir):
    """retrieve killed as its second method is journaled (the first one's files written, no final file);
    metrics add on a file killed with its table computed, not journaled."""
    argv = COMMANDS[command](tmp_path, sample_dir)
    ref, out = tmp_path / "ref", tmp_path / "killed"
    code = main(argv(ref))
    assert _killed_at(argv(out), append) == -signal.SIGKILL
    assert main(argv(out)) == code
    assert _files(out, command) == _files(ref, command) and _files(ref, command)


def test_killed_between_the_finish_and_its_record_reruns_to_the_record(tmp_path, sample_dir):
    """Killed after the end line, before run.json: the rerun writes these results' record, not keeping the one an
    earlier invocation wrote for other captions."""
    out, ref = tmp_path / "out", tmp_path / "ref"
    argv = _score(tmp_path, sample_dir)
    assert main(argv(out)) == 0
    rows = (tmp_path / "data" / "caps.jsonl").read_text().replace("a road", "a river")
    (tmp_path / "data" / "caps.jsonl").write_text(rows)
    assert main(argv(ref)) == 0
    assert _killed_at(argv(out), "end") == -signal.SIGKILL
    stale = json.loads((out / "run.json").read_text())
    assert main(argv(out)) == 0
    got, want = (json.loads((p / "run.json").read_text()) for p in (out, ref))
    assert got["summary"] == want["summary"] != stale["summary"]
    assert got["invocations"][-1]["repaired"] == ["run.json was not written by the last finished invocation"]
    assert (out / "scores.jsonl").read_bytes() == (ref / "scores.jsonl").read_bytes()


def test_a_record_whose_invocations_were_edited_is_written_again(tmp_path, sample_dir):
    """run.json's `invocations` replaced by something that is not a list of invocations: a repair, not a traceback."""
    out, argv = tmp_path / "out", _score(tmp_path, sample_dir)
    assert main(argv(out)) == 0
    want = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**want, "invocations": 5}))
    assert main(argv(out)) == 0
    got = json.loads((out / "run.json").read_text())
    assert got["invocations"][-1]["repaired"] == ["run.json was not written by the last finished invocation"]
    assert got["summary"] == want["summary"]


@pytest.mark.parametrize("command", ["score", "describe", "generate"])
def test_a_finished_rerun_builds_no_model(command, tmp_path, sample_dir, monkeypatch, capsys):
    """A finished run's rerun costs what its records cost: no T2I pipeline, encoder or language model is built
    (each command's preflight, the model check, runs only when there is work), and no file changes."""
    import describer.backends.transformers
    import recon_score.encoders
    import recon_score.render
    import recon_score.scorer

    argv = COMMANDS[command](tmp_path, sample_dir)
    out = tmp_path / "out"
    code = main(argv(out))
    before = {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file() and p.name != ".lock"
    }

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run's rerun built a model")

    monkeypatch.setattr(recon_score.encoders, "build_encoder", refuse)
    monkeypatch.setattr(recon_score.scorer, "build_encoder", refuse)
    monkeypatch.setattr(recon_score.render.Renderer, "_load", refuse)
    monkeypatch.setattr(describer.backends.transformers.TransformersBackend, "_load", refuse)
    capsys.readouterr()
    assert main(argv(out)) == code
    if command != "generate":  # generate's closing line is its count of rows either way
        assert "is already complete: nothing to do" in " ".join(capsys.readouterr().out.split())
    assert {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file() and p.name != ".lock"
    } == before
