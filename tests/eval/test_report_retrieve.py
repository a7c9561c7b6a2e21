"""The retrieve report page: it says what the benchmark's authors do with a query's own image in the database
(and marks it among the top-k), and its tables sort like the score page's, checked in headless Chromium."""

import json
import shutil
from pathlib import Path

import pytest

from eval.cli import main
from tests.retrieval import layouts
from tests.smoke_cli import retrieve_patterncom

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, dict]:
    """A PatternCom smoke run (image, sum, text; top 3) and its report page."""
    tmp = tmp_path_factory.mktemp("retrieve_report")
    run = tmp / "run"
    assert (
        main(retrieve_patterncom(layouts.patterncom(tmp / "pc"), run, "image,sum,text", "--topk", "3")) == 0
    )
    assert main(["report", str(run), "--out", str(tmp / "report.html")]) == 0
    return tmp / "report.html", json.loads((run / "run.json").read_text())


def test_the_page_says_the_query_image_rule_and_marks_the_query_image(page):
    """PatternCom keeps the query's own image as a negative (rscir's evaluate.py): run.json records it with its
    source and counts, the page says it, and where `image` ranks that image first its card badge says so."""
    html_path, run = page
    facts = run["benchmark"]["query_image"]
    assert facts["rule"] == "kept" and "rscir evaluate.py:185,199" in facts["source"]
    assert facts["references_in_database"] == facts["queries"] > 0 and facts["excluded"] == 0
    html = html_path.read_text()
    assert "Query image in the database" in html and "kept: ranked with the database as a negative" in html
    assert f"Here {facts['queries']} of {facts['queries']} queries" in html
    assert html.count('class="badge query image"') >= 1


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
def test_the_retrieve_tables_sort_by_a_header_click_in_chromium(page):
    """Every table of the retrieve page is sortable; a click on a metric's header orders the methods by it
    (ascending, then descending on a second click), and the filter box hides the rows without its text."""
    from playwright.sync_api import sync_playwright

    html_path, _ = page
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            tab.goto(html_path.as_uri())
            section = tab.locator('section[data-kind="retrieve"]')
            tables = section.locator("table")
            assert tables.count() >= 2 and section.locator("table.sortable").count() == tables.count()
            glance = section.locator("table.sortable").first
            column = glance.locator("thead th").all_inner_texts().index("mAP")

            def values() -> list[float]:
                cells = glance.locator(f"tbody tr td:nth-child({column + 1})").all_inner_texts()
                return [float(v) for v in cells]

            header = glance.locator("thead th").nth(column)
            header.locator("button").click()
            assert header.get_attribute("aria-sort") == "ascending" and values() == sorted(values())
            header.locator("button").click()
            assert header.get_attribute("aria-sort") == "descending"
            assert values() == sorted(values(), reverse=True)
            box = section.locator("input.filter").first
            box.fill("sum")
            visible = [r for r in glance.locator("tbody tr").all() if r.is_visible()]
            assert [r.locator("td").first.inner_text() for r in visible] == ["sum"]
        finally:
            browser.close()
