"""`describe --inputs list.txt`: every error of a listed image, also those found when the image is read, names
the list's line; ids from file names keep their extension where two files share a stem."""

import io
import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from describer.backends import Backend, clean_generation
from describer.inputs import discover_images
from describer.presets import DESCRIBER_PRESETS
from describer.run import DescribeJob, run_describe
from describer.selection import ReconScoreSelector
from recon_score.artifact_cache import ArtifactCache
from recon_score.scorer import ReconScorer


def _png_declaring(path, width, height):
    """A PNG whose header declares width x height (no pixel data follows)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))


def _encoded(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
        buf, format=fmt
    )
    return buf.getvalue()


def _list(tmp_path):
    Image.new("RGB", (32, 32), (90, 120, 60)).save(tmp_path / "ok.png")
    Image.new("RGB", (32, 32), (9, 12, 6)).save(tmp_path / "space.png")
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "corrupt.png").write_bytes(b"not an image at all")
    _png_declaring(tmp_path / "big.png", 30_000, 30_000)
    (tmp_path / "trunc.jpg").write_bytes(_encoded("JPEG")[:300])
    (tmp_path / "trunc.png").write_bytes(_encoded("PNG")[:300])
    names = [
        "ok.png",
        "missing.png",
        "empty.png",
        "corrupt.png",
        "big.png",
        "space.png ",
        "trunc.jpg",
        "trunc.png",
    ]
    lst = tmp_path / "list.txt"
    lst.write_text("".join(n + "\n" for n in names))
    return lst


def test_ids_keep_the_extension_only_where_stems_collide(tmp_path):
    items = discover_images(_list(tmp_path))
    ids = [i.id for i in items]
    assert ids == ["ok", "missing", "empty", "corrupt", "big", "space", "trunc.jpg", "trunc.png"]
    assert all(i.error is None for i in items)  # nothing refused as a duplicate
    (tmp_path / "again.txt").write_text("trunc.jpg\ntrunc.jpg\n")  # one file twice is still a duplicate
    assert (
        discover_images(tmp_path / "again.txt")[1].error
        == "again.txt:2: duplicate id 'trunc' (first on line 1)"
    )


class Scripted(Backend):
    name = "scripted"

    def identity(self):
        return {"backend": self.name, "model": "scripted"}

    def generate(self, requests, prompt, sampling):
        return [[clean_generation("a green field")] * sampling.n for _ in requests]


def test_load_errors_name_the_list_line(tmp_path):
    lst = _list(tmp_path)
    scorer = ReconScorer.from_preset("smoke", device="cpu", cache=ArtifactCache(enabled=False))
    job = DescribeJob(
        out=tmp_path / "run",
        preset=DESCRIBER_PRESETS["smoke"].replace(n=1),
        captioner=Scripted(),
        selector=ReconScoreSelector(scorer),
        inputs=lst,
    )
    summary = run_describe(job)
    rows = {
        r["image_id"]: r
        for r in map(json.loads, (tmp_path / "run" / "captions.jsonl").read_text().splitlines())
    }
    assert summary.exit_code == 3 and rows["ok"]["error"] is None
    expected = {"missing": 2, "empty": 3, "corrupt": 4, "big": 5, "space": 6, "trunc.jpg": 7, "trunc.png": 8}
    for image_id, line in expected.items():
        error = rows[image_id]["error"]
        assert error and error.startswith(f"list.txt:{line}: ") and error.count("list.txt:") == 1, (
            image_id,
            error,
        )
    assert "not found" in rows["missing"]["error"] and "empty" in rows["empty"]["error"]
    assert "more than" in rows["big"]["error"] and "white space" in rows["space"]["error"]


class TwoCaptions(Backend):
    name = "scripted"

    def identity(self):
        return {"backend": self.name, "model": "scripted"}

    def generate(self, requests, prompt, sampling):
        return [[clean_generation("a green field"), clean_generation("a red barn")] for _ in requests]


@pytest.mark.parametrize("written", ["absolute", "dotdot"])
def test_images_root_is_the_folder_the_list_was_resolved_against(tmp_path, written):
    """An absolute path or one with `..` in a list: run.json's images_root is the --images folder (it used to be
    guessed from the resolved path's ancestors: an IndexError after all the work, or a wrong folder), and
    `pairs` finds every image of the run through it."""
    from eval.cli import main
    from eval.selection import MetricSelector

    root = tmp_path / "data"
    (root / "imgs").mkdir(parents=True)
    for name, colour in (("one", (90, 120, 60)), ("two", (9, 12, 60))):
        Image.new("RGB", (32, 32), colour).save(root / "imgs" / f"{name}.png")
    refs = ["a green field"]
    lst = tmp_path / "list.jsonl"
    # no folder `a`: `a/..` is resolved as written, as for every list path
    paths = {"absolute": str(root / "imgs") + "/{}.png", "dotdot": "a/../imgs/{}.png"}[written]
    rows = [{"image": paths.format(name), "references": refs} for name in ("one", "two")]
    lst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = DescribeJob(
        out=tmp_path / "run",
        preset=DESCRIBER_PRESETS["smoke"].replace(n=2, select_by="bleu1"),
        captioner=TwoCaptions(),
        selector=MetricSelector("bleu1", device="cpu", preset="smoke"),
        inputs=lst,
        images_root=root,
    )
    assert run_describe(job).exit_code == 0
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["images_root"] == str(root.resolve())
    pairs = tmp_path / "pairs"
    assert main(["pairs", str(tmp_path / "run"), "--out", str(pairs), "--noise", "off"]) == 0
    assert json.loads((pairs / "run.json").read_text())["counts"]["images"] == 2
