"""RemoteDescriber on the tiny Qwen3-VL + smoke ReconScore: candidates, selection, seeds, resume, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from describer.backends import Backend, Candidate, Sampling, clean_generation, derive_seed
from describer.presets import DESCRIBER_PRESETS
from describer.run import DescribeJob, run_describe
from describer.selection import ReconScoreSelector, select_best
from eval.cli import main
from recon_score.artifact_cache import ArtifactCache
from recon_score.atomic_io import read_jsonl
from recon_score.errors import ReconScoreError
from recon_score.presets import SMOKE_NOTE
from recon_score.scorer import ReconScorer
from tests.smoke_cli import one_thread, own_cache, smoke

REPO = Path(__file__).resolve().parents[2]


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def test_select_best():
    assert select_best([1.0, 3.0, 2.0]) == 1
    assert select_best([3.0, 3.0, 1.0]) == 0  # ties: first
    assert select_best([None, 2.0, float("nan"), 2.0]) == 1
    assert select_best([None, None]) is None and select_best([]) is None


def test_clean_generation():
    assert clean_generation("  a  farm\n with trees ").text == "  a  farm\n with trees "  # as generated
    assert clean_generation("  a  farm\n with trees ", collapse_whitespace=True).text == "a farm with trees"
    assert clean_generation("<think>hmm</think> Two planes.").text == "Two planes."
    assert clean_generation("   ").error == "empty generation"
    assert clean_generation("<think>never ends").error == "empty generation"
    assert "refused" in clean_generation("x", "content_filter").error


def test_seed_depends_on_pixels_not_position():
    assert derive_seed(0, "abc") == derive_seed(0, "abc") != derive_seed(1, "abc") != derive_seed(0, "abd")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The bundled sample's first 6 images (its 5 UC Merced .tif and an RSICD .jpg), 3 candidates each."""
    out = tmp_path_factory.mktemp("describe") / "run"
    rc = main(smoke("describe", out, "--n", "3", "--limit", "6"))
    return rc, out


def test_smoke_describe_on_the_sample(smoke_run):
    rc, out = smoke_run
    assert rc == 0
    cands, caps = _jsonl(out / "candidates.jsonl"), _jsonl(out / "captions.jsonl")
    assert len(caps) == 6 and len(cands) == 18
    for cap in caps:
        mine = [c for c in cands if c["image_id"] == cap["image_id"]]
        assert [c["index"] for c in mine] == [0, 1, 2]
        scores = [c["selection_score"] if not c["error"] else None for c in mine]
        assert cap["index"] == select_best(scores)  # selection = argmax of the recorded scores
        assert (
            cap["caption"] == mine[cap["index"]]["caption"]
            and cap["selection_score"] == mine[cap["index"]]["selection_score"]
        )
        assert [c["selected"] for c in mine] == [c["index"] == cap["index"] for c in mine]
        assert "meaningless" in cap["note"]
    run = json.loads((out / "run.json").read_text())
    assert run["preset"]["name"] == "smoke" and run["captioner"]["backend"] == "transformers"
    assert run["selection"]["metric"] == "recon_score" and run["selection"]["preset"]["name"] == "smoke"
    assert run["counts"] == {
        "images": 6,
        "described": 6,
        "failed": 0,
        "candidates": 18,
        "valid_candidates": 18,
    }


def test_same_seed_same_candidates_any_order(smoke_run, tmp_path, sample_dir):
    _, out = smoke_run
    ref = {(c["image_id"], c["index"]): c["caption"] for c in _jsonl(out / "candidates.jsonl")}
    lst = tmp_path / "list.txt"
    lst.write_text("images/RSICD_00001.jpg\nimages/UCM_3.tif\n")  # another order, a subset
    out2 = tmp_path / "again"
    assert (
        main(
            smoke(
                "describe",
                out2,
                "--n",
                "3",
                "--inputs",
                str(lst),
                "--images",
                str(sample_dir),
                "--vlm-batch-size",
                "1",
            )
        )
        == 0
    )
    again = _jsonl(out2 / "candidates.jsonl")
    assert len(again) == 6
    for c in again:  # a list's ids are paths under --root: images/UCM_3
        assert c["caption"] == ref[(c["image_id"].removeprefix("images/"), c["index"])]
    out3 = tmp_path / "seed7"
    lst.write_text("images/UCM_3.tif\n")  # one image's 3 candidates show that the seed is used
    assert (
        main(
            smoke(
                "describe", out3, "--n", "3", "--inputs", str(lst), "--images", str(sample_dir), "--seed", "7"
            )
        )
        == 0
    )
    other = {
        (c["image_id"].removeprefix("images/"), c["index"]): c["caption"]
        for c in _jsonl(out3 / "candidates.jsonl")
    }
    assert any(other[k] != ref[k] for k in other)


