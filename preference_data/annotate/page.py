"""The annotators' pages: one self-contained HTML file each (jinja2 with autoescape; the study's data embedded as
JSON through `tojson`, which escapes <, >, & and ' so no caption can close the script element)."""

from __future__ import annotations

import functools

from preference_data.annotate.study import CRITERIA, LABELS, Item


@functools.cache
def _template():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("preference_data.annotate", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("page.html.j2")


def page_items(items: list[Item], orders: dict[str, list[int]], files: dict[str, str]) -> list[dict]:
    """What a page shows of each item, in its own shuffled order: the image file and the captions under labels
    A, B, C, ... — never a model name."""
    return [
        {
            "id": it.id,
            "file": files[it.image],
            "labels": list(LABELS[: len(it.candidates)]),
            "captions": [it.candidates[j] for j in orders[it.id]],
        }
        for it in items
    ]


def render_page(
    *, study_id: str, checksum: str, annotator: str, round_: str, title: str, ties: bool, items: list[dict]
) -> bytes:
    """One annotator's page (`round_`: "main" or "consensus"; a consensus item may carry `shown`, the
    annotators' rankings in this page's labels)."""
    data = {
        "study": study_id,
        "checksum": checksum,
        "annotator": annotator,
        "round": round_,
        "ties": ties,
        "items": items,
    }
    html = _template().render(
        data=data, title=title, annotator=annotator, round=round_, ties=ties, criteria=CRITERIA
    )
    return html.encode("utf-8")
