"""The one lifecycle (`RunFolder.run(RunSpec)`, recon_score.run_engine): what a rerun reuses, recomputes and
repairs, for every command (each command's own tests run it end to end). Built here on a bare run folder with a
compute that counts its calls, without models, so each rule is checked on its own."""

import contextlib
import json
import logging
import shutil
import sys

import pytest

from recon_score import run_engine
from recon_score.errors import ResumeMismatchError
from recon_score.run_engine import Item, RunFolder, RunSpec, Stage
from tests.killpoint import stop_at_append

SETTINGS = {"kind": "score-run", "preset": "p"}
_OPENED: list[list[str]] = []  # the audit hook's listeners (a hook cannot be removed once added)


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED:
        _OPENED[-1].append(str(args[0]))


@contextlib.contextmanager
def opened_files():
    """Every path opened inside the block (sys.addaudithook's "open" event)."""
    if not getattr(sys, "_reconscore_audit", False):
        sys.addaudithook(_audit)
        sys._reconscore_audit = True
    _OPENED.append([])
    try:
        yield _OPENED[-1]
    finally:
        _OPENED.pop()


class Work:
    """A command's stand-in: item i's result is {"value": its caption}, with files `files[i]`."""

    def __init__(self, captions, *, files=None, errors=(), chunk=1, settings=SETTINGS, retry=False):
        self.captions, self.files, self.errors = dict(captions), files or {}, set(errors)
        self.chunk, self.settings, self.retry, self.computed = chunk, settings, retry, []

    def compute(self, batch, todo):
        self.computed += [i.id for i in todo]
        out = []
        for item in todo:
            result = {"value": item.inputs["caption"]}
            if item.id in self.errors:
                result["error"] = "boom"
            out.append((result, dict(self.files.get(item.id, {}))))
        return out

    def spec(self):
        items = [Item(i, {"caption": c}) for i, c in self.captions.items()]
        return RunSpec(
            self.settings,
            items=items,
            stages=[Stage(self.compute)],
            outputs=lambda res: {"scores.jsonl": json.dumps(res.results()).encode() + b"\n"},
            chunk=self.chunk,
            retry_errors=self.retry,
        )

    def run(self, out, **kw):
        with RunFolder("score", out, argv=["test"], **kw) as run:
            return run.run(self.spec())


def test_a_finished_run_is_complete_and_opens_none_of_its_files(tmp_path):
    out = tmp_path / "run"
    files = {i: {f"reconstructions/{i}.png": b"png%d" % i} for i in range(3)}
    first = Work({0: "a", 1: "b", 2: "c"}, files=files)
    res = first.run(out)
    assert first.computed == [0, 1, 2] and res.results() == [{"value": "a"}, {"value": "b"}, {"value": "c"}]
    again = Work({0: "a", 1: "b", 2: "c"}, files=files)
    with opened_files() as opened:
        res = again.run(out)
    assert res.complete and again.computed == [] and not res.repairs
    assert opened and not [p for p in opened if "reconstructions" in p or p.endswith("scores.jsonl")]


def test_a_changed_input_is_recomputed_and_named(tmp_path, caplog):
    out = tmp_path / "run"
    Work({0: "a", 1: "b"}).run(out)
    work = Work({0: "a", 1: "c"})
    with caplog.at_level(logging.WARNING):
        res = work.run(out)
    assert work.computed == [1] and res.changed == {1: ["caption"]}  # item 1: its caption changed
    assert "1 journaled row(s) have changed inputs and are recomputed (1 caption)" in caplog.text
    assert res.results() == [{"value": "a"}, {"value": "c"}]


def test_a_chunk_is_recomputed_whole_when_one_of_its_items_changed(tmp_path):
    """Batch composition is part of a key: a fresh run would compute the chunk together."""
    out = tmp_path / "run"
    Work({0: "a", 1: "b", 2: "c"}, chunk=2).run(out)
    work = Work({0: "a", 1: "x", 2: "c"}, chunk=2)
    work.run(out)
    assert work.computed == [0, 1]


def test_retry_errors_recomputes_only_the_failed_items(tmp_path):
    out = tmp_path / "run"
    Work({0: "a", 1: "b"}, errors={1}).run(out)
    assert Work({0: "a", 1: "b"}).run(out).complete
    work = Work({0: "a", 1: "b"}, retry=True)
    work.run(out)
    assert work.computed == [1]