def test_rerun_is_a_noop(smoke_run, capsys):
    _, out = smoke_run
    before = {n: (out / n).read_bytes() for n in ("candidates.jsonl", "captions.jsonl", "run.json")}
    assert main(smoke("describe", out, "--n", "3", "--limit", "6")) == 0
    assert {n: (out / n).read_bytes() for n in before} == before
    assert f"{SMOKE_NOTE}." in capsys.readouterr().err.splitlines()  # the smoke banner, from run.json


class ScriptedCaptioner(Backend):
    """A backend whose answers the test controls: errors and empty generations per candidate."""

    name = "scripted"

    def __init__(self, script):
        self.script = script
        self.calls = 0

    def identity(self):
        return {"backend": self.name, "model": "scripted"}

    def generate(self, requests, prompt, sampling):
        self.calls += 1
        return [
            [c if isinstance(c, Candidate) else clean_generation(c) for c in self.script(r)] for r in requests
        ]


def test_bad_candidates_and_images_are_reported(tmp_path, sample_dir):
    (tmp_path / "corrupt.png").write_bytes(b"nope")
    for i in (1, 2):
        Image.open(sample_dir / "images" / f"UCM_{i}.tif").save(tmp_path / f"ok{i}.png")
    lst = tmp_path / "list.jsonl"
    lst.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"image": "ok1.png"},
                {"image": "corrupt.png"},
                {"image": "ok2.png"},
                {"image": "../escape.png"},
            ]
        )
        + "\n{bad\n"
    )

    def script(req):
        if req.key == "ok2":  # nothing usable for this image
            return [Candidate(None, error="backend error: HTTP 500"), "   "]
        return [Candidate(None, error="backend error: timeout"), "a farm with a red barn"]

    scorer = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    job = DescribeJob(
        out=tmp_path / "run",
        preset=DESCRIBER_PRESETS["smoke"].replace(n=2),
        captioner=ScriptedCaptioner(script),
        selector=ReconScoreSelector(scorer),
        inputs=lst,
    )
    summary = run_describe(job)
    assert summary.exit_code == 3 and summary.images == 5 and summary.described == 1
    caps = {c["image_id"]: c for c in _jsonl(tmp_path / "run" / "captions.jsonl")}
    assert caps["ok1"]["caption"] == "a farm with a red barn" and caps["ok1"]["index"] == 1
    assert caps["ok1"]["n_valid"] == 1
    assert "no valid candidate" in caps["ok2"]["error"] and "HTTP 500" in caps["ok2"]["error"]
    assert "corrupt" in caps["corrupt"]["error"]
    assert "outside the data root" in caps["../escape"]["error"]  # ids: the path without its suffix
    assert "list.jsonl:5" in caps["line5"]["error"]
    cands = _jsonl(tmp_path / "run" / "candidates.jsonl")
    assert [c["error"] for c in cands if c["image_id"] == "ok1"] == ["backend error: timeout", None]
    assert all(
        set(c) == set(cands[0]) for c in cands
    )  # an errored candidate has a scored one's keys, as null
    assert all(set(c) == set(caps["ok1"]) for c in caps.values())


def test_failed_start_and_repair_from_the_journal(tmp_path, sample_dir, caplog):
    """A missing input list leaves no folder; a damaged finished run is rebuilt from its journal, the lost
    reconstruction scored again from the journaled candidates (no VLM call)."""
    scorer = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    captioner = ScriptedCaptioner(lambda r: ["a farm with a red barn", "a road"])

    def job(inputs: Path) -> DescribeJob:
        preset = DESCRIBER_PRESETS["smoke"].replace(n=2)
        return DescribeJob(
            out=tmp_path / "new" / "run",
            preset=preset,
            captioner=captioner,
            selector=ReconScoreSelector(scorer),
            inputs=inputs,
        )

    with pytest.raises(ReconScoreError, match=r"nope\.txt not found"):
        run_describe(job(tmp_path / "nope.txt"))
    assert not (tmp_path / "new").exists()
    Image.open(sample_dir / "images" / "UCM_1.tif").save(tmp_path / "a.png")
    (tmp_path / "list.txt").write_text("a.png\n")
    assert run_describe(job(tmp_path / "list.txt")).exit_code == 0
    out, calls = tmp_path / "new" / "run", captioner.calls
    want = {p: (out / p).read_bytes() for p in ("captions.jsonl", "candidates.jsonl")}
    info = json.loads((out / "run.json").read_text())
    assert info["command"] == "describe" and info["resumed"] is False
    (out / "captions.jsonl").write_bytes(want["captions.jsonl"][:20])
    lost = out / json.loads(want["captions.jsonl"])["eval_reconstruction"]
    lost.unlink()
    summary = run_describe(job(tmp_path / "list.txt"))
    assert not summary.already_complete and summary.repaired and captioner.calls == calls
    assert "1 image(s) with reconstructions/ files missing or replaced" in caplog.text
    assert lost.is_file() and {p: (out / p).read_bytes() for p in want} == want
    assert run_describe(job(tmp_path / "list.txt")).already_complete


