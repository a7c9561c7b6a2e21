"""One small run of every kind `reconscore report` renders (smoke models), shared by the report tests."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from eval.cli import main
from tests.smoke_cli import evaluate, smoke

REPO = Path(__file__).resolve().parents[2]
EVIL = '<script>document.title="pwned"</script> farmland <img src=x onerror=alert(1)>'


@contextmanager
def _cwd(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _ok(argv: list[str], codes=(0,)) -> None:
    rc = main(argv)
    assert rc in codes, f"{argv[0]} exited {rc}"


def build_runs(root: Path, sample_dir: Path) -> dict[str, Path]:
    """{kind: run folder} for score, describe, correlate, n-sweep, encoders, evaluate and retrieve (and the
    scores.metrics.jsonl of `metrics add` on the score run)."""
    cpu = ["--device", "cpu"]
    caps = root / "caps.jsonl"
    rows = [
        {
            "id": "a",
            "image": "images/UCM_1.tif",
            "caption": "There is a piece of farmland .",
            "kind": "reference",
        },
        {"id": "b<b>", "image": "images/UCM_1.tif", "caption": EVIL, "kind": "distractor"},
        {"id": "c", "image": "images/UCM_2.tif", "caption": "farmland with a road"},
        {"id": "d", "image": "images/missing.tif", "caption": "nothing here"},
    ]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = {"score": root / "score"}
    _ok(
        smoke("score", runs["score"], "--captions", str(caps), "--images", str(sample_dir)),
        codes=(3,),
    )  # row d: missing image
    runs["metrics"] = root / "score" / "scores.metrics.jsonl"
    _ok(
        ["metrics", "add", str(runs["score"]), "--metrics", "clipscore", "--encoder", "smoke:open-clip", *cpu]
    )
    runs["describe"] = root / "describe"
    _ok(smoke("describe", runs["describe"], "--n", "2", "--limit", "2"))
    runs["correlate"] = root / "corr"
    example = REPO / "preference_data" / "examples" / "ranking_example.jsonl"
    _ok(
        [
            "correlate",
            "--preferences",
            str(example),
            "--format",
            "ranking",
            "--metrics",
            "bleu4,rouge,clipscore",  # clipscore on the smoke encoder: a run the banner must flag
            "--encoder",
            "smoke:open-clip",
            "--images",
            str(sample_dir),
            "--out",
            str(runs["correlate"]),
            "--device",
            "cpu",
        ],
        codes=(0, 3),
    )
    runs["n-sweep"] = root / "nsweep"
    _ok(
        ["study", "n-sweep", "--run", f"ucm={runs['describe']}", "--ns", "1,2", "--out", str(runs["n-sweep"])]
    )
    terse = root / "terse.jsonl"
    terse.write_text(
        "".join(json.dumps({"image": f"images/UCM_{i}.tif", "caption": "farm"}) + "\n" for i in (1, 2))
    )
    runs["terse"] = root / "terse"
    _ok(smoke("score", runs["terse"], "--captions", str(terse), "--images", str(sample_dir)))
    runs["encoders"] = root / "enc"
    _ok(
        [
            "study",
            "encoders",
            "--run",
            f"rich={runs['score']}",
            "--run",
            f"terse={runs['terse']}",
            "--encoders",
            "smoke:dreamsim,smoke:hf-dinov2",
            "--out",
            str(runs["encoders"]),
            *cpu,
        ]
    )
    split = root / "ucm"
    (split / "images").mkdir(parents=True)
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", split / "images" / f"{i}.tif")
    images = [
        {"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": "There is a piece of farmland ."}]}
        for i in (1, 2)
    ]
    (split / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
    model = root / "model.jsonl"
    model.write_text(
        "".join(json.dumps({"image_id": f"{i}.tif", "caption": "a farm"}) + "\n" for i in (1, 2))
    )
    runs["evaluate"] = root / "eval"
    _ok(
        evaluate(
            "ucm-captions", split, model, "bleu4,recon_score", runs["evaluate"], "--preset", "smoke", *cpu
        )
    )
    from tests.retrieval import layouts

    layouts.cirr(root / "cirr")
    pairs_path = root / "cirr" / "captions" / "cap.rc2.val.json"
    pairs = json.loads(pairs_path.read_text())
    pairs[0]["caption"] = EVIL
    pairs_path.write_text(json.dumps(pairs))
    runs["retrieve"] = root / "retrieve"
    with _cwd(root):  # a relative --root: the report must still find the images from any folder
        _ok(
            [
                "retrieve",
                "--benchmark",
                "cirr",
                "--root",
                "cirr",
                "--encoder",
                "smoke:open-clip",
                "--methods",
                "image,sum",
                "--topk",
                "2",
                "--out",
                "retrieve",
                *cpu,
            ]
        )
    return runs
