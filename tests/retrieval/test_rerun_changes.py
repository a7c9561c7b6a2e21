"""`reconscore retrieve` rerun into a finished --out after something changed: an edited annotation recomputes the
methods (the item keys hash the benchmark's content), an option that only shapes the final files rewrites them
from the journal (RunSpec.depends), and in both cases the files equal a fresh run's."""

import json

import pytest

from eval.cli import main
from tests.retrieval import layouts

ENCODER = "smoke:open-clip"


def _argv(benchmark: str, root, out, *extra: str) -> list[str]:
    return ["retrieve", "--benchmark", benchmark, "--root", str(root), "--encoder", ENCODER, "--out", str(out),
            "--methods", "sum,product", "--device", "cpu", *extra]  # fmt: skip


def _swap_edir_targets(root) -> None:
    path = root / "edir.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["target"], records[1]["target"] = records[1]["target"], records[0]["target"]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def _edit_xview2_alt1(root) -> None:
    path = root / "xview2_cir.csv"
    path.write_text(path.read_text().replace("storm damaged area", "wind torn roofs", 1))


@pytest.mark.parametrize(
    ("benchmark", "builder", "edit", "extra"),
    [
        ("edir", layouts.edir, _swap_edir_targets, ()),
        ("xview2-cir", layouts.xview2, _edit_xview2_alt1, ("--option", "phrasing=alt1")),
    ],
)
def test_an_edited_annotation_recomputes_on_rerun(tmp_path, caplog, benchmark, builder, edit, extra):
    """Swapped targets (EDIR) or a reworded query (xView2's query_alt1 cell) leave every count unchanged: the
    rerun still recomputes, and its files equal a fresh run's on the edited annotations."""
    root, out, fresh = builder(tmp_path / "bench"), tmp_path / "out", tmp_path / "fresh"
    assert main(_argv(benchmark, root, out, *extra)) == 0
    before = (out / "per_query.csv").read_bytes()
    edit(root)
    caplog.clear()
    assert main(_argv(benchmark, root, out, *extra)) == 0
    assert "have changed inputs and are recomputed (2 benchmark)" in caplog.text
    assert main(_argv(benchmark, root, fresh, *extra)) == 0
    after = (out / "per_query.csv").read_bytes()
    assert after != before and after == (fresh / "per_query.csv").read_bytes()
    assert (out / "table.md").read_bytes() == (fresh / "table.md").read_bytes()


def _final_files(out) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name not in ("run.json", ".lock")
    }


def test_options_of_the_final_files_rewrite_them_on_rerun(tmp_path, monkeypatch):
    """--group-mean, --empty-positives and --save-bundle shape only the final files: a rerun with another value
    rewrites them from the journal (no method evaluated again), equal to a fresh run's, and run.json says so."""
    import retrieval.run

    root = layouts.patterncom(tmp_path / "PatternNet")
    out = tmp_path / "out"
    assert main(_argv("patterncom", root, out)) == 0
    changed = ("--group-mean", "subgroups", "--empty-positives", "skip", "--save-bundle")
    for n, fresh in enumerate([tmp_path / "fresh-a", tmp_path / "fresh-b"]):
        assert main(_argv("patterncom", root, fresh, *changed[: 4 + n])) == 0

    def refuse(*args, **kwargs):
        raise AssertionError("a method was evaluated again for an option of the final files")

    monkeypatch.setattr(retrieval.run, "evaluate", refuse)
    for n, fresh in enumerate([tmp_path / "fresh-a", tmp_path / "fresh-b"]):
        assert main(_argv("patterncom", root, out, *changed[: 4 + n])) == 0
        assert _final_files(out) == _final_files(fresh)
        record = json.loads((out / "run.json").read_text())
        assert (
            record["metrics"]["group_mean"] == "subgroups" and record["metrics"]["empty_positives"] == "skip"
        )
        assert ("bundle.npz" in record["outputs"]) == bool(n)


def test_an_empty_query_set_is_refused_before_any_work(tmp_path, capsys):
    root = layouts.edir(tmp_path / "edir")
    (root / "edir.jsonl").write_text("\n")
    out = tmp_path / "out"
    assert main(_argv("edir", root, out)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {root / 'edir.jsonl'}: the edir annotations hold no query; nothing to evaluate"
    assert "loading encoder" not in "\n".join(err) and not out.exists()