def test_output_files_gone_or_replaced_are_redone_and_said_by_folder(tmp_path):
    out = tmp_path / "run"
    files = {
        i: {f"reconstructions/{i}.png": b"png%d" % i, f"explain/{i}.npz": b"npz%d" % i} for i in range(3)
    }
    Work({0: "a", 1: "b", 2: "c"}, files=files).run(out)
    (out / "reconstructions" / "0.png").unlink()
    (out / "explain" / "1.npz").write_bytes(b"edited")
    work = Work({0: "a", 1: "b", 2: "c"}, files=files)
    res = work.run(out)
    assert sorted(work.computed) == [0, 1]
    assert res.repairs == [
        "1 row(s) with explain/ files missing or replaced: explained again",
        "1 row(s) with reconstructions/ files missing or replaced: rendered again",
    ]
    assert (out / "reconstructions" / "0.png").read_bytes() == b"png0"
    assert (out / "explain" / "1.npz").read_bytes() == b"npz1"


def test_a_touched_file_is_checked_by_content_and_kept(tmp_path):
    import os

    out = tmp_path / "run"
    files = {0: {"reconstructions/0.png": b"png0"}}
    Work({0: "a"}, files=files).run(out)
    st = os.stat(out / "reconstructions" / "0.png")
    os.utime(out / "reconstructions" / "0.png", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert Work({0: "a"}, files=files).run(out).complete


def test_a_file_where_an_output_folder_belongs_is_removed_and_its_items_redone(tmp_path):
    out = tmp_path / "run"
    files = {0: {"methods/a.parquet": b"p"}}
    Work({0: "a"}, files=files).run(out)
    shutil.rmtree(out / "methods")
    (out / "methods").write_text("not a folder")
    work = Work({0: "a"}, files=files)
    res = work.run(out)
    assert work.computed == [0] and (out / "methods" / "a.parquet").read_bytes() == b"p"
    assert res.repairs == ["1 row(s) with methods/ files missing or replaced: computed again"]


def test_final_files_and_the_record_are_repaired_from_the_journal(tmp_path):
    out = tmp_path / "run"
    Work({0: "a", 1: "b"}).run(out)
    want = (out / "scores.jsonl").read_bytes()
    (out / "scores.jsonl").write_bytes(b"truncated")
    (out / "run.json").write_text("{not json")
    work = Work({0: "a", 1: "b"})
    res = work.run(out)
    assert work.computed == [] and res.repairs == [
        "scores.jsonl did not match the journal",
        "run.json was missing or invalid",
    ]
    assert (out / "scores.jsonl").read_bytes() == want
    (out / "scores.jsonl").unlink()
    assert Work({0: "a", 1: "b"}).run(out).repairs == ["scores.jsonl was missing"]
    assert (out / "scores.jsonl").read_bytes() == want


def test_other_settings_are_refused_naming_the_change(tmp_path):
    Work({0: "a"}).run(tmp_path / "run")
    with pytest.raises(ResumeMismatchError) as err:
        Work({0: "a"}, settings={**SETTINGS, "preset": "q"}).run(tmp_path / "run")
    assert 'preset: "p" -> "q"' in str(err.value)


def test_overwrite_starts_from_nothing(tmp_path):
    Work({0: "a"}).run(tmp_path / "run")
    work = Work({0: "a"})
    work.run(tmp_path / "run", overwrite=True)
    assert work.computed == [0]


def test_a_stage_built_from_an_earlier_stage_and_a_kill_at_any_append(tmp_path, monkeypatch):
    """Two stages, the second's items from the first's results (generate's rewrites); a run stopped at its
    second journal append resumes to the bytes of an uninterrupted run, the first stage not redone."""
    calls = []

    def first(batch, todo):
        calls.extend(("first", i.id) for i in todo)
        return [({"words": i.inputs["text"].split()}, {}) for i in todo]

    def second(batch, todo):
        calls.extend(("second", i.id) for i in todo)
        return [({"upper": i.inputs["word"].upper()}, {}) for i in todo]

    def words(done):
        return [Item(f"{i}:{w}", {"word": w}) for i, r in sorted(done["first"].items()) for w in r["words"]]

    def spec():
        return RunSpec(
            {"kind": "generate"},
            items=[Item(0, {"text": "a b"}), Item(1, {"text": "c"})],
            stages=[Stage(first, name="first", batch=1), Stage(second, name="second", batch=2, items=words)],
            outputs=lambda res: {"generated.jsonl": json.dumps(res.results("second")).encode()},
        )

    def run(out):
        with RunFolder("generate", out, argv=["test"]) as folder:
            return folder.run(spec())

    run(tmp_path / "ref")

    class Killed(Exception):
        pass

    def killed():
        raise Killed

    monkeypatch.setattr(run_engine, "_append_lines", stop_at_append(3, killed))
    with pytest.raises(Killed):
        run(tmp_path / "out")
    monkeypatch.undo()
    calls.clear()
    res = run(tmp_path / "out")
    assert calls == [("second", "0:a"), ("second", "0:b"), ("second", "1:c")]
    assert res.results("second") == [{"upper": "A"}, {"upper": "B"}, {"upper": "C"}]
    name = "generated.jsonl"
    assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()


def test_a_journal_whose_header_moved_is_refused_in_one_line(tmp_path):
    """Line 1 a record, the header further down (an edited or re-sorted file): refused, never misread."""
    out = tmp_path / "run"
    Work({0: "a", 1: "b"}).run(out)
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join([*lines[1:], lines[0]]) + "\n")
    with pytest.raises(ResumeMismatchError) as err:
        Work({0: "a", 1: "b"}).run(out)
    assert "\n" not in str(err.value) and "--overwrite" in str(err.value)


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_journal_of_another_layout_is_a_changed_setting_naming_both(tmp_path, shift):
    """An older or newer reconscore's journal: its layout is one of the run's settings, so the refusal is the
    changed-settings line, naming both layouts."""
    from recon_score.run_engine import JOURNAL_LAYOUT

    out = tmp_path / "run"
    Work({0: "a"}).run(out)
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    head = json.loads(lines[0])
    head["header"]["settings"]["journal_layout"] = JOURNAL_LAYOUT + shift
    head["fingerprint"] = "0" * 16
    journal.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    with pytest.raises(
        ResumeMismatchError, match=rf"journal_layout: {JOURNAL_LAYOUT + shift} -> {JOURNAL_LAYOUT}\. Choose"
    ):
        Work({0: "a"}).run(out)


