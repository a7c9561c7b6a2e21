"""`annotate collect` without a browser: exports written as the page writes them. Every bad export is one line
naming file:line, and changes nothing already collected; the statistics are the outside references'."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import krippendorff
import numpy as np
import pytest

from eval.cli import main
from preference_data.annotate import body_checksum
from tests.eval.annotate_helpers import SAMPLE, in_order, page_data, sample_candidates, write_export


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("study")
    table = sample_candidates(root / "candidates.csv", limit=4)
    out = root / "study"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(SAMPLE), "--annotators", "3"]
    assert main([*argv, "--out", str(out)]) == 0
    return out


def _exports(study: Path, folder: Path) -> list[Path]:
    """Three annotators: the page's order, its reverse, and the page's order with the first two swapped."""
    orders = [lambda it: [0, 1, 2], lambda it: [2, 1, 0], lambda it: [1, 0, 2]]
    paths = []
    for k, order in enumerate(orders, start=1):
        data = page_data(study / "pages" / f"annotator-{k}.html")
        paths.append(write_export(folder / f"a{k}.jsonl", data, in_order(data, order)))
    return paths


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


def test_alpha_and_w_equal_the_references_on_the_unblinded_judgments(study, tmp_path):
    from scipy.stats import friedmanchisquare

    exports = _exports(study, tmp_path)
    out = tmp_path / "collected"
    assert (
        main(["annotate", "collect", str(study), *map(str, exports), "--bootstrap", "50", "--out", str(out)])
        == 0
    )
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    items = sorted({r["item"] for r in rows})
    annotators = sorted({r["annotator"] for r in rows})
    ranks = {(r["item"], r["annotator"]): r["ranks"] for r in rows}
    # Krippendorff's layout built here from the unblinded ranks: raters x (image, candidate) units
    data = np.array([[x for i in items for x in ranks[(i, a)]] for a in annotators], dtype=float)
    record = json.loads((out / "run.json").read_text())
    alpha = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal")
    assert abs(record["agreement"]["krippendorff_alpha"]["value"] - alpha) < 1e-9
    # Kendall's W of each image from Friedman's chi-square (scipy): W = chi2 / (m (n - 1))
    w = []
    for i in items:
        m = np.array([ranks[(i, a)] for a in annotators], dtype=float)
        w.append(friedmanchisquare(*m.T).statistic / (m.shape[0] * (m.shape[1] - 1)))
    assert abs(record["agreement"]["kendall_w"]["value"] - float(np.mean(w))) < 1e-9
    lo, hi = record["agreement"]["kendall_w"]["ci"]
    assert lo <= np.mean(w) <= hi


def _bad(study: Path, folder: Path, kind: str) -> tuple[Path, str]:
    data = page_data(study / "pages" / "annotator-1.html")
    ranks = in_order(data, lambda it: [0, 1, 2])
    path = folder / f"{kind}.jsonl"
    first = data["items"][0]["id"]
    if kind == "edited-checksum":
        write_export(path, data, ranks, body_sha256="0" * 64)
        return path, f"{path}:1: body_sha256 does not match"
    if kind == "missing-image":
        del ranks[first]
        write_export(path, data, ranks)
        return path, f"{path}:1: image {first!r} is neither ranked nor listed as missing"
    if kind == "rank-twice":
        ranks[first] = {"A": 1, "B": 1, "C": 2}
        write_export(path, data, ranks)
        return path, f"{path}:2: item {first!r}: rank 1 is given twice (A and B)"
    if kind == "another-study":
        write_export(path, data, ranks, study="someone-elses-study")
        return path, f"{path}:1: is an export of another study ('someone-elses-study')"
    if kind == "stale":
        write_export(path, data, ranks, checksum="0123456789abcdef")
        return path, f"{path}:1: is stale"
    if kind in ("no-checksum", "no-annotator"):
        write_export(path, data, ranks)
        lines = path.read_text().splitlines()
        head = json.loads(lines[0])
        del head[kind.removeprefix("no-")]
        path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
        return path, f"{path}:1: the header has no {kind.removeprefix('no-')!r}"
    if kind == "item-a-list":
        write_export(path, data, ranks)
        lines = path.read_text().splitlines()
        lines[1] = lines[1].replace(json.dumps(first), json.dumps([first]))
        head = {**json.loads(lines[0]), "body_sha256": body_checksum(lines[1:])}
        path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
        return path, f"{path}:2: 'item' must be an item id (a string), got [{first!r}]"
    raise AssertionError(kind)


BAD = ["edited-checksum", "missing-image", "rank-twice", "another-study", "stale"]
# a header without a field collect reads, an item that is not an id: once a KeyError or TypeError traceback
BAD += ["no-checksum", "no-annotator", "item-a-list"]


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_export_is_one_line_and_changes_nothing(study, tmp_path, capsys, kind):
    exports = _exports(study, tmp_path)
    out = tmp_path / "collected"
    assert (
        main(["annotate", "collect", str(study), *map(str, exports), "--bootstrap", "20", "--out", str(out)])
        == 0
    )
    before = _digests(out)
    capsys.readouterr()
    bad, message = _bad(study, tmp_path, kind)
    argv = ["annotate", "collect", str(study), str(bad), *map(str, exports[1:]), "--bootstrap", "20"]
    assert main([*argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, err
    assert "Traceback" not in err
    assert _digests(out) == before


def test_two_exports_of_one_annotator_are_refused_naming_both(study, tmp_path, capsys):
    exports = _exports(study, tmp_path)
    again = tmp_path / "again.jsonl"
    again.write_bytes(exports[0].read_bytes())
    argv = ["annotate", "collect", str(study), *map(str, exports), str(again), "--out", str(tmp_path / "c")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{again}:1: annotator-1's main judgments were already given by {exports[0]}" in err
    assert not (tmp_path / "c").exists()


def test_an_export_may_list_images_it_skipped(study, tmp_path):
    data = page_data(study / "pages" / "annotator-1.html")
    ranks = in_order(data, lambda it: [0, 1, 2])
    skipped = data["items"][-1]["id"]
    del ranks[skipped]
    part = write_export(tmp_path / "part.jsonl", data, ranks, missing=[skipped])
    others = _exports(study, tmp_path)[1:]
    out = tmp_path / "c"
    assert (
        main(
            [
                "annotate",
                "collect",
                str(study),
                str(part),
                *map(str, others),
                "--bootstrap",
                "20",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads((out / "run.json").read_text())
    assert record["exports"][0]["missing"] == 1
    lines = (out / "rankings.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 4 - 1


def test_selections_give_the_preference_rate(study, tmp_path):
    exports = _exports(study, tmp_path)
    out = tmp_path / "c"
    assert (
        main(["annotate", "collect", str(study), *map(str, exports), "--bootstrap", "20", "--out", str(out)])
        == 0
    )
    consensus = [json.loads(x) for x in (out / "consensus.jsonl").read_text().splitlines()]
    picks = tmp_path / "picks.jsonl"
    with picks.open("w") as f:
        for line in consensus:  # metric "best" picks a consensus winner, "worst" the last candidate
            best = min(line["candidates"], key=lambda c: c["rank"])
            worst = max(line["candidates"], key=lambda c: c["rank"])
            f.write(json.dumps({"image": line["image"], "caption": best["caption"], "metric": "best"}) + "\n")
            f.write(
                json.dumps({"image": line["image"], "caption": worst["caption"], "metric": "worst"}) + "\n"
            )
    out2 = tmp_path / "c2"
    argv = [
        "annotate",
        "collect",
        str(study),
        *map(str, exports),
        "--selections",
        str(picks),
        "--bootstrap",
        "20",
    ]
    assert main([*argv, "--out", str(out2)]) == 0
    rates = {p["metric"]: p["rate"] for p in json.loads((out2 / "run.json").read_text())["preference"]}
    assert rates == {"best": 1.0, "worst": 0.0}


def test_the_report_shows_agreement_and_win_shares(study, tmp_path):
    exports = _exports(study, tmp_path)
    out = tmp_path / "c"
    assert (
        main(["annotate", "collect", str(study), *map(str, exports), "--bootstrap", "20", "--out", str(out)])
        == 0
    )
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    html = page.read_text()
    assert (
        "Agreement among annotators" in html
        and "Win share per model" in html
        and "Krippendorff alpha" in html
    )
    assert "distractor-a" in html  # unblinded: the report names the models


def test_build_escapes_user_text_and_skips_an_unreadable_image(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    from PIL import Image

    Image.new("RGB", (32, 32), (10, 120, 40)).save(images / "a.png")
    (images / "broken.png").write_bytes(b"not a png")
    evil = "</script><script>alert(1)</script> & <b>bold</b>"
    table = tmp_path / "c.jsonl"
    rows = [
        {"image": "a.png", "candidate": evil, "model": "m1"},
        {"image": "a.png", "candidate": "a green field", "model": "m2"},
        {"image": "broken.png", "candidate": "x", "model": "m1"},
        {"image": "broken.png", "candidate": "y", "model": "m2"},
    ]
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "study"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(images), "--title", "<i>T</i>"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "skipped broken.png" in capsys.readouterr().err
    html = (out / "pages" / "annotator-1.html").read_text()
    assert "<script>alert" not in html and "<b>bold" not in html and "<i>T</i>" not in html
    assert page_data(out / "pages" / "annotator-1.html")["items"][0]["captions"].count(evil) == 1
    assert [it["image"] for it in json.loads((out / "study.json").read_text())["items"]] == ["a.png"]
    assert not list((out / "pages").rglob("key*")) and "m1" not in html


def test_a_bad_candidates_row_is_one_line_naming_it(tmp_path, capsys):
    table = tmp_path / "c.csv"
    table.write_text("image,candidate,model\na.png,one,m1\na.png,two,m1\n")
    argv = [
        "annotate",
        "build",
        "--candidates",
        str(table),
        "--images",
        str(tmp_path),
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {table}:3: model 'm1' already has a candidate for 'a.png' ({table}:2)", err
    assert not (tmp_path / "s").exists()


def test_a_describe_run_is_a_study_and_its_picks_are_selections(report_runs, tmp_path):
    """Candidates from a describe run (its images found through its record); its selected captions give the
    preference rate of the metric that selected them."""
    describe = report_runs["describe"]
    out = tmp_path / "study"
    assert (
        main(["annotate", "build", "--candidates", str(describe), "--annotators", "2", "--out", str(out)])
        == 0
    )
    study = json.loads((out / "study.json").read_text())
    assert len(study["items"]) == 2 and all(len(it["candidates"]) == 2 for it in study["items"])
    exports = []
    for k, order in ((1, lambda it: [0, 1]), (2, lambda it: [1, 0])):
        data = page_data(out / "pages" / f"annotator-{k}.html")
        exports.append(write_export(tmp_path / f"a{k}.jsonl", data, in_order(data, order)))
    col = tmp_path / "c"
    argv = [
        "annotate",
        "collect",
        str(out),
        *map(str, exports),
        "--selections",
        str(describe),
        "--bootstrap",
        "20",
    ]
    assert main([*argv, "--out", str(col)]) == 0
    record = json.loads((col / "run.json").read_text())
    assert [p["metric"] for p in record["preference"]] == ["recon_score"] and record["preference"][0][
        "images"
    ] == 2
    assert record["meaningless"] is True  # smoke models upstream


def test_a_describe_runs_failed_rows_are_no_picks_and_a_bad_pick_names_its_line(
    report_runs, tmp_path, capsys
):
    """A describe run's failed row (error set, caption null) has no pick: it is left out of the preference rate,
    as the study left out its candidates (it once stopped collect, naming the run folder). A pick that is not a
    candidate is named by its captions.jsonl line."""
    import shutil

    describe = shutil.copytree(report_runs["describe"], tmp_path / "describe")
    study = tmp_path / "study"
    assert main(["annotate", "build", "--candidates", str(describe), "--out", str(study)]) == 0
    exports = []
    for k in (1, 2):
        data = page_data(study / "pages" / f"annotator-{k}.html")
        exports.append(write_export(tmp_path / f"a{k}.jsonl", data, in_order(data, lambda it: [0, 1])))
    captions = describe / "captions.jsonl"
    rows = [json.loads(x) for x in captions.read_text().splitlines()]
    failed = {**rows[0], "image_id": "gone", "image": "images/gone.tif", "caption": None, "index": None}
    failed.update(error="image 'images/gone.tif' is missing", selection_score=None, recon_score=None)
    captions.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], failed, *rows[1:]]))
    argv = ["annotate", "collect", str(study), *map(str, exports), "--selections", str(describe)]
    assert main([*argv, "--bootstrap", "20", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "run.json").read_text())["preference"][0]["images"] == len(rows)
    rows[-1]["caption"] = "not one of its candidates"
    captions.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], failed, *rows[1:]]))
    capsys.readouterr()
    assert main([*argv, "--bootstrap", "20", "--out", str(tmp_path / "c2")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {captions}:{len(rows) + 1}: the caption selected for "), err
    assert len(err.splitlines()) == 1 and not (tmp_path / "c2").exists()


def test_a_study_from_a_describe_run_keeps_its_references(report_runs, tmp_path):
    """Each image's references come from the describe run's captions.jsonl (they were once dropped: the
    rankings carried "references": [] and `correlate --metrics bleu1` refused them)."""
    describe = report_runs["describe"]
    refs = {
        r["image"]: r["references"]
        for r in map(json.loads, (describe / "captions.jsonl").read_text().splitlines())
    }
    assert all(refs.values())
    study = tmp_path / "study"
    assert main(["annotate", "build", "--candidates", str(describe), "--out", str(study)]) == 0
    items = json.loads((study / "study.json").read_text())["items"]
    assert {it["image"]: it["references"] for it in items} == refs
    exports = []
    for k in (1, 2):
        data = page_data(study / "pages" / f"annotator-{k}.html")
        exports.append(write_export(tmp_path / f"a{k}.jsonl", data, in_order(data, lambda it: [0, 1])))
    col = tmp_path / "c"
    assert (
        main(["annotate", "collect", str(study), *map(str, exports), "--bootstrap", "20", "--out", str(col)])
        == 0
    )
    lines = [json.loads(x) for x in (col / "rankings.jsonl").read_text().splitlines()]
    assert all(line["references"] == refs[line["image"]] for line in lines)
    corr = [
        "correlate",
        "--preferences",
        str(col / "rankings.jsonl"),
        "--format",
        "ranking",
        "--metrics",
        "bleu1",
    ]
    assert main([*corr, "--bootstrap", "20", "--out", str(tmp_path / "corr")]) == 0


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_rebuilt_study_hands_out_exactly_its_own_pages(tmp_path):
    """pages/ is replaced as a whole: a rebuild with fewer annotators or images leaves no page or image of the
    earlier build (they once stayed, to be handed out), and a consensus pass goes with the build it was made
    for; a rebuild that keeps the checksum keeps its pass."""
    argv = ["annotate", "build", "--images", str(SAMPLE), "--out", str(tmp_path / "study")]
    three = sample_candidates(tmp_path / "three.csv", limit=3)
    assert main([*argv, "--candidates", str(three), "--annotators", "3"]) == 0
    study = tmp_path / "study"
    collected = tmp_path / "collected"
    exports = _exports(study, tmp_path)
    assert (
        main(
            [
                "annotate",
                "collect",
                str(study),
                *map(str, exports),
                "--bootstrap",
                "20",
                "--out",
                str(collected),
            ]
        )
        == 0
    )
    assert main(["annotate", "build", "--only", "contested", "--collected", str(collected)]) == 0
    before = _digests(study / "pages")
    assert "consensus.html" in before and (study / "consensus.json").is_file()
    assert (
        main([*argv, "--candidates", str(three), "--annotators", "3"]) == 0
    )  # the same study: its pass stays
    assert _digests(study / "pages") == before and (study / "consensus.json").is_file()
    two = sample_candidates(tmp_path / "two.csv", limit=2)
    assert main([*argv, "--candidates", str(two), "--annotators", "2"]) == 0
    pages = ["annotator-1.html", "annotator-2.html", "images/0001.jpg", "images/0002.jpg"]
    assert _listing(study / "pages") == pages
    assert not (study / "consensus.json").exists()
    assert not [p.name for p in study.iterdir() if p.name.endswith(".partial")]  # the staged pages went


def test_a_ranking_csv_of_several_raters_is_a_candidates_table(tmp_path):
    """A ranking CSV repeats each (image, model, caption) once per rater: the repeats are one candidate (they
    were once refused as 'model X already has a candidate'); ranks and raters are ignored."""
    example = Path(__file__).resolve().parents[2] / "preference_data" / "examples" / "ranking_example.csv"
    head, *rows = example.read_text().splitlines()
    table = tmp_path / "two-raters.csv"
    table.write_text("\n".join([head, *rows, *(r.replace(",consensus,", ",rater2,") for r in rows)]) + "\n")
    out = tmp_path / "study"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(SAMPLE), "--out", str(out)]
    assert main(argv) == 0
    single = tmp_path / "single"
    assert main([*argv[:3], str(example), *argv[4:-1], str(single)]) == 0
    items = json.loads((out / "study.json").read_text())["items"]
    assert [it["candidates"] for it in items] == [
        it["candidates"] for it in json.loads((single / "study.json").read_text())["items"]
    ]


def test_the_collected_files_do_not_depend_on_the_exports_order(study, tmp_path):
    """The same exports in another order give the same bytes (judgments.jsonl once followed the arguments)."""
    exports = _exports(study, tmp_path)
    outs = []
    for k, order in enumerate((exports, exports[::-1])):
        outs.append(tmp_path / f"c{k}")
        argv = ["annotate", "collect", str(study), *map(str, order), "--bootstrap", "20"]
        assert main([*argv, "--out", str(outs[-1])]) == 0
    first, second = (_digests(o) for o in outs)
    del first["run.json"], second["run.json"]  # it records the command line
    assert first == second and "judgments.jsonl" in first
