"""The bad-input catalogue (docs/bad-inputs.md): each test builds its hostile input and checks what the user
gets: one line naming the file (and line), the documented exit status, the rest of the run kept.

Exit statuses (README): 0 every row done, 2 some rows failed (their `error` says why), 1 the run could not start.
"""

import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from recon_score.errors import ReconScoreError
from tests.smoke_cli import evaluate

BAD_UTF8 = b"\xff\xfe not utf-8"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    # json.dumps escapes a lone surrogate as "\ud800": valid JSON that UTF-8 cannot encode once decoded
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _one_error_line(capsys) -> str:
    """The error, in one line; the start-up lines a command prints before it (recon_score.progress.announce:
    "[HH:MM:SS] ...") are progress, not part of it."""
    lines = capsys.readouterr().err.strip().splitlines()
    err = [line for line in lines if not re.match(r"\[\d\d:\d\d:\d\d\] ", line)]
    assert "Traceback" not in "\n".join(lines) and len(err) == 1, lines
    return err[0]


@pytest.fixture
def images(tmp_path, sample_dir) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    Image.open(sample_dir / "images" / "UCM_1.tif").save(root / "ok.png")
    (root / "corrupt.png").write_bytes(b"\x89PNG but not really")
    return root


def _score(caps: Path, out: Path, *extra: str) -> int:
    return main(["score", "--preset", "smoke", "--device", "cpu", "--no-cache", "--captions", str(caps),
                 "--out", str(out), *extra])  # fmt: skip


# --- item 5: unencodable text is a row error ---------------------------------------------------------------


def test_lone_surrogate_is_a_row_error_and_reruns_finish(images):
    caps = _write_jsonl(
        images / "caps.jsonl",
        [
            {"id": "ok", "image": "ok.png", "caption": "a farm"},
            {"id": "cap", "image": "ok.png", "caption": "a \ud800 farm"},
            {"id": "id\udc80", "image": "ok.png", "caption": "a farm"},
            {"id": "path", "image": "ok\ud800.png", "caption": "a farm"},
        ],
    )
    out = images.parent / "run"
    assert _score(caps, out) == 3
    first = (out / "scores.jsonl").read_bytes()
    rows = _jsonl(out / "scores.jsonl")
    assert [r["error"] is None for r in rows] == [True, False, False, False]
    assert rows[1]["error"].startswith(
        "caps.jsonl:2: `caption` holds text that is not valid Unicode (\\ud800"
    )
    assert rows[2]["error"].startswith("caps.jsonl:3: `id`") and rows[2]["id"] == "id\\udc80"
    assert rows[3]["error"].startswith("caps.jsonl:4: `image`")
    assert _score(caps, out) == 3 and (out / "scores.jsonl").read_bytes() == first  # the rerun is a no-op


# --- item 7: one line naming the file, exit 1, instead of a traceback -------------------------------------