def test_rerunning_an_explain_run_without_explain_says_how_to_resume():
    """The settings diff alone ("explain.level: 0.05 -> (unset)") leaves the reader guessing: name the flag."""
    from recon_score.errors import ResumeMismatchError
    from recon_score.run_engine import diff_settings

    before = {"steps": 4, "explain": {"level": 0.05, "max_phrases": 8}}
    changes = diff_settings(before, {"steps": 4})
    assert "explain.level: 0.05 -> (unset)" in changes
    message = str(ResumeMismatchError("runs/x", found="a", wanted="b", changes=changes))
    assert "It was an --explain run: pass --explain (with its options) to resume it" in message
    other = str(ResumeMismatchError("runs/x", "a", "b", changes=diff_settings({"seeds": 3}, {})))
    assert "This run leaves seeds unset: pass the option(s) again to resume it." in other
    plain = str(ResumeMismatchError("runs/x", "a", "b", changes=diff_settings({"steps": 28}, {"steps": 4})))
    assert "unset" not in plain and "--explain" not in plain


def test_an_item_that_fails_again_under_retry_errors_keeps_its_new_error(tmp_path):
    """--retry-errors recomputes a failed item; when it fails again the run's results hold that new record."""
    out = tmp_path / "run"
    Work({0: "a", 1: "b"}, errors={1}).run(out)
    work = Work({0: "a", 1: "b"}, errors={1}, retry=True)
    res = work.run(out)
    assert work.computed == [1]
    assert res.results() == [{"value": "a"}, {"value": "b", "error": "boom"}]
    assert json.loads((out / "scores.jsonl").read_text()) == res.results()


def test_a_temporary_file_left_by_a_kill_mid_write_is_removed_when_its_file_is_written(tmp_path):
    out = tmp_path / "run"
    Work({0: "a"}).run(out)
    stale = out / ".scores.jsonl.k1ll3d0x.tmp"
    stale.write_bytes(b'[{"value": "a"')
    other = out / ".scores.jsonl.notours.tmp"
    other.write_bytes(b"")
    Work({0: "b"}).run(out)
    assert not stale.exists() and other.exists()