def test_phases_free_models_between_steps(tmp_path, sample_dir):
    events = []

    class Recording(ScriptedCaptioner):
        def generate(self, requests, prompt, sampling):
            events.append(("caption", len(requests)))
            return super().generate(requests, prompt, sampling)

        def unload(self):
            events.append(("free-vlm",))

    class RecordingSelector(ReconScoreSelector):
        def score_many(self, items):
            events.append(("score", len(items)))
            return super().score_many(items)

        def unload(self):
            events.append(("free-t2i",))

    scorer = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    job = DescribeJob(
        out=tmp_path / "run",
        preset=DESCRIBER_PRESETS["smoke"].replace(n=2),
        captioner=Recording(lambda r: ["a farm", "a road"]),
        selector=RecordingSelector(scorer),
        inputs=sample_dir / "images",
        phase_size=2,
        unload_between_phases=True,
        limit=3,
    )
    assert run_describe(job).exit_code == 0
    assert events == [("caption", 1)] * 2 + [("free-vlm",), ("score", 2), ("free-t2i",)] + [
        ("caption", 1)
    ] + [("free-vlm",), ("score", 1), ("free-t2i",)]


def test_paper_names_its_models_and_fails_clearly(tmp_path, capsys):
    assert main(["describe", "--preset", "paper", "--out", str(tmp_path / "p"), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    for needle in ("Qwen/Qwen3-VL-8B-Instruct", "Tongyi-MAI/Z-Image", "dreamsim:ensemble", "--captioner"):
        assert needle in err
    assert main(["presets", "show", "paper", "--describer"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (
        shown["captioner"] == "Qwen/Qwen3-VL-8B-Instruct" and shown["recon"]["encoder"] == "dreamsim:ensemble"
    )
    assert (shown["n"], shown["temperature"], shown["top_p"], shown["max_new_tokens"]) == (10, 0.8, 0.9, 512)


def test_kill_and_resume(tmp_path, monkeypatch):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = [
        sys.executable,
        "-m",
        "eval",
        "describe",
        "--preset",
        "smoke",
        "--n",
        "3",
        "--device",
        "cpu",
        "--phase-size",
        "1",
        "--limit",
        "6",
    ]
    # the uninterrupted reference and the run to kill start together (one core each: OMP_NUM_THREADS=1)
    ref = tmp_path / "ref"
    ref_proc = subprocess.Popen(
        [*args, "--out", str(ref)],
        env=dict(env, RECONSCORE_CACHE=own_cache(tmp_path / "c1")),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    out = tmp_path / "killed"
    env2 = dict(env, RECONSCORE_CACHE=own_cache(tmp_path / "c2"))
    proc = subprocess.Popen(
        [*args, "--out", str(out)], env=env2, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    journal = out / "journal" / "final-rank-0.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 4:
            break
        if proc.poll() is not None:
            pytest.fail("finished before it could be killed")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(read_jsonl(journal)) - 1
    assert 3 <= done_before < 6
    _, ref_err = ref_proc.communicate(timeout=600)
    assert ref_proc.returncode == 0, ref_err[-2000:]
    # the resume runs in this process: its models and imports are already loaded (an interpreter start-up
    # costs ~15 s of imports); argv, cache and thread count are those of the killed process
    monkeypatch.setenv("RECONSCORE_CACHE", env2["RECONSCORE_CACHE"])
    monkeypatch.setattr(sys, "argv", ["reconscore", *args[3:], "--out", str(out)])
    with one_thread():
        assert main([*args[3:], "--out", str(out)]) == 0
    for name in ("candidates.jsonl", "captions.jsonl"):
        assert (out / name).read_bytes() == (ref / name).read_bytes()
    # run.json lists both invocations: the killed one and the one that finished, with the images each did
    hist = json.loads((out / "run.json").read_text())["invocations"]
    assert [(h["invocation"], h["exit"]) for h in hist] == [(0, "interrupted"), (1, "finished")]
    assert [h["rows_done"] for h in hist] == [done_before, 6 - done_before]
    assert all(h["started"] and h["processes"] == 1 and "describe" in h["argv"] for h in hist)
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"] and run["started"] == hist[0]["started"]
    assert not json.loads((ref / "run.json").read_text())["resumed"]


def test_sampling_validation():
    with pytest.raises(ValueError):
        Sampling(n=0)
    with pytest.raises(ValueError):
        Sampling(top_p=0)


def test_transformers_backend_batches_across_images(sample_dir):
    """num_return_sequences=N per image, several images per generate call, rows regrouped per image."""
    from describer.backends.transformers import TransformersBackend

    cap = TransformersBackend("smoke:qwen3-vl", device="cpu", batch_size=2)
    from describer.backends import CaptionRequest

    imgs = [
        Image.fromarray(np.asarray(Image.open(sample_dir / "images" / f"UCM_{i}.tif"))) for i in (1, 2, 3)
    ]
    reqs = [CaptionRequest(im, seed=i) for i, im in enumerate(imgs)]
    out = cap.generate(reqs, "Describe the image.", Sampling(n=4, max_new_tokens=6))
    assert [len(c) for c in out] == [4, 4, 4]
    assert all(isinstance(c, Candidate) for cs in out for c in cs)
    ident = cap.identity()
    assert ident["backend"] == "transformers" and ident["revision"].startswith("fixture:")


def test_every_row_has_the_same_keys(tmp_path, sample_dir):
    """One schema for every row: a broken image's caption row and an errored candidate's row carry the keys of
    scored ones (as null), as scores.jsonl does."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "a_broken.png").write_bytes(b"not a png")
    Image.open(sample_dir / "images" / "UCM_1.tif").save(images / "b_good.png")
    out = tmp_path / "run"
    assert main(smoke("describe", out, "--images", str(images), "--n", "2")) == 3
    for name in ("captions.jsonl", "candidates.jsonl"):
        rows = _jsonl(out / name)
        assert rows and all(set(r) == set(rows[-1]) for r in rows), name
    caps = {Path(c["image"]).stem: c for c in _jsonl(out / "captions.jsonl")}
    assert caps["a_broken"]["error"] and caps["a_broken"]["recon_score"] is None
    assert caps["b_good"]["recon_score"] is not None and caps["b_good"]["error"] is None


def test_cider_selection_takes_its_idf_from_the_whole_input_set(tmp_path, sample_dir):
    """CIDEr's IDF (Vedantam et al. 2015) is over the input set's references, one document per image: at N >= 9
    a selection batch holds one image, and an IDF over its own rows made every reference n-gram weightless
    (every candidate 0). A candidate's selection score is the same with --limit, and is the CIDEr the pick gets
    when the input set is evaluated with one caption per image."""
    from eval.metrics import CaptionBatch, build_metric
    from eval.selection import MetricSelector

    refs = {
        "ok1": ["a farm with a red barn", "a green field beside a farm"],
        "ok2": ["a road crosses the farmland", "a long road through fields"],
        "ok3": ["a river with a bridge", "a bridge over a wide river"],
    }
    for i, key in enumerate(refs, 1):
        Image.open(sample_dir / "images" / f"UCM_{i}.tif").save(tmp_path / f"{key}.png")
    lst = tmp_path / "list.jsonl"
    lst.write_text(
        "".join(json.dumps({"image": f"{k}.png", "references": r}) + "\n" for k, r in refs.items())
    )
    words = ["a farm", "a red barn", "a road", "a bridge", "fields", "a river", "green", "a wide river", "x"]

    def script(req):
        return [f"{w} {req.key}" for w in words]

    runs = {}
    for name, limit in (("limited", 2), ("all", None)):
        job = DescribeJob(
            out=tmp_path / name,
            preset=DESCRIBER_PRESETS["smoke"].replace(n=len(words), select_by="cider"),
            captioner=ScriptedCaptioner(script),
            selector=MetricSelector("cider", device="cpu", preset="smoke"),
            inputs=lst,
            limit=limit,
        )
        assert run_describe(job).exit_code == 0
        runs[name] = {
            (c["image_id"], c["index"]): c["selection_score"] for c in _jsonl(job.out / "candidates.jsonl")
        }
    assert runs["limited"] == {k: v for k, v in runs["all"].items() if k[0] != "ok3"}
    caps = _jsonl(tmp_path / "all" / "captions.jsonl")
    assert all(c["selection_score"] > 0 for c in caps)
    batch = CaptionBatch([c["caption"] for c in caps], [refs[c["image_id"]] for c in caps])
    evaluated = build_metric("cider").score(batch).values
    assert [c["selection_score"] for c in caps] == pytest.approx(list(evaluated))
    assert (
        json.loads((tmp_path / "all" / "run.json").read_text())["selection"]["idf_corpus_references"][
            "documents"
        ]
        == 3
    )


def test_select_by_clipscore_uses_encoder_and_preset(tmp_path):
    """`--select-by clipscore` builds CLIP-S with --encoder and the preset (it used to take the default
    ViT-B/32 whatever was asked: offline, a refusal advising --encoder)."""
    out = tmp_path / "c"
    argv = ["--n", "2", "--limit", "1", "--select-by", "clipscore", "--encoder", "smoke:open-clip"]
    assert main(smoke("describe", out, *argv)) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["selection"]["metric"] == "clipscore" and run["selection"]["encoder"] == "smoke:open-clip"