@pytest.mark.parametrize("damage", ["empty", "truncated", "bad-member"])
def test_retrieve_eval_damaged_bundle(tmp_path, capsys, damage):
    rng = np.random.default_rng(0)
    unit = lambda a: (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    good = tmp_path / "good.npz"
    np.savez(good, query_image=unit(rng.normal(size=(2, 4))), query_text=unit(rng.normal(size=(2, 4))),
             database=unit(rng.normal(size=(5, 4))), positives=np.array([[0, 1], [1, 2]]),
             query_group=np.array(["a", "b"]))  # fmt: skip
    data = good.read_bytes()
    bundle = tmp_path / "bundle.npz"
    if damage == "empty":
        bundle.write_bytes(b"")
    elif damage == "truncated":
        bundle.write_bytes(data[: len(data) // 2])
    else:  # a valid zip whose member is cut short: np.load succeeds, reading the array fails
        with zipfile.ZipFile(good) as z, zipfile.ZipFile(bundle, "w") as w:
            for name in z.namelist():
                w.writestr(name, z.read(name)[:40] if name == "database.npy" else z.read(name))
    assert main(["retrieve-eval", "--bundle", str(bundle), "--method", "sum", "--json"]) == 1
    problem = (
        ": 'database' has no readable .npy header (EOF"
        if damage == "bad-member"
        else " is not a readable .npz file ("
    )
    assert _one_error_line(capsys).startswith(f"error: {bundle}{problem}")


def _describe_run(folder: Path, candidates: bytes) -> Path:
    folder.mkdir()
    (folder / "run.json").write_text(
        json.dumps({"command": "describe", "selection": {"metric": "recon_score"}, "meaningless": False})
    )
    (folder / "candidates.jsonl").write_bytes(candidates)
    return folder


def test_n_sweep_corrupt_candidates(tmp_path, capsys):
    line = json.dumps({"image_id": "a", "index": 0, "caption": "x", "error": None, "selection_score": 50.0})
    run = _describe_run(tmp_path / "rd", (line + "\n{not json\n" + line + "\n").encode())
    assert main(["study", "n-sweep", "--run", f"x={run}", "--out", str(tmp_path / "st")]) == 1
    assert "candidates.jsonl:2: invalid JSON" in _one_error_line(capsys)


@pytest.mark.parametrize("bad", ["scores-line", "run-json-list"])
def test_report_bad_run_files(tmp_path, capsys, bad):
    run = tmp_path / "run"
    run.mkdir()
    ok = {"id": "a", "image": "a.png", "caption": "x", "recon_score": 50.0, "error": None}
    if bad == "scores-line":
        record = {"command": "score", "images_root": str(tmp_path), "meaningless": False}
        (run / "run.json").write_text(json.dumps(record))
        (run / "scores.jsonl").write_text(json.dumps(ok) + "\n[1, 2\n")
        expect = "scores.jsonl:2: invalid JSON"
    else:
        (run / "run.json").write_text("[1, 2]")
        expect = "run.json: expected a JSON object, got list"
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 1
    assert expect in _one_error_line(capsys)


def test_score_corrupt_middle_journal_line(images, capsys):
    caps = _write_jsonl(
        images / "caps.jsonl", [{"image": "ok.png", "caption": f"farm {i}"} for i in range(2)]
    )
    out = images.parent / "run"
    assert _score(caps, out) == 0
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3  # header + 2 rows
    journal.write_bytes(lines[0] + b'{"row": 0, "trunc\n' + lines[2])
    (out / "scores.jsonl").unlink()
    capsys.readouterr()
    assert _score(caps, out) == 1
    assert "rank-0.jsonl:2: not a valid JSON line" in _one_error_line(capsys)
    assert _score(caps, out, "--overwrite") == 0  # the documented way out


def _generic_dataset(root: Path) -> Path:
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (32, 32), (10, 90, 30)).save(root / "images" / "a.png")
    return _write_jsonl(root / "ann.jsonl", [{"image": "a.png", "references": ["a green field"]}])


def test_evaluate_captions_not_utf8(tmp_path, capsys):
    ann = _generic_dataset(tmp_path / "ds")
    caps = tmp_path / "caps.jsonl"
    caps.write_bytes(
        b'{"image_id": "a.png", "caption": "ok"}\n{"image_id": "a.png", "caption": "' + BAD_UTF8 + b'"}\n'
    )
    args = evaluate("generic", tmp_path / "ds", caps, "bleu1", tmp_path / "ev", "--annotations", str(ann))  # fmt: skip
    assert main(args) == 1
    assert f"{caps}:2: not valid utf-8 text (byte 0xff at column 35)" in _one_error_line(capsys)


def test_describe_references_checked_before_any_vlm_work(tmp_path, sample_dir):
    from describer.inputs import discover_images

    Image.open(sample_dir / "images" / "UCM_1.tif").save(tmp_path / "x.png")
    lst = _write_jsonl(
        tmp_path / "list.jsonl",
        [
            {"id": "ok", "image": "x.png", "references": ["a farm", "fields"]},
            {"id": "string", "image": "x.png", "references": "a farm"},
            {"id": "numbers", "image": "x.png", "references": [1, 2]},
            {"id": "surrogate", "image": "x.png", "references": ["a \ud800"]},
        ],
    )
    items = discover_images(lst)
    assert items[0].error is None and items[0].references == ["a farm", "fields"]
    for item, line in zip(items[1:], (2, 3, 4)):  # no path: run_describe never sends them to the VLM
        assert item.path is None and item.error.startswith(f"list.jsonl:{line}: ")
    assert "must be a list of non-empty strings" in items[1].error and "not valid Unicode" in items[3].error


def test_non_utf8_txt_list(tmp_path, capsys):
    from describer.inputs import discover_images

    lst = tmp_path / "list.txt"
    lst.write_bytes(b"a.png\nb" + BAD_UTF8 + b".png\n")
    with pytest.raises(ReconScoreError, match=r"list.txt:2: not valid utf-8 text \(byte 0xff at column 2\)"):
        discover_images(lst)
    args = ["describe", "--preset", "smoke", "--inputs", str(lst), "--out", str(tmp_path / "rd")]
    assert main(args) == 1 and "list.txt:2" in _one_error_line(capsys)


# --- item 9: one text policy: never a silent U+FFFD ----------------------------------------------------------


@pytest.mark.parametrize("command", ["score", "generate", "correlate"])
def test_invalid_utf8_names_file_and_line(images, capsys, command):
    caps = images / "caps.jsonl"
    caps.write_bytes(
        b'{"image": "ok.png", "caption": "a farm"}\n{"image": "ok.png", "caption": "' + BAD_UTF8 + b'"}\n'
    )
    out = str(images.parent / "out")
    if command == "score":
        rc = _score(caps, Path(out))
    elif command == "generate":
        rc = main(
            ["generate", "paraphrase", "--captions", str(caps), "--model", "smoke:qwen3-text", "--out", out]
        )
    else:
        rc = main(
            [
                "correlate",
                "--preferences",
                str(caps),
                "--format",
                "ranking",
                "--metrics",
                "bleu1",
                "--out",
                out,
            ]
        )
    assert rc == 1
    assert "caps.jsonl:2: not valid utf-8 text (byte 0xff at column 33)" in _one_error_line(capsys)


def test_bom_is_dropped_everywhere(tmp_path):
    """Excel writes a BOM; it must not glue itself to the first column name (xView2-CIR's `image`)."""
    from retrieval.datasets import load_benchmark
    from tests.retrieval import layouts

    root = layouts.xview2(tmp_path / "xv")
    table = root / "xview2_cir.csv"
    table.write_bytes(b"\xef\xbb\xbf" + table.read_bytes())
    assert len(load_benchmark("xview2-cir", root).queries) == 6


# --- item 10: describe inputs -------------------------------------------------------------------------------


def test_describe_ids_from_relative_paths_and_symlinks_refused(tmp_path, sample_dir, monkeypatch):
    from describer.inputs import discover_images

    root = tmp_path / "imgs"
    for sub in ("a", "b"):
        (root / sub).mkdir(parents=True)
        Image.open(sample_dir / "images" / "UCM_1.tif").save(root / sub / "x.png")
    lst = tmp_path / "imgs" / "list.txt"
    lst.write_text(f"a/x.png\nb/x.png\n{root / 'b' / 'x.png'}\n")
    items = discover_images(lst)
    assert [i.id for i in items] == ["a/x", "b/x", "b/x"]
    assert items[0].error is None and items[1].error is None  # same file name, different folders
    assert items[2].error == "list.txt:3: duplicate id 'b/x' (first on line 2)"  # the same file, absolute

    outside = tmp_path / "secret.png"
    Image.open(sample_dir / "images" / "UCM_2.tif").save(outside)
    os.symlink(outside, root / "a" / "link.png")
    monkeypatch.delenv(
        "RECONSCORE_FOLLOW_SYMLINKS", raising=False
    )  # the project's policy: links are followed
    by_id = {i.id: i for i in discover_images(root)}
    assert by_id["a/x.png"].error is None and by_id["a/link.png"].path == outside.resolve()
    monkeypatch.setenv("RECONSCORE_FOLLOW_SYMLINKS", "0")  # `reconscore --no-follow-symlinks describe ...`
    by_id = {i.id: i for i in discover_images(root)}
    assert by_id["a/x.png"].error is None
    assert by_id["a/link.png"].path is None and "outside the data root" in by_id["a/link.png"].error


# --- item 11: generate counts every row it cannot send ------------------------------------------------------


def test_generate_null_and_empty_captions_are_counted_errors(tmp_path, capsys, sample_dir):
    rows = [{"id": f"s{i}", "image": "x.png", "caption": f"a farm with {i} trees"} for i in range(5)]
    rows[1]["caption"], rows[3]["caption"] = None, "  "
    caps = _write_jsonl(tmp_path / "caps.jsonl", rows)
    out = tmp_path / "gen"
    args = ["generate", "paraphrase", "--captions", str(caps), "--model", "smoke:qwen3-text", "--device", "cpu",
            "--max-new-tokens", "4", "--out", str(out)]  # fmt: skip
    assert main(args) == 3
    got = _jsonl(out / "generated.jsonl")
    assert [r["source_id"] for r in got] == ["s0", "s1", "s2", "s3", "s4"]
    assert got[1]["error"] == "caps.jsonl:2: caption is missing or null; nothing to send to the LLM"
    assert got[3]["error"] == "caps.jsonl:4: caption is empty; nothing to send to the LLM"
    assert (
        "instruction" in got[0] and "instruction" not in got[1] and "instruction" not in got[3]
    )  # never sent
    assert "5 rows (" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    assert run["rows"] == 5 and run["failed"] >= 2


# --- items 12 and 13: deterministic errors that name file:line; README promises --------------------------------


def test_errors_name_file_line_and_two_runs_are_byte_identical(images):
    Image.new("RGB", (8, 8)).save(images / "tiny.png")
    caps = _write_jsonl(
        images / "caps.jsonl",
        [
            {"id": "ok", "image": "ok.png", "caption": "a farm"},
            {"id": "corrupt", "image": "corrupt.png", "caption": "a farm"},
            {"id": "tiny", "image": "tiny.png", "caption": "a farm"},
        ],
    )
    outs = [images.parent / "run1", images.parent / "run2"]
    assert [_score(caps, out) for out in outs] == [3, 3]
    rows = _jsonl(outs[0] / "scores.jsonl")
    assert rows[1]["error"].startswith("caps.jsonl:2: image 'corrupt.png' is corrupt")
    assert rows[2]["error"].startswith("caps.jsonl:3: ")
    assert " at 0x" not in rows[1]["error"]
    assert (outs[0] / "scores.jsonl").read_bytes() == (outs[1] / "scores.jsonl").read_bytes()


def test_caption_over_20000_characters_is_scored_truncated(images):
    """README: over-long captions are scored with a warning and `truncated: true` (no length refusal)."""
    caps = _write_jsonl(images / "caps.jsonl", [{"image": "ok.png", "caption": "farmland " * 3000}])
    out = images.parent / "run"
    with pytest.warns(UserWarning):
        assert _score(caps, out) == 0
    (row,) = _jsonl(out / "scores.jsonl")
    assert len(row["caption"]) > 20_000 and row["truncated"] is True and row["recon_score"] is not None


def test_absolute_paths_inside_the_root_tsv_and_csv(tmp_path):
    from recon_score.inputs import read_caption_rows

    root = tmp_path / "root"
    root.mkdir()
    (root / "a.png").write_bytes(b"")
    tsv = root / "caps.tsv"
    tsv.write_text(
        "image\tcaption\n"
        f"{root / 'a.png'}\ta farm, with fields\n"  # absolute, inside the root: accepted; a comma in the text
        f"{tmp_path / 'a.png'}\toutside\n",
        encoding="utf-8",
    )
    rows = read_caption_rows(tsv)
    assert rows[0].error is None and rows[0].caption == "a farm, with fields"
    assert rows[0].image_path == (root / "a.png").resolve()
    assert rows[1].error.startswith("caps.tsv:3: image path") and "outside the data root" in rows[1].error


def test_out_that_is_a_file_cannot_start(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("not a folder")
    assert main(["score", "--preset", "smoke", "--out", str(out)]) == 1
    assert (
        _one_error_line(capsys)
        == f"error: --out {out} is a file, not a folder; choose another --out (a run folder)"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["n-sweep", "--run", "bad"], "error: --run: expected KEY=VALUE, got 'bad'"),
        (
            ["n-sweep", "--run", "a=x", "--run", " a =y"],
            "error: --run: key 'a' given twice ('a=x' and ' a =y'); give each key once",
        ),
        (["n-sweep", "--run", "a= "], "error: --run: expected KEY=VALUE, got 'a= ' (an empty VALUE)"),
        (
            ["models", "--dataset", "ucm", "--captions", "A@ucm=x"],
            "error: --dataset: expected KEY=VALUE, got 'ucm'",
        ),
    ],
)
def test_a_study_option_without_its_label_is_one_line_and_writes_nothing(args, said, tmp_path, capsys):
    """LABEL=VALUE options of the studies: a malformed or repeated label is one error line, before any folder,
    and a usage error (exit 2) like every other command's KEY=VALUE options (recon_score.key_values)."""
    out = tmp_path / "study"
    assert main(["study", *args, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [said]
    assert not out.exists()
