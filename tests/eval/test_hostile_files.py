"""Hostile files (docs/bad-inputs.md, "Hostile files" rows): every test builds its input in a temporary folder,
and none may hang: each runs under an alarm, and what could read forever runs in a subprocess with a timeout.

`tests/hostile.sh` runs this file with a virtual-memory limit and its temporary folder on a 3 MB tmpfs
(docs/development.md); it must pass there as it does here.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.cli import main
from recon_score.errors import EXIT_PARTIAL, EmptyInputError, ImageLoadError, InputError, ReconScoreWarning
from recon_score.images import MAX_PIXELS, load_image
from recon_score.inputs import read_caption_rows
from recon_score.textfiles import TextFileError, csv_dicts
from tests.smoke_cli import smoke
from tests.timeouts import no_hang

REPO = Path(__file__).resolve().parents[2]
SPARSE_SIZE = 16 * 2**30  # a 16 GiB file that takes no disk space


def _png(path: Path, size=(24, 20), mode="RGB") -> Path:
    rng = np.random.default_rng(0)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    Image.fromarray(arr[..., 0] if channels == 1 else arr, mode).save(path)
    return path


def _sparse(path: Path, size: int = SPARSE_SIZE) -> Path:
    """A valid small PNG followed by `size` bytes of holes: nothing is written to disk."""
    _png(path)
    with open(path, "r+b") as f:
        f.truncate(size)
    return path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _score(caps: Path, out: Path, *extra: str) -> int:
    return main(smoke("score", out, "--no-cache", "--captions", str(caps), *extra))


# --- files that are not regular files, paths that cannot be opened ----------------------------------------


def test_score_refuses_fifos_devices_and_unopenable_paths(tmp_path):
    """One score run over every path that cannot be an image file: each is its own row error naming the path
    as given, nothing is opened or hashed (a FIFO or /dev/zero would be read forever), the good row is scored."""
    root = tmp_path / "data"
    root.mkdir()
    _png(root / "ok.png")
    os.mkfifo(root / "pipe.png")
    os.symlink("/dev/zero", root / "zero.png")
    os.symlink("loop2.png", root / "loop1.png")
    os.symlink("loop1.png", root / "loop2.png")
    _sparse(root / "huge.png")
    rows = [
        {"id": "ok", "image": "ok.png", "caption": "a farm"},
        {"id": "fifo", "image": "pipe.png", "caption": "a farm"},
        {"id": "zero", "image": "zero.png", "caption": "a farm"},
        {"id": "loop", "image": "loop1.png", "caption": "a farm"},
        {"id": "nul", "image": "ok\x00.png", "caption": "a farm"},
        {"id": "long", "image": "x" * 300 + ".png", "caption": "a farm"},
        {"id": "space", "image": "ok.png ", "caption": "a farm"},
        {"id": "huge", "image": "huge.png", "caption": "a farm"},
        {"id": "zero-width", "image": "ok.png", "caption": "\u200b\u200c\ufeff"},
        {"id": "nul-caption", "image": "ok.png", "caption": "\x00 \x00"},
    ]
    caps = root / "caps.jsonl"
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with no_hang(300):
        assert _score(caps, tmp_path / "run") == EXIT_PARTIAL
    errors = {r["id"]: r["error"] for r in _jsonl(tmp_path / "run" / "scores.jsonl")}
    assert errors["ok"] is None
    assert errors["fifo"] == "caps.jsonl:2: image path 'pipe.png' is a FIFO (named pipe), not a regular file"
    assert errors["zero"] == "caps.jsonl:3: image path 'zero.png' is a character device, not a regular file"
    assert errors["loop"] == "caps.jsonl:4: image path 'loop1.png' is a symlink loop"
    assert errors["nul"] == "caps.jsonl:5: image path 'ok\\x00.png' holds a NUL byte"
    assert errors["long"].startswith(f"caps.jsonl:6: image path '{'x' * 300}.png' is too long")
    assert errors["space"] == (
        "caps.jsonl:7: image 'ok.png ' not found (the path as given starts or ends with white space)"
    )
    assert errors["huge"].startswith(
        "caps.jsonl:8: image path 'huge.png' is 16.0 GiB on disk, more than 8 GiB"
    )
    for key, line in (("zero-width", 9), ("nul-caption", 10)):
        assert errors[key].startswith(f"caps.jsonl:{line}: caption has no visible character"), errors[key]


def test_describe_list_refuses_fifos_and_devices(tmp_path):
    """`describe --inputs list.txt`: the FIFO and the /dev/zero link are row errors when the list is read, so
    the run never hashes them; a trailing space is part of the path."""
    from describer.inputs import discover_images

    _png(tmp_path / "ok.png")
    _png(tmp_path / "b.png")
    os.mkfifo(tmp_path / "pipe.png")
    os.symlink("/dev/zero", tmp_path / "zero.png")
    (tmp_path / "list.txt").write_text("ok.png\npipe.png\nzero.png\nb.png \n", encoding="utf-8")
    with no_hang(30):
        items = discover_images(tmp_path / "list.txt")
    assert [i.error for i in items] == [
        None,
        "list.txt:2: image path 'pipe.png' is a FIFO (named pipe), not a regular file",
        "list.txt:3: image path 'zero.png' is a character device, not a regular file",
        None,
    ]
    assert items[3].image == "b.png " and items[3].path == tmp_path / "b.png "  # not b.png
    with pytest.raises(ImageLoadError, match=r"'b.png ' not found \(the path as given"):
        load_image(items[3].path, name=items[3].image)


def test_load_image_refuses_a_fifo_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    with no_hang(10), pytest.raises(ImageLoadError, match="is a FIFO"):
        load_image(tmp_path / "pipe.png")
    with no_hang(10), pytest.raises(ImageLoadError, match="is a character device"):
        load_image("/dev/zero")


# --- the header and the declared size first ------------------------------------------------------------------

_READ_UNDER_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from recon_score.images import load_image
print(load_image(sys.argv[1]).size)
"""


