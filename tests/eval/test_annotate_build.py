"""`annotate build --candidates` from `evaluate` runs, several sources merged per image, and each bad source
told in one line before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from eval.cli import main
from tests.eval.annotate_helpers import SAMPLE
from tests.smoke_cli import evaluate

REFS = {1: "There is a piece of farmland .", 2: "Many green trees beside a river ."}


def _evaluate(root: Path, split: Path, label: str, captions: dict[int, str]) -> Path:
    model = root / f"{label}.jsonl"
    model.write_text(
        "".join(json.dumps({"image_id": f"{i}.tif", "caption": c}) + "\n" for i, c in captions.items())
    )
    out = root / f"eval-{label}"
    assert main([*evaluate("ucm-captions", split, model, "bleu4", out), "--label", label]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A two-image UCM-style split and two evaluate runs on it (BLEU-4 only: no model to load)."""
    root = tmp_path_factory.mktemp("evaluate")
    split = root / "ucm"
    (split / "images").mkdir(parents=True)
    for i in (1, 2):
        shutil.copy(SAMPLE / "images" / f"UCM_{i}.tif", split / "images" / f"{i}.tif")
    images = [{"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": REFS[i]}]} for i in (1, 2)]
    (split / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
    return {
        "split": split,
        "blip": _evaluate(root, split, "blip", {1: "a farm", 2: "trees and a river"}),
        "git": _evaluate(root, split, "git", {1: "green farmland", 2: "a  river\tin a forest"}),
    }


def _build(out: Path, *sources: Path, extra: tuple[str, ...] = ()) -> int:
    argv = ["annotate", "build", *(a for s in sources for a in ("--candidates", str(s))), *extra]
    return main([*argv, "--out", str(out)])


def test_evaluate_runs_merge_into_one_study_and_their_digests_are_recorded(runs, tmp_path, capsys):
    """Each image's candidates are both runs' captions (model: the summary's row label), its references and
    images those of the split the runs name; a rebuild after a source changed says so."""
    out = tmp_path / "study"
    assert _build(out, runs["blip"], runs["git"]) == 0
    study = json.loads((out / "study.json").read_text())
    key = json.loads((out / "key.json").read_text())
    assert [it["image"] for it in study["items"]] == ["1.tif", "2.tif"]
    assert [it["candidates"] for it in study["items"]] == [
        ["a farm", "green farmland"],
        ["trees and a river", "a river in a forest"],
    ]
    assert [it["references"] for it in study["items"]] == [[REFS[1]], [REFS[2]]]
    assert all(key["models"][it["id"]] == ["blip", "git"] for it in study["items"])
    html = (out / "pages" / "annotator-1.html").read_text()
    assert "blip" not in html and '"git"' not in html
    record = json.loads((out / "run.json").read_text())
    assert record["images_root"] == str((runs["split"] / "images").resolve())
    per_image = runs["git"] / "per_image.jsonl"
    git = record["sources"][1]
    assert git["kind"] == "evaluate" and git["path"] == str(runs["git"].resolve())
    assert git["sha256"][str(per_image.resolve())] == hashlib.sha256(per_image.read_bytes()).hexdigest()
    assert record["upstream"] == [str(runs["blip"].resolve()), str(runs["git"].resolve())]

    capsys.readouterr()
    copy = shutil.copytree(runs["git"], tmp_path / "eval-git")
    assert _build(out, runs["blip"], copy) == 0  # a source new to this study: nothing to compare with
    assert "changed since" not in capsys.readouterr().err
    rows = (copy / "per_image.jsonl").read_text().replace("green farmland", "farmland, green")
    (copy / "per_image.jsonl").write_text(rows)
    assert _build(out, runs["blip"], copy) == 0
    err = capsys.readouterr().err
    assert f"warning: {copy} changed since the last build of {out}: new checksum" in err, err
    assert json.loads((out / "study.json").read_text())["checksum"] != study["checksum"]


def _not_a_source(runs: dict, tmp_path: Path) -> tuple[list[Path], tuple[str, ...], str]:
    study = tmp_path / "other-study"
    assert _build(study, runs["blip"], runs["git"]) == 0
    return (
        [study],
        (),
        f"--candidates {study} is a run of `annotate`; give a table, a describe run or an evaluate run",
    )


CASES = {
    "same model from two runs": lambda runs, tmp: (
        [runs["blip"], _evaluate(tmp, runs["split"], "blip", {1: "x y", 2: "y z"})],
        (),
        f"--candidates {tmp / 'eval-blip'}: model 'blip' also comes from {runs['blip']}; each model's candidates "
        "from one source",
    ),
    "one run given twice": lambda runs, tmp: (
        [runs["blip"], runs["blip"]],
        (),
        f"--candidates {runs['blip']} is given twice",
    ),
    "a folder of another kind": _not_a_source,
    "fewer candidates than --per-image": lambda runs, tmp: (
        [runs["blip"], runs["git"]],
        ("--per-image", "3"),
        f"{runs['blip'] / 'per_image.jsonl'}:1: image '1.tif' has 2 candidates; --per-image asks for 3",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_candidates_source_is_one_line_and_writes_nothing(runs, tmp_path, capsys, case):
    sources, extra, line = CASES[case](runs, tmp_path)
    capsys.readouterr()
    out = tmp_path / "study"
    assert _build(out, *sources, extra=extra) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {line}", err
    assert not out.exists()


def test_an_evaluate_run_without_its_split_recorded_is_told_to_run_again(runs, tmp_path, capsys):
    old = shutil.copytree(runs["blip"], tmp_path / "old")
    record = json.loads((old / "run.json").read_text())
    del record["split"]
    (old / "run.json").write_text(json.dumps(record))
    assert _build(tmp_path / "study", old, runs["git"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("run `reconscore evaluate` again") and err.count("\n") == 0, err


def _table(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A candidates table of (image, candidate, model) rows, images relative to the bundled sample."""
    path.write_text("image,candidate,model\n" + "".join(f"{i},{c},{m}\n" for i, c, m in rows))
    return path


def test_more_candidates_than_a_page_labels_are_refused_at_build(tmp_path, capsys):
    """A page labels an image's captions A-Z: 27 candidates once built a study no export of could be read back.
    The build refuses naming the image and the count; --per-image draws at most 26."""
    table = _table(tmp_path / "c.csv", [("images/UCM_1.tif", f"caption {k}", f"m{k}") for k in range(27)])
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(SAMPLE)]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {table}:2: image 'images/UCM_1.tif' has 27 candidates; a page shows at most 26 per image "
        "(labels A-Z): give --per-image 26 or fewer"
    ), err
    assert not (tmp_path / "s").exists()
    assert main([*argv, "--per-image", "27", "--out", str(tmp_path / "s")]) == 2
    assert not (tmp_path / "s").exists()
    assert main([*argv, "--per-image", "26", "--out", str(tmp_path / "s")]) == 0
    assert len(json.loads((tmp_path / "s" / "study.json").read_text())["items"][0]["candidates"]) == 26
    from eval.cli.annotate import MOST_SHOWN
    from preference_data.annotate import LABELS

    assert len(LABELS) == MOST_SHOWN  # the option's bound is the labels' count


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--out", "TMP/s"), "--out"),
        (("--candidates", "TMP/c.csv", "--annotators", "3"), "--candidates, --annotators"),
        (("--per-image", "2", "--title", "T"), "--per-image, --title"),
    ],
)
def test_only_contested_refuses_the_options_it_would_ignore(extra, named, tmp_path, capsys):
    """`--only contested --collected C` writes into C's study with that study's settings: a build option beside
    it was once silently ignored; now it is a usage error naming it, as --collected without --only contested is."""
    _table(tmp_path / "c.csv", [("images/UCM_1.tif", "a", "m1"), ("images/UCM_1.tif", "b", "m2")])
    argv = ["annotate", "build", "--only", "contested", "--collected", str(tmp_path)]
    assert main([*argv, *(a.replace("TMP", str(tmp_path)) for a in extra)]) == 2
    err = capsys.readouterr().err
    assert (
        f"--only contested writes into the study --collected read, with its settings: {named} would be" in err
    )
    assert not (tmp_path / "s").exists()
    build = ["annotate", "build", "--candidates", str(tmp_path / "c.csv"), "--collected", str(tmp_path)]
    assert main([*build, "--out", str(tmp_path / "s")]) == 2
    assert "--collected goes with --only contested" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
