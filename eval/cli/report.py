"""`reconscore report`: one static HTML page (paginated for big runs) of score/describe/correlate/study/retrieve
runs."""

from __future__ import annotations

from pathlib import Path

import click

from eval.cli import options as opt


@click.command(
    "report",
    epilog="""\b
Examples:
  reconscore report runs/sample runs/describe-smoke runs/corr --out report.html
  reconscore report runs/big --out big.html --thumbnails link --page-size 100
\b
Shows, per image, the original and the reconstruction of every caption with its scores, the describer's
candidates ranked (the selected one outlined), correlation tables with tau bars, study tables and curves,
score histograms, retrieval tables and (for `retrieve --topk K` runs) each query's reference image with every
method's top-K images, positives outlined. Self-contained by default (thumbnails and plots embedded); opens
offline; each distinct thumbnail is embedded once per page.""",
)
@click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="HTML file to write."
)
@opt.choice(
    "--thumbnails",
    choices=["embed", "link"],
    default="embed",
    help="embed thumbnails in the page, or write them to OUT_files/ and link them.",
)
@opt.positive_int(
    "--page-size", default=50, help="Images per run per page; more pages are written as OUT-p2.html, ..."
)
@opt.positive_int(
    "--page-rows",
    default=250,
    help="Captions (entries) per run per page; an image with more continues on the next page.",
)
@click.option("--title", default="reconscore report", show_default=True, help="Page title.")
def command(run_dirs, out, thumbnails, page_size, page_rows, title) -> int:
    """Render runs as a static HTML report (originals, reconstructions, scores, candidates, tables, plots)."""
    from eval.report.build import build_report

    pages = build_report(
        list(run_dirs), out, images=thumbnails, page_size=page_size, page_rows=page_rows, title=title
    )
    click.echo(f"wrote {pages[0]}" + (f" (+{len(pages) - 1} more pages)" if len(pages) > 1 else ""))
    return 0