def test_a_sparse_png_is_not_read_whole(tmp_path):
    """A 1 GiB file (a small PNG and holes) is read up to its IEND chunk: under a 1 GiB address-space limit
    reading it whole would fail. A 16 GiB one is refused from its size before anything reads it."""
    path = _sparse(tmp_path / "sparse.png", 2**30)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    limit = str(2**30)
    out = subprocess.run([sys.executable, "-c", _READ_UNDER_LIMIT, str(path), limit],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "(24, 20)"
    with no_hang(10), pytest.raises(ImageLoadError, match=r"is 16.0 GiB on disk, more than 8 GiB"):
        load_image(_sparse(tmp_path / "huge.png"))


def test_the_pixel_limit_is_checked_from_the_header(tmp_path):
    """One ceiling on every path (PIL's own, 178,956,970 pixels): an 8-bit PNG, a 16-bit PNG and a TIFF that
    declare more are refused from the header; nothing is decoded."""
    import struct
    import zlib

    def png(name: str, width: int, height: int, depth: int) -> Path:
        ihdr = struct.pack(">IIBBBBB", width, height, depth, 2, 0, 0, 0)
        chunk = lambda kind, body: (  # noqa: E731
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )
        path = tmp_path / name
        path.write_bytes(
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")
        )
        return path

    side = 13_400  # 179.56 MP, just over the limit
    assert side * side > MAX_PIXELS > (side - 100) ** 2
    for path in (png("big8.png", side, side, 8), png("big16.png", side, side, 16)):
        with no_hang(10), pytest.raises(ImageLoadError, match=f"more than {MAX_PIXELS:,}"):
            load_image(path)


def test_rgb_nir_tiff_fourth_band_is_data_not_alpha(tmp_path):
    """tifffile tags any 4th sample of an RGB TIFF as unassociated alpha; an RGB+NIR product's NIR values lie
    far below 65535, so compositing would blank the image. Such a band is read as data (warning naming file and
    band); --bands still shows it; a real 0/max mask keeps the alpha rule."""
    import tifffile

    rng = np.random.default_rng(1)
    rgb = rng.integers(200, 4000, (32, 32, 3)).astype(np.uint16)
    nir = rng.integers(500, 3000, (32, 32, 1)).astype(np.uint16)
    path = tmp_path / "rgbnir.tif"
    tifffile.imwrite(
        path, np.concatenate([rgb, nir], axis=-1), photometric="rgb", extrasamples=["unassalpha"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = np.asarray(load_image(path, name="rgbnir.tif"))
    message = " ".join(str(w.message) for w in caught if issubclass(w.category, ReconScoreWarning))
    assert "image 'rgbnir.tif': band 4 is tagged as unassociated alpha" in message
    plain = tmp_path / "rgb.tif"
    tifffile.imwrite(plain, rgb, photometric="rgb")
    assert np.array_equal(out, np.asarray(load_image(plain)))  # bands 1-3, as if there were no 4th band
    assert out.mean() > 100
    assert np.asarray(load_image(path, bands=(4, 3, 2))).shape == (32, 32, 3)

    mask = np.where(np.arange(32)[:, None] < 16, 65535, 0).repeat(32, axis=1).astype(np.uint16)[..., None]
    alpha = tmp_path / "alpha.tif"
    tifffile.imwrite(
        alpha, np.concatenate([rgb, mask], axis=-1), photometric="rgb", extrasamples=["unassalpha"]
    )
    masked = np.asarray(load_image(alpha))
    assert masked[16:].max() == 0 and masked[:16].mean() > 50  # the transparent half stays black


@pytest.mark.parametrize("reader", ["eo", "pil"])
@pytest.mark.parametrize("low, high", [(30, 230), (140, 250), (5, 90)])
def test_rgb_nir_uint8_tiff_fourth_band_is_data(tmp_path, low, high, reader):
    """An 8-bit RGB+NIR TIFF (tifffile writes the 4th sample as unassociated alpha): dark, mid or bright NIR is
    a data band (warning naming the file), not a mask that dims the image; a 0/255 mask with soft edges keeps
    the alpha rule; --bands still chooses."""
    import tifffile

    rng = np.random.default_rng(3)
    rgb = rng.integers(60, 180, (32, 32, 3)).astype(np.uint8)
    nir = rng.integers(low, high, (32, 32, 1)).astype(np.uint8)
    path = tmp_path / "rgbnir8.tif"
    tifffile.imwrite(path, np.concatenate([rgb, nir], axis=-1), photometric="rgb")
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].extrasamples == (2,)  # tifffile's tag: unassociated alpha
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = np.asarray(load_image(path, name="rgbnir8.tif", reader=reader))
    assert np.array_equal(out, rgb)
    if reader == "eo":  # the "pil" reader is the authors' convert("RGB"), which drops the 4th band anyway
        message = " ".join(str(w.message) for w in caught if issubclass(w.category, ReconScoreWarning))
        assert "image 'rgbnir8.tif': band 4 is tagged as unassociated alpha but is not a mask" in message
    false_colour = np.asarray(load_image(path, bands=(4, 3, 2), reader=reader))
    assert np.array_equal(false_colour, np.concatenate([nir, rgb[..., 2:3], rgb[..., 1:2]], axis=-1))

    mask = np.where(np.arange(32)[:, None] < 16, 255, 0).repeat(32, axis=1).astype(np.uint8)
    mask[15:17] = 128  # soft at its edge
    alpha = tmp_path / "mask8.tif"
    tifffile.imwrite(alpha, np.concatenate([rgb, mask[..., None]], axis=-1), photometric="rgb")
    masked = np.asarray(load_image(alpha, reader="eo"))
    assert masked[17:].max() == 0 and np.array_equal(masked[:15], rgb[:15])


# --- parsers -------------------------------------------------------------------------------------------------


def test_json_lines_too_deep_too_long_or_not_objects_are_row_errors(tmp_path):
    caps = tmp_path / "caps.jsonl"
    _png(tmp_path / "ok.png")
    lines = [
        json.dumps({"image": "ok.png", "caption": "a farm"}),
        "[" * 100_000 + "]" * 100_000,
        '{"image": "ok.png", "caption": "a farm", "n": ' + "9" * 5000 + "}",
        "[1, 2]",
        "null",
        json.dumps({"image": "ok.png", "caption": "a road"}),
    ]
    caps.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with no_hang(30):
        rows = read_caption_rows(caps)
    assert [r.error for r in rows] == [
        None,
        "caps.jsonl:2: JSON nested too deeply (thousands of [ or {); not a record",
        "caps.jsonl:3: JSON holds a number that cannot be read (Exceeds the limit (4300 digits) for integer "
        "string conversion: value has 5000 digits)",
        "caps.jsonl:4: expected a JSON object, got list",
        "caps.jsonl:5: expected a JSON object, got NoneType",
        None,
    ]


def test_ranking_file_too_deep_names_the_line(tmp_path):
    """`correlate --format ranking`: a line nested 100k deep (or with a 5,000-digit number) is an error naming
    the file and line, not a RecursionError."""
    from eval.preferences import load_preferences
    from recon_score.textfiles import TextFileError

    cands = [{"caption": "x", "rank": 1}, {"caption": "y", "rank": 2}]
    good = {"image": "a.png", "references": ["a farm"], "candidates": cands}
    for bad, why in (("[" * 100_000 + "]" * 100_000, "nested too deeply"), ("9" * 5000, "4300 digits")):
        path = tmp_path / "ranking.jsonl"
        path.write_text(json.dumps(good) + "\n" + bad + "\n", encoding="utf-8")
        with no_hang(30), pytest.raises(TextFileError, match=f"ranking.jsonl:2: .*{why}"):
            load_preferences(path, "ranking")


def test_csv_unbalanced_quote_costs_one_row_and_tsv_is_literal(tmp_path):
    _png(tmp_path / "a.png")
    csv_path = tmp_path / "caps.csv"
    csv_path.write_text('id,image,caption\n1,a.png,"big trees\n2,a.png,a farm\n3,a.png,"a road"\n')
    rows = read_caption_rows(csv_path)
    assert [(r.id, r.line, r.caption) for r in rows[1:]] == [("2", 3, "a farm"), ("3", 4, "a road")]
    assert rows[0].error.startswith("caps.csv:2: malformed CSV")

    tsv = tmp_path / "caps.tsv"
    tsv.write_text('id\timage\tcaption\n1\ta.png\t"big" trees\n2\ta.png\t"unbalanced\n3\ta.png\ta farm\n')
    assert [r.caption for r in read_caption_rows(tsv)] == ['"big" trees', '"unbalanced', "a farm"]
    errors: list = []  # asked for quoting: the same file is malformed CSV on lines 2 and 3
    assert [r["caption"] for _, r in csv_dicts(tsv, quoted=True, errors=errors)[1]] == ["a farm"]
    assert [line for line, _ in errors] == [2, 3]


def test_duplicate_columns_and_long_csv_fields(tmp_path):
    dup = tmp_path / "dup.csv"
    dup.write_text("id,image,caption,caption\n1,a.png,x,y\n")
    with pytest.raises(TextFileError, match=r"dup.csv:1: column 'caption' appears twice in the header"):
        read_caption_rows(dup)
    _png(tmp_path / "a.png")
    long = tmp_path / "long.csv"
    caption = "a farm " * 30_000  # 210,000 characters: over the csv module's default field limit
    long.write_text(f'id,image,caption\n1,a.png,"{caption}"\n2,a.png,"x" y\n3,a.png,a road\n')
    rows = read_caption_rows(long)
    assert rows[0].caption == caption and rows[2].caption == "a road"
    assert rows[1].error.startswith("long.csv:3: malformed CSV")  # the right line, after the long field


def test_automatic_ids_never_collide_with_explicit_ones(tmp_path):
    _png(tmp_path / "a.png")
    caps = tmp_path / "caps.jsonl"
    rows = [{"image": "a.png", "caption": "x"}, {"id": "0", "image": "a.png", "caption": "y"}]
    caps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_caption_rows(caps)
    assert [(r.id, r.error) for r in got] == [("line1", None), ("0", None)]

    from describer.inputs import discover_images

    lst = tmp_path / "list.jsonl"
    lst.write_text(json.dumps({"image": "a.png"}) + "\n" + json.dumps({"id": "a", "image": "a.png"}) + "\n")
    items = discover_images(lst)
    assert [(i.id, i.error) for i in items] == [("a~line1", None), ("a", None)]


def test_empty_inputs_say_so_and_exit_with_the_failed_rows_status(tmp_path, capsys):
    empty, header = tmp_path / "empty.jsonl", tmp_path / "header.csv"
    empty.write_text("")
    header.write_text("id,image,caption\n")
    for path, words in ((empty, "no data lines"), (header, "a header and nothing else")):
        with pytest.raises(EmptyInputError, match=words):
            read_caption_rows(path)
        assert _score(path, tmp_path / f"run-{path.stem}") == EXIT_PARTIAL
        err = capsys.readouterr().err.strip()
        assert err == f"error: {path}: no rows ({words}); nothing to do"
    lst = tmp_path / "list.txt"
    lst.write_text("# nothing\n\n")
    out = tmp_path / "rd"
    assert main(["describe", "--preset", "smoke", "--inputs", str(lst), "--out", str(out)]) == EXIT_PARTIAL
    assert "no images listed" in capsys.readouterr().err
    folder = tmp_path / "nothing"  # an empty folder: the same status as an empty list
    (folder / "notes").mkdir(parents=True)
    (folder / "readme.txt").write_text("no pictures here\n")
    out = tmp_path / "rf"
    assert main(["describe", "--preset", "smoke", "--inputs", str(folder), "--out", str(out)]) == EXIT_PARTIAL
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --inputs {folder}: no images (") and err.endswith(
        "under it; nothing to do"
    )


# --- commands: usage errors and reasons -------------------------------------------------------------------


def _bundle(path: Path, *, queries: int = 2, positives=None) -> Path:
    eye = np.eye(4, dtype=np.float32)
    np.savez(
        path,
        query_image=eye[:queries],
        query_text=eye[:queries],
        database=eye,
        positives=np.array(
            positives if positives is not None else [[0, 0], [1, 1]][:queries], np.int64
        ).reshape(-1, 2),
        query_group=np.array(["g"] * queries, dtype=str),
    )
    return path


def test_retrieve_eval_bad_bundles(tmp_path, capsys):
    def run(bundle: Path) -> str:
        assert main(["retrieve-eval", "--bundle", str(bundle), "--method", "sum"]) == 1
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        return err

    assert "'query_image' has 0 rows: no queries to evaluate" in run(
        _bundle(tmp_path / "zero.npz", queries=0)
    )
    text = tmp_path / "text.npz"
    text.write_text("query_image,query_text\n")
    err = run(text)
    assert "is not a .npz file (it starts with b'query_'" in err and "pickle" not in err
    err = run(_bundle(tmp_path / "neg.npz", positives=[[0, 0], [1, -3]]))
    assert "positives[:, 1] must be database indices in [0, 4), got -3 (row 1" in err


def test_prompt_template_without_caption_is_a_usage_error(tmp_path, capsys):
    for bad in ("{caption", "no placeholder"):
        args = ["score", "--preset", "smoke", "--prompt-template", bad, "--out", str(tmp_path / "r")]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "Invalid value for '--prompt-template'" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_correlate_says_why_tau_is_nan():
    import pandas as pd

    from eval.kendall import correlate

    table = pd.DataFrame(
        {
            "image": ["a", "a", "b", "b"],
            "candidate": ["x", "y", "x", "y"],
            "judgment": [3.0, 3.0, 3.0, 3.0],
            "judgment_kind": ["score"] * 4,
        }
    )
    out = correlate(table, {"m": np.array([1.0, 2.0, 3.0, 4.0])}, n_boot=0)
    assert np.isnan(out.tau_b[0]) and "every human judgment is the same (3)" in out.note[0]
    table["judgment"] = [1.0, 2.0, 3.0, 4.0]
    out = correlate(table, {"flat": np.ones(4), "ok": np.arange(4.0)}, n_boot=0)
    assert "the metric gives every row the same score (1)" in out.note[0] and out.note[1] == ""
    out = correlate(table.iloc[:1], {"m": np.ones(1)}, n_boot=0)
    assert out.note[0] == "tau is NaN: 1 usable row(s), it needs at least 2"


def test_input_errors_are_input_errors():
    """Path problems from the reader are InputError (row errors), never OSError or RuntimeError."""
    assert issubclass(ImageLoadError, InputError)
    assert resource.getrlimit(resource.RLIMIT_AS)  # the module is importable where the limit is set


# --- values that used to be read silently wrong ----------------------------------------------------------------


def test_all_nan_or_nodata_rasters_are_refused_not_scored_black(tmp_path):
    """A float TIFF of only NaN (or only GDAL nodata) has nothing to score: a clear error naming the file,
    where it used to become a black image; one finite pixel is data."""
    import tifffile

    tifffile.imwrite(tmp_path / "nan.tif", np.full((16, 16), np.nan, np.float32))
    tifffile.imwrite(tmp_path / "inf3.tif", np.full((16, 16, 3), np.inf, np.float32), photometric="rgb")
    tifffile.imwrite(
        tmp_path / "nodata.tif",
        np.full((16, 16), -9999, np.int16),
        extratags=[(42113, "s", 0, "-9999", True)],
    )
    for name, what in (
        ("nan", "NaN or infinite"),
        ("inf3", "NaN or infinite"),
        ("nodata", r"-9999 \(nodata\)"),
    ):
        with pytest.raises(ImageLoadError, match=rf"image '{name}\.tif' holds no data: .* is .*{what}"):
            load_image(tmp_path / f"{name}.tif", name=f"{name}.tif")
    one = np.full((16, 16), np.nan, np.float32)
    one[3, 3] = 0.5
    tifffile.imwrite(tmp_path / "one.tif", one)
    assert np.asarray(load_image(tmp_path / "one.tif")).shape == (16, 16, 3)


def test_duplicate_json_keys_and_ids_that_str_would_change_are_row_errors(tmp_path):
    """A JSON line naming `caption` twice (json.loads keeps the second silently), an id of 1e400 (read as inf),
    1.50 or true: row errors naming file:line; a whole-number id and a quoted one are kept as written."""
    _png(tmp_path / "ok.png")
    lines = [
        '{"image": "ok.png", "caption": "a farm", "caption": "a road"}',
        '{"id": 1e400, "image": "ok.png", "caption": "a farm"}',
        '{"id": 1.50, "image": "ok.png", "caption": "a farm"}',
        '{"id": true, "image": "ok.png", "caption": "a farm"}',
        '{"id": "1e400", "image": "ok.png", "caption": "a farm"}',
        '{"id": 12, "image": "ok.png", "caption": "a farm", "meta": {"k": 1, "k": 2}}',
        '{"id": 13, "image": "ok.png", "caption": "a farm"}',
    ]
    caps = tmp_path / "caps.jsonl"
    caps.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = read_caption_rows(caps)
    assert rows[0].error == "caps.jsonl:1: key 'caption' appears twice in one JSON object; keep one"
    assert rows[1].error.startswith(
        "caps.jsonl:2: `id` must be text or a whole number, got float (read as inf)"
    )
    assert rows[2].error.startswith(
        "caps.jsonl:3: `id` must be text or a whole number, got float (read as 1.5)"
    )
    assert rows[3].error.startswith("caps.jsonl:4: `id` must be text or a whole number, got bool")
    assert (rows[4].id, rows[4].error) == ("1e400", None)
    assert rows[5].error == "caps.jsonl:6: key 'k' appears twice in one JSON object; keep one"
    assert (rows[6].id, rows[6].error) == ("13", None)


def test_duplicate_keys_in_a_preference_file_name_the_line(tmp_path):
    from preference_data.ranking import load_ranking
    from recon_score.textfiles import TextFileError

    path = tmp_path / "rank.jsonl"
    cand = '{"caption": "a", "rank": 1}, {"caption": "b", "rank": 2, "rank": 1}'
    path.write_text('{"image": "x.png", "candidates": [' + cand + "]}\n", encoding="utf-8")
    with pytest.raises(TextFileError, match=r"rank\.jsonl:1: key 'rank' appears twice"):
        load_ranking(path)
