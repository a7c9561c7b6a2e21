"""What `reconscore report` writes (its pages, OUT_files/ thumbnails) goes through the atomic writer: never through a
symlink (a user's file behind it keeps its bytes), and a folder or disk that refuses a write is one `error:` line
(docs/report.md, docs/bad-inputs.md). Refusals are simulated (tests may run as root, where chmod refuses nothing)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from eval.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "recon_score" / "sample"


@pytest.fixture
def run(tmp_path) -> Path:
    """A one-row score run with its own image: a report of it writes one thumbnail in link mode."""
    run = tmp_path / "run"
    (run / "images").mkdir(parents=True)
    shutil.copy(SAMPLE / "images" / "UCM_1.tif", run / "images" / "1.tif")
    row = {"id": "0", "image": "images/1.tif", "caption": "farmland", "recon_score": 50.0}
    (run / "scores.jsonl").write_text(json.dumps(row) + "\n")
    (run / "run.json").write_text(
        json.dumps({"command": "score", "images_root": str(run), "meaningless": False})
    )
    return run


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _link_report(run: Path, out: Path) -> int:
    return main(["report", str(run), "--out", str(out), "--thumbnails", "link"])


def test_a_thumbnail_replaced_by_a_symlink_is_not_written_through(run, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert _link_report(run, out) == 0
    (thumb,) = (tmp_path / "r_files").iterdir()
    user = tmp_path / "user.txt"
    user.write_bytes(b"the user's file")
    thumb.unlink()
    thumb.symlink_to(user)
    capsys.readouterr()
    assert _link_report(run, out) == 1
    assert _errors(capsys) == [
        f"error: {thumb} is a symlink, not a regular file, where a file is written; move it away and rerun"
    ]
    assert user.read_bytes() == b"the user's file" and thumb.is_symlink()


def test_a_thumbnail_folder_that_is_a_symlink_is_refused(run, tmp_path, capsys):
    user = tmp_path / "photos"
    user.mkdir()
    (tmp_path / "r_files").symlink_to(user, target_is_directory=True)
    assert _link_report(run, tmp_path / "r.html") == 1
    assert _errors(capsys) == [
        f"error: {tmp_path / 'r_files'} is a symlink, not a folder, where the report writes its thumbnails; move "
        "it away and rerun"
    ]
    assert list(user.iterdir()) == [] and not (tmp_path / "r.html").exists()


def _refuse_mkdir(monkeypatch, name: str, code: int) -> None:
    """Path.mkdir of a folder called `name` fails with `code`, as a folder the user may not write in does."""
    mkdir = Path.mkdir

    def refused(self, *args, **kwargs):
        if self.name == name:
            raise OSError(code, os.strerror(code), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)


@pytest.mark.parametrize(
    "code", [errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC], ids=errno.errorcode.get
)
def test_a_refused_page_folder_is_one_line(run, tmp_path, capsys, monkeypatch, code):
    """`report RUN --out ro/sub/r.html` where ro/ may not be written: was a PermissionError traceback."""
    _refuse_mkdir(monkeypatch, "sub", code)
    assert main(["report", str(run), "--out", str(tmp_path / "ro" / "sub" / "r.html")]) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f"error: cannot write in {tmp_path / 'ro'}: "), line
    assert not (tmp_path / "ro" / "sub").exists()


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS], ids=errno.errorcode.get)
def test_a_refused_thumbnail_folder_is_one_line(run, tmp_path, capsys, monkeypatch, code):
    _refuse_mkdir(monkeypatch, "r_files", code)
    assert _link_report(run, tmp_path / "r.html") == 1
    (line,) = _errors(capsys)
    assert line.startswith(f"error: cannot write in {tmp_path}: "), line
    assert not (tmp_path / "r.html").exists()
