"""What `reconscore report` writes (its pages, OUT_files/ thumbnails) goes through the atomic writer: never through a
symlink (a user's file behind it keeps its bytes), and a folder or disk that refuses a write is one `error:` line
(docs/report.md, docs/bad-inputs.md). Refusals are simulated (tests may run as root, where chmod refuses nothing)."""

from __future__ import annotations

import ast
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


def test_a_later_page_that_is_a_symlink_is_refused_before_any_page_is_written(run, tmp_path, capsys):
    rows = [
        {"id": str(i), "image": "images/1.tif", "caption": f"farmland {i}", "recon_score": 50.0}
        for i in range(2)
    ]
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    user = tmp_path / "user.html"
    user.write_bytes(b"the user's page")
    (tmp_path / "r-p2.html").symlink_to(user)
    assert main(["report", str(run), "--out", str(tmp_path / "r.html"), "--page-rows", "1"]) == 1
    assert _errors(capsys) == [
        f"error: --out's page {tmp_path / 'r-p2.html'} is a symlink, not a regular file; choose another path"
    ]
    assert user.read_bytes() == b"the user's page" and not (tmp_path / "r.html").exists()


_PLAIN = {"write_bytes", "write_text", "rename", "symlink_to", "hardlink_to"}  # methods no str or bytes has
_PLAIN_OF = {"shutil": {"copy", "copy2", "copyfile", "copytree", "move"}, "os": {"replace", "rename", "link"}}


def _plain_writes(source: str) -> list[str]:
    """Calls in `source` that write a file other than through recon_score.atomic_io: Path.write_bytes/write_text,
    shutil's copies and moves, os.replace/rename, open() for writing."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        owner = getattr(func.value, "id", None) if isinstance(func, ast.Attribute) else None
        if name in _PLAIN or name in _PLAIN_OF.get(owner, ()):
            found.append(f"{name} (line {node.lineno})")
        elif name == "open":
            modes = [a for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(set(str(m.value)) & set("wax+") for m in modes):
                found.append(f"open (line {node.lineno})")
    return found


def test_the_report_writes_only_through_the_atomic_writer():
    """Every file `report` writes (pages, thumbnails) goes through atomic_write_bytes/atomic_write_text, which never
    write through a link and turn a refused write into one line."""
    report = Path(__file__).resolve().parents[2] / "eval" / "report"
    found = {p.name: _plain_writes(p.read_text()) for p in sorted(report.rglob("*.py"))}
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_the_plain_write_check_sees_each_kind_of_write():
    """The check above on planted code: each kind is found (so a clean result means something)."""
    planted = (
        "p.write_bytes(b'')\np.write_text('')\nshutil.copy(a, b)\nos.replace(a, b)\nopen(p, 'w')\n"
        "p.open(mode='ab')\nopen(p)\nio.BytesIO().write(b'')\n'a'.replace('a', 'b')\n"
    )
    assert [c.split()[0] for c in _plain_writes(planted)] == [
        "write_bytes",
        "write_text",
        "copy",
        "replace",
    ] + ["open"] * 2
