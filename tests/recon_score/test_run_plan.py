"""The one resume plan (`RunFolder.plan`, recon_score.run_engine): what a rerun reuses, recomputes and repairs,
for every command that resumes (score, describe and retrieve call it; their own tests run it end to end). Built
here on a bare run folder, without models, so each rule is checked on its own."""

import hashlib
import json
import logging
import shutil

import pytest

from recon_score.errors import ReconScoreError, ResumeMismatchError
from recon_score.run_engine import RunFolder

SETTINGS = {"kind": "score-run", "preset": "p"}
FP = "f" * 16


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _work(out, keys, *, inputs=None, results=None, files=None, settings=SETTINGS, fp=FP):
    """One invocation that journals every item (`results[item]`, default ok) and writes `files[item]`."""
    with RunFolder("score", out, argv=["test"]) as run:
        plan = run.plan(fingerprint=fp, settings=settings, keys=keys, inputs=inputs)
        inv = run.begin(plan)
        with run.journal(fp, {"settings": settings}) as journal:
            for item in keys:
                written = {}
                for rel, data in (files or {}).get(item, {}).items():
                    (out / rel).parent.mkdir(parents=True, exist_ok=True)
                    (out / rel).write_bytes(data)
                    written[rel] = _sha(data)
                result = (results or {}).get(item, {"value": item})
                rec = plan.record(item, inv, result, written)
                journal.write([rec])
                plan.add([rec])
        run.reload(plan)
        run.finish(inv, files={"scores.jsonl": b"x\n"}, info={"fingerprint": fp}, records=plan.done.values())
    return plan


def _plan(out, keys, **kw):
    with RunFolder("score", out, argv=["test"]) as run:
        return run.plan(fingerprint=kw.pop("fp", FP), settings=kw.pop("settings", SETTINGS), keys=keys, **kw)


def test_a_finished_run_is_complete_and_its_results_come_back_in_order(tmp_path):
    keys = {0: "k0", 1: "k1", 2: "k2"}
    _work(tmp_path / "run", keys)
    plan = _plan(tmp_path / "run", keys, outputs=lambda p: {"scores.jsonl": b"x\n"})
    assert plan.complete and not plan.repairs
    assert plan.results(str) == [{"value": 0}, {"value": 1}, {"value": 2}]


def test_a_changed_input_is_recomputed_and_named(tmp_path, caplog):
    keys = {0: "k0", 1: "k1"}
    inputs = {0: {"caption": "a"}, 1: {"caption": "b"}}
    _work(tmp_path / "run", keys, inputs=inputs)
    plan = _plan(tmp_path / "run", {0: "k0", 1: "other"}, inputs={0: inputs[0], 1: {"caption": "c"}})
    assert plan.is_done(0) and not plan.is_done(1) and not plan.complete
    assert plan.changed == {"caption": 1}
    with caplog.at_level(logging.WARNING), RunFolder("score", tmp_path / "run") as run:
        run.begin(plan)
    assert "1 journaled row(s) have changed inputs and are recomputed (1 caption)" in caplog.text


def test_retry_errors_recomputes_only_the_failed_items(tmp_path):
    keys = {0: "k0", 1: "k1"}
    _work(tmp_path / "run", keys, results={1: {"error": "boom"}})
    assert _plan(tmp_path / "run", keys).is_done(1)
    plan = _plan(tmp_path / "run", keys, retry_errors=True)
    assert plan.is_done(0) and not plan.is_done(1)


def test_output_files_gone_or_replaced_are_redone_and_said_by_folder(tmp_path):
    keys = {0: "k0", 1: "k1", 2: "k2"}
    files = {i: {f"reconstructions/{i}.png": b"png%d" % i, f"explain/{i}.npz": b"npz%d" % i} for i in keys}
    out = tmp_path / "run"
    _work(out, keys, files=files)
    (out / "reconstructions" / "0.png").unlink()
    (out / "explain" / "1.npz").write_bytes(b"edited")
    plan = _plan(out, keys, outputs=lambda p: {"scores.jsonl": b"x\n"})
    assert plan.redo == {0, 1} and plan.is_done(2) and not plan.complete
    assert plan.repairs == [
        "1 row(s) with explain/ files missing or replaced: explained again",
        "1 row(s) with reconstructions/ files missing or replaced: rendered again",
    ]


