"""The ranking page in a real headless Chromium (Playwright, the system's browser): two annotators rank the bundled
sample's candidates with the keyboard, export (the download is captured), `annotate collect` validates and
unblinds, `correlate --format ranking` reads the result; then a consensus pass settles the contested images."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from eval.cli import main
from tests.eval.annotate_helpers import sample_candidates

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(), reason=f"no Chromium installed ({CHROMIUM}): the page cannot be driven"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (a dev dependency)")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def rank_by_keyboard(
    browser, page_file: Path, order, save_as: Path, notes: dict | None = None, *, mouse: bool = False
) -> dict:
    """Open the page from file://, press each image's candidates best first (order(item, captions) -> page
    positions; `mouse`: click them instead), Enter to the next image, a note where asked; after the first
    image, reload the page (the autosave restores it); export and keep the download. Returns the page's
    embedded data."""
    ctx = browser.new_context(accept_downloads=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    data = json.loads(page.inner_text("#study-data"))
    for it in data["items"]:
        assert page.inner_text("#cands").count("\n") >= len(it["captions"]) - 1
        for pos in order(it["id"], it["captions"]):
            if mouse:
                page.click(f".cand[data-pos='{pos}']")
            else:
                page.keyboard.press(f"Digit{pos + 1}")
        if notes and it["id"] in notes:
            page.keyboard.press("n")
            page.keyboard.type(notes[it["id"]])
            page.keyboard.press("Escape")
        page.keyboard.press("Enter")
        if it is data["items"][0]:
            page.reload()
            page.wait_for_selector("body[data-ready='1']")
            assert page.inner_text("#progress").startswith(
                f"1 of {len(data['items'])} images ranked · image 2"
            )
    progress = page.inner_text("#progress")
    with page.expect_download() as download:
        page.click("#export")
    download.value.save_as(save_as)
    ctx.close()
    assert not errors, errors
    assert progress.startswith(f"{len(data['items'])} of {len(data['items'])} images ranked"), progress
    return data


def _csv(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def test_two_annotators_rank_export_collect_and_correlate(browser, tmp_path, capsys):
    table = sample_candidates(tmp_path / "candidates.csv")
    study = tmp_path / "study"
    sample = Path(__file__).resolve().parents[2] / "recon_score" / "sample"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(sample), "--annotators", "2"]
    assert main([*argv, "--out", str(study)]) == 0
    model_of = {(r["image"], r["candidate"]): r["model"] for r in _csv(table)}
    image_of = {it["id"]: it["image"] for it in json.loads((study / "study.json").read_text())["items"]}

    def by_models(*models):  # page positions, best first, of the candidates these models wrote
        def order(item, captions):
            mine = [model_of[(image_of[item], c)] for c in captions]
            return [mine.index(m) for m in models]

        return order

    reference_first = by_models("reference", "distractor-a", "distractor-b")  # annotator 1, every image

    def disagree_on_two(item, captions):  # annotator 2: the same, except distractor-a first on two images
        swapped = by_models("distractor-a", "reference", "distractor-b")
        return (swapped if item in ("i0002", "i0005") else reference_first)(item, captions)

    pages = study / "pages"
    html = (pages / "annotator-1.html").read_text()
    assert "distractor" not in html and "reference" not in html.replace("references", "")  # blind
    assert "model" not in json.dumps(json.loads(html.split('id="study-data">')[1].split("</script>")[0]))

    a1 = tmp_path / "a1.jsonl"
    a2 = tmp_path / "a2.jsonl"
    rank_by_keyboard(
        browser, pages / "annotator-1.html", reference_first, a1, notes={"i0003": "roads </script>"}
    )
    rank_by_keyboard(browser, pages / "annotator-2.html", disagree_on_two, a2)
    assert json.loads(a1.read_text().splitlines()[0])["annotator"] == "annotator-1"

    collected = tmp_path / "collected"
    assert (
        main(
            [
                "annotate",
                "collect",
                str(study),
                str(a1),
                str(a2),
                "--bootstrap",
                "30",
                "--out",
                str(collected),
            ]
        )
        == 0
    )
    consensus = [json.loads(line) for line in (collected / "consensus.jsonl").read_text().splitlines()]
    assert len(consensus) == 9
    for line in consensus:  # unblinded: the reference is first wherever both annotators put it first
        ranks = {c["model"]: c["rank"] for c in line["candidates"]}
        assert ranks["reference"] == 1
    contested = [r["item"] for r in _csv(collected / "contested.csv")]
    assert sorted(contested) == ["i0002", "i0005"]
    wins = {r["model"]: float(r["wins"]) for r in _csv(collected / "win_share.csv")}
    assert wins["reference"] == pytest.approx(
        7 + 2 * 0.5
    )  # a tie for first on the contested images splits it
    notes = [json.loads(x)["note"] for x in (collected / "judgments.jsonl").read_text().splitlines()]
    assert "roads </script>" in notes

    out = tmp_path / "corr"
    corr = ["correlate", "--preferences", str(collected / "rankings.jsonl"), "--format", "ranking"]
    assert main([*corr, "--metrics", "bleu1", "--bootstrap", "20", "--out", str(out)]) == 0
    assert (out / "correlations.csv").is_file()

    consensus_pass(browser, tmp_path, study, collected, contested, [a1, a2], disagree_on_two)


def consensus_pass(browser, tmp_path, study, collected, contested, exports, order) -> None:
    """A page with the contested images and both rankings, ranked with the mouse; its export is the final
    word for those images (here: distractor-a first on both)."""
    pages = study / "pages"
    a1, a2 = exports
    disagree_on_two = order
    assert main(["annotate", "build", "--only", "contested", "--collected", str(collected)]) == 0
    data = json.loads((study / "consensus.json").read_text())
    assert data["items"] == contested or sorted(data["items"]) == sorted(contested)
    final = tmp_path / "consensus.jsonl"

    shown = rank_by_keyboard(browser, pages / "consensus.html", disagree_on_two, final, mouse=True)
    assert all(len(it["shown"]) == 2 for it in shown["items"])
    again = tmp_path / "collected-2"
    args = ["annotate", "collect", str(study), str(a1), str(a2), str(final), "--bootstrap", "20"]
    assert main([*args, "--out", str(again)]) == 0
    settled = {
        line["image"]: {c["model"]: c["rank"] for c in line["candidates"]}
        for line in map(json.loads, (again / "consensus.jsonl").read_text().splitlines())
    }
    assert settled["images/UCM_2.tif"]["reference"] == 2 and settled["images/UCM_5.tif"]["reference"] == 2
    assert settled["images/UCM_1.tif"]["reference"] == 1


def test_key_0_chooses_the_10th_caption_and_nothing_where_an_image_has_fewer(browser, tmp_path):
    """`0` is the 10th caption's key; on an image with fewer captions it does nothing (it once ranked a caption
    at position -1: the export carried "undefined" as a label and collect refused the whole file)."""
    sample = Path(__file__).resolve().parents[2] / "recon_score" / "sample"
    table = tmp_path / "c.jsonl"
    rows = [("images/UCM_1.tif", k) for k in range(10)] + [("images/UCM_2.tif", k) for k in range(3)]
    table.write_text(
        "".join(json.dumps({"image": i, "candidate": f"c{k}", "model": f"m{k}"}) + "\n" for i, k in rows)
    )
    study = tmp_path / "study"
    argv = ["annotate", "build", "--candidates", str(table), "--images", str(sample), "--annotators", "1"]
    assert main([*argv, "--out", str(study)]) == 0
    ctx = browser.new_context(accept_downloads=True)
    page = ctx.new_page()
    page.goto((study / "pages" / "annotator-1.html").resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    data = json.loads(page.inner_text("#study-data"))
    page.keyboard.press("Digit0")  # the 10th caption first
    assert page.inner_text(".cand[data-pos='9'] .rank") == "rank 1"
    for k in range(1, 10):
        page.keyboard.press(f"Digit{k}")
    page.keyboard.press("Enter")
    page.keyboard.press("Digit0")  # three captions: no 10th
    assert page.locator(".cand.ranked").count() == 0
    for k in (1, 2, 3):
        page.keyboard.press(f"Digit{k}")
    assert page.inner_text("#progress").startswith("2 of 2 images ranked")
    export = tmp_path / "a1.jsonl"
    with page.expect_download() as download:
        page.click("#export")
    download.value.save_as(export)
    ctx.close()
    lines = [json.loads(x) for x in export.read_text().splitlines()[1:]]
    assert [sorted(x["ranks"]) for x in lines] == [list("ABCDEFGHIJ"), list("ABC")]
    collected = tmp_path / "collected"
    args = ["annotate", "collect", str(study), str(export), "--bootstrap", "20", "--out", str(collected)]
    assert main(args) == 0
    first = json.loads((collected / "judgments.jsonl").read_text().splitlines()[0])
    tenth = data["items"][0]["captions"][9]  # the caption shown 10th, in the study's own order: ranked 1
    assert first["ranks"][[f"c{k}" for k in range(10)].index(tenth)] == 1
