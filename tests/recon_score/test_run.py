"""`reconscore score` end to end on the smoke preset: outputs, bad input, rerun, kill + resume, 2 processes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from recon_score.atomic_io import read_jsonl
from recon_score.presets import SMOKE_NOTE
from tests.smoke_cli import one_thread, own_cache, smoke

REPO = Path(__file__).resolve().parents[2]


def _scores(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def messy(tmp_path_factory, sample_dir):
    """The bundled sample's first images plus every kind of bad row the issue lists."""
    root = tmp_path_factory.mktemp("messy")
    img = root / "img"
    img.mkdir()
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", img)
    base = np.asarray(Image.open(sample_dir / "images" / "UCM_3.tif"))
    Image.fromarray(base[:160, :]).save(img / "wide.png")  # 256 x 160: non-square
    (img / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    Image.fromarray(base[..., 0].astype(np.uint16) * 257).save(img / "sixteen.tif")
    Image.fromarray(base).convert("P").save(img / "palette.png")
    Image.fromarray(base).convert("RGBA").save(img / "rgba.png")
    Image.fromarray(base).convert("L").save(img / "gray.png")
    Image.fromarray(base[:8, :8]).save(img / "tiny.png")
    (root / "outside.png").write_bytes((img / "gray.png").read_bytes())
    rows = [
        {"id": "ok1", "image": "img/UCM_1.tif", "caption": "There is a piece of farmland ."},
        {"id": "ok2", "image": "img/UCM_2.tif", "caption": "Many green trees around a farm ."},
        {"id": "wide", "image": "img/wide.png", "caption": "a wide view of farmland"},
        {"id": "corrupt", "image": "img/corrupt.jpg", "caption": "anything"},
        {"id": "16bit", "image": "img/sixteen.tif", "caption": "a gray farm"},
        {"id": "palette", "image": "img/palette.png", "caption": "a farm in a palette"},
        {"id": "rgba", "image": "img/rgba.png", "caption": "a farm with alpha"},
        {"id": "gray", "image": "img/gray.png", "caption": "a gray farm"},
        {"id": "tiny", "image": "img/tiny.png", "caption": "a tiny farm"},
        {"id": "empty", "image": "img/UCM_1.tif", "caption": ""},
        {"id": "blank", "image": "img/UCM_1.tif", "caption": "   \t "},
        {"id": "long", "image": "img/UCM_1.tif", "caption": " ".join(["farmland"] * 700)},
        {"id": "ok1", "image": "img/UCM_2.tif", "caption": "duplicate id"},
        {"id": "escape", "image": "../outside.png", "caption": "sneaky"},
        {"id": "missing", "image": "img/nope.tif", "caption": "a farm"},
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "{this is not json")
    lines.insert(5, json.dumps({"id": "nocaption", "image": "img/UCM_1.tif"}))
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_messy_input_end_to_end(messy, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(smoke("score", out, "--captions", str(messy / "captions.jsonl")))
    assert rc == 3  # some rows failed (EXIT_PARTIAL)
    assert f"{SMOKE_NOTE}." in capsys.readouterr().err.splitlines()  # the smoke banner, a line of its own
    rows = _scores(out)
    assert len(rows) == 17  # one per input line, in input order
    by_id = {}
    for r in rows:
        by_id.setdefault(r["id"], r)
    assert [r["id"] for r in rows][:3] == ["ok1", "ok2", "wide"]
    errors = {r["id"]: r["error"] for r in rows}
    for good in ("ok1", "ok2", "wide", "16bit", "palette", "rgba", "gray", "long"):
        r = by_id[good]
        assert r["error"] is None, (good, r["error"])
        assert r["recon_score"] == pytest.approx(50 * (1 + r["cosine"]))
        with Image.open(out / r["reconstruction"]) as png:
            assert png.size == (r["width"], r["height"])
    assert (by_id["wide"]["width"], by_id["wide"]["height"]) == (256, 160)
    _assert_scores_are_an_independent_cosine(messy, out, [by_id["ok1"], by_id["ok2"], by_id["wide"]])
    assert by_id["long"]["truncated"] is True and by_id["ok1"]["truncated"] is False
    assert "corrupt" in errors["corrupt"] and "corrupt.jpg" in errors["corrupt"]
    assert "too small" in errors["tiny"]
    assert "empty" in errors["empty"] and "whitespace" in errors["blank"]
    assert "outside the data root" in errors["escape"]
    assert "not found" in errors["missing"]
    bad_json = rows[3]
    assert bad_json["error"].startswith("captions.jsonl:4: invalid JSON")
    assert "missing field(s) caption" in rows[5]["error"] and "captions.jsonl:6" in rows[5]["error"]
    dup = [r for r in rows if r["id"] == "ok1"][1]
    assert "duplicate id 'ok1'" in dup["error"] and dup["recon_score"] is None
    for r in rows:
        assert (r["error"] is None) == (r["recon_score"] is not None)
        assert "meaningless" in r["note"]
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["rows"] == 17 and run["counts"]["failed"] == 9
    assert run["config"]["preset"]["name"] == "smoke" and "meaningless" in run["note"]
    assert run["config"]["t2i"]["pipeline"] == "ZImagePipeline"
    assert run["provenance"]["versions"]["torch"]

    before = {p: p.read_bytes() for p in (out / "scores.jsonl", out / "run.json")}
    assert main(smoke("score", out, "--captions", str(messy / "captions.jsonl"))) == 3
    assert {p: p.read_bytes() for p in before} == before  # a finished run rerun is a no-op
    assert f"{SMOKE_NOTE}." in capsys.readouterr().err.splitlines()  # ... that still says so


def _assert_scores_are_an_independent_cosine(root: Path, out: Path, rows: list[dict]) -> None:
    """Outside value beside the consistency check: the run's encoder (run.json) embeds the input image and the
    reconstruction PNG the run saved, one image at a time, unnormalised; their cosine in float64 numpy, and
    100 * (1 + cos) / 2 by hand, is the row's score."""
    from recon_score.encoders import build_encoder
    from recon_score.images import load_image

    run = json.loads((out / "run.json").read_text())
    enc = build_encoder(run["config"]["preset"]["encoder"], device="cpu")

    def raw(img):
        return enc.encode_images([img], normalize=False).numpy()[0].astype(np.float64)

    for r in rows:
        a = raw(load_image(root / r["image"]))
        with Image.open(out / r["reconstruction"]) as png:
            b = raw(png.convert("RGB"))
        cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert r["recon_score"] == pytest.approx(100 * (1 + cos) / 2, abs=1e-3), r["id"]


def test_resume_refuses_another_configuration(messy, tmp_path):
    out = tmp_path / "run"
    args = smoke("score", out, "--captions", str(messy / "captions.jsonl"), "--limit", "2")
    assert main(args) == 0
    assert main([*args, "--steps", "3"]) == 1  # fingerprint mismatch: clear error, exit 1
    assert main([*args, "--steps", "3", "--overwrite"]) == 0


def test_csv_input(tmp_path, sample_dir):
    csv_path = tmp_path / "caps.csv"
    csv_path.write_text(
        "id,image,caption\n"
        'a,images/UCM_1.tif,"There is a piece of farmland, green."\n'
        "b,images/UCM_2.tif,too,many,fields\n"
        "c,images/UCM_3.tif,It is a piece of cropland .\n"
    )
    out = tmp_path / "run"
    rc = main(smoke("score", out, "--captions", str(csv_path), "--images", str(sample_dir)))
    rows = _scores(out)
    assert rc == 3 and [r["id"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["caption"] == "There is a piece of farmland, green." and rows[0]["error"] is None
    assert "caps.csv:3" in rows[1]["error"] and rows[2]["error"] is None
    (tmp_path / "bad.csv").write_text("path,text\nx,y\n")
    assert (
        main(
            [
                "score",
                "--preset",
                "smoke",
                "--captions",
                str(tmp_path / "bad.csv"),
                "--out",
                str(tmp_path / "r2"),
            ]
        )
        == 1
    )


def test_paper_preset_fails_clearly_offline(tmp_path, capsys):
    rc = main(["score", "--preset", "paper", "--out", str(tmp_path / "p"), "--limit", "1", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Tongyi-MAI/Z-Image" in err and "not available" in err and "--t2i-model" in err


def _env(cache: Path) -> dict:
    env = dict(os.environ)
    env.update(
        RECONSCORE_CACHE=own_cache(cache), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"
    )
    return env


def _many_captions(tmp_path: Path, sample_dir: Path, n: int) -> Path:
    words = ["farmland", "river", "forest", "road", "houses", "trees", "pond", "bridge", "meadow", "barn"]
    images = sorted(f"images/{p.name}" for p in (sample_dir / "images").iterdir())  # the bundled tiles
    rows = [
        {
            "id": f"r{i}",
            "image": images[i % len(images)],
            "caption": f"a {words[i % 10]} next to {words[(3 * i + 1) % 10]} number {i}",
        }
        for i in range(n)
    ]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "eval", *args]


def _score_in_pairs(caps: Path, images: Path) -> list[str]:
    """`score --preset smoke` of these captions in batches of 2 (the kill/resume and sharding runs)."""
    return [
        "score",
        "--preset",
        "smoke",
        "--captions",
        str(caps),
        "--images",
        str(images),
        "--batch-size",
        "2",
    ]


def test_kill_and_resume_gives_identical_output(tmp_path, sample_dir):
    """SIGKILL mid-run, restart with the same --out: no torn lines, nothing finished recomputed, same bytes."""
    caps = _many_captions(tmp_path, sample_dir, 12)
    common = [*_score_in_pairs(caps, sample_dir), "--device", "cpu"]
    # the uninterrupted reference and the run to kill start together (one core each: OMP_NUM_THREADS=1)
    ref = tmp_path / "ref"
    ref_proc = subprocess.Popen(
        _cli(*common, "--out", str(ref)),
        env=_env(tmp_path / "cache-ref"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out = tmp_path / "killed"
    env = _env(tmp_path / "cache-killed")
    proc = subprocess.Popen(
        _cli(*common, "--out", str(out)),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = out / "journal" / "rank-0.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 6:  # header + 5 rows
            break
        if proc.poll() is not None:
            pytest.fail("the run finished before it could be killed")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "scores.jsonl").exists()
    records = read_jsonl(journal)  # parses: at most a torn last line, dropped
    finished = len(records) - 1
    assert 5 <= finished < 12
    ref_proc.wait(timeout=600)
    assert (ref / "scores.jsonl").exists()

    done = subprocess.run(
        _cli(*common, "--out", str(out)), env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "scores.jsonl").read_bytes() == (ref / "scores.jsonl").read_bytes()
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["rows"] == 12
    assert run["counts"]["rendered_this_session"] <= 12 - finished + 1  # finished rows were not recomputed
    for row in _scores(out):
        with Image.open(out / row["reconstruction"]) as a, Image.open(ref / row["reconstruction"]) as b:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.multiprocess
def test_two_processes_equal_one(tmp_path, sample_dir):
    """`accelerate launch` with 2 CPU processes: chunks of the global row order sharded over the ranks (each batch
    composed as in a single-process run), per-process journals, one merged scores.jsonl with exactly the same rows,
    order, ids, captions, errors and sizes as a single-process run, and scores/pixels within the bound
    docs/runs.md states (CPU kernel selection may differ between processes, so not byte identity)."""
    caps = _many_captions(tmp_path, sample_dir, 10)
    common = _score_in_pairs(caps, sample_dir)
    single = tmp_path / "single"
    with one_thread():  # in this process, on one thread as each rank is
        assert main([*common, "--out", str(single), "--device", "cpu"]) == 0
    multi = tmp_path / "multi"
    accelerate = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "29517",
        "-m",
        "eval",
        *common,
        "--out",
        str(multi),
    ]
    r2 = subprocess.run(
        accelerate, env=_env(tmp_path / "c2"), cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert r2.returncode == 0, r2.stderr[-3000:]
    journals = sorted(p.name for p in (multi / "journal").iterdir())
    assert journals == ["invocations.jsonl", "rank-0.jsonl", "rank-1.jsonl"]
    one, two = _scores(single), _scores(multi)
    assert len(one) == len(two) == 10
    for a, b in zip(one, two):
        assert {k: v for k, v in a.items() if k not in ("recon_score", "cosine")} == {
            k: v for k, v in b.items() if k not in ("recon_score", "cosine")
        }
        assert abs(a["recon_score"] - b["recon_score"]) <= 0.01  # the bound in docs/runs.md
        with Image.open(single / a["reconstruction"]) as x, Image.open(multi / b["reconstruction"]) as y:
            assert np.abs(np.asarray(x, dtype=np.int16) - np.asarray(y, dtype=np.int16)).max() <= 2
    ranks = {p.name: [r["row"] for r in read_jsonl(p)[1:]] for p in (multi / "journal").glob("rank-*.jsonl")}
    assert ranks == {
        "rank-0.jsonl": [0, 1, 4, 5, 8, 9],
        "rank-1.jsonl": [2, 3, 6, 7],
    }  # chunk j -> rank j % 2
    run = json.loads((multi / "run.json").read_text())
    assert run["processes"] == 2 and [h["processes"] for h in run["invocations"]] == [2]