def test_a_file_where_an_output_folder_belongs_is_removed_and_its_items_redone(tmp_path):
    keys = {0: "k0"}
    out = tmp_path / "run"
    _work(out, keys, files={0: {"methods/a.parquet": b"p"}})
    shutil.rmtree(out / "methods")
    (out / "methods").write_text("not a folder")
    plan = _plan(out, keys, unit="method")
    assert plan.redo == {0} and not (out / "methods").exists()
    assert plan.repairs == ["1 method(s) with methods/ files missing or replaced: computed again"]


def test_final_files_and_the_record_are_checked_only_when_every_item_is_done(tmp_path):
    keys = {0: "k0", 1: "k1"}
    out = tmp_path / "run"
    _work(out, keys)
    (out / "scores.jsonl").write_bytes(b"truncated")
    (out / "run.json").write_text("{not json")
    checked = []

    def outputs(plan):
        checked.append(True)
        return {"scores.jsonl": b"x\n"}

    plan = _plan(out, keys, outputs=outputs)
    assert plan.repairs == ["scores.jsonl did not match the journal", "run.json was missing or invalid"]
    _plan(out, {**keys, 2: "k2"}, outputs=outputs)  # unfinished: the final files are written anyway
    assert len(checked) == 1


def test_a_journal_record_edited_by_hand_is_computed_again(tmp_path):
    keys = {0: "k0", 1: "k1"}
    out = tmp_path / "run"
    _work(out, keys)
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["result"]["value"] = 99
    lines[2] = json.dumps(rec)
    journal.write_text("\n".join(lines) + "\n")
    plan = _plan(out, keys)
    assert not plan.is_done(1) and plan.is_done(0)
    assert plan.repairs[0].startswith("1 journal record(s) failed their checksum (e.g. ")


def test_other_settings_are_refused_naming_the_change(tmp_path):
    _work(tmp_path / "run", {0: "k0"})
    with pytest.raises(ResumeMismatchError) as err:
        _plan(tmp_path / "run", {0: "k0"}, fp="g" * 16, settings={**SETTINGS, "preset": "q"})
    assert 'preset: "p" -> "q"' in str(err.value)


def test_a_journal_of_an_older_layout_is_refused_with_a_rerun_hint(tmp_path):
    out = tmp_path / "run"
    _work(out, {0: "k0"})
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    head = json.loads(lines[0])
    del head["layout"]
    journal.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    with pytest.raises(
        ReconScoreError, match=r"written by an older reconscore \(journal/rank-0.jsonl\); rerun"
    ):
        _plan(out, {0: "k0"})


def test_an_item_without_a_result_is_named(tmp_path):
    _work(tmp_path / "run", {0: "k0"})
    plan = _plan(tmp_path / "run", {0: "k0", 1: "k1"})
    with pytest.raises(ReconScoreError, match="row 1 has no result after all processes finished"):
        plan.results(lambda item: f"row {item}")


def test_overwrite_starts_from_nothing(tmp_path):
    _work(tmp_path / "run", {0: "k0"})
    with RunFolder("score", tmp_path / "run", overwrite=True) as run:
        plan = run.plan(fingerprint=FP, settings=SETTINGS, keys={0: "k0"})
    assert plan.done == {} and not plan.is_done(0)


def test_a_journal_whose_header_moved_says_so(tmp_path):
    """Line 1 a record, the header further down (an edited or re-sorted file): not "an older reconscore"."""
    out = tmp_path / "run"
    _work(out, {0: "k0", 1: "k1"})
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join([*lines[1:], lines[0]]) + "\n")
    with pytest.raises(ReconScoreError) as err:
        _plan(out, {0: "k0", 1: "k1"})
    assert "does not start with its header line (line 1 is a record)" in str(err.value)
    assert "older" not in str(err.value) and "--overwrite" in str(err.value)


def test_a_journal_of_a_newer_layout_names_both_layouts(tmp_path):
    from recon_score.run_engine import JOURNAL_LAYOUT

    out = tmp_path / "run"
    _work(out, {0: "k0"})
    journal = out / "journal" / "rank-0.jsonl"
    lines = journal.read_text().splitlines()
    head = json.loads(lines[0])
    head["layout"] = JOURNAL_LAYOUT + 1
    journal.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    with pytest.raises(
        ReconScoreError, match=rf"a newer reconscore .*layout {JOURNAL_LAYOUT + 1}, this version"
    ):
        _plan(out, {0: "k0"})


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
