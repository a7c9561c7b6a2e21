"""The README is a front page: two commands first, a table of contents, small; the rest lives in docs/."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_quick_start_leads_with_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    assert first[0].startswith("./dev reconscore score --preset smoke") and first[1].startswith("./dev test")
    ci = (REPO / ".ci" / "run").read_text()
    # CI calls the README's test command itself, and lists the slowest tests so the suite stays fast
    assert re.search(r"^\./dev test .*--durations=25", ci, re.M), ci


def test_front_page_is_small_with_contents():
    assert len(README.encode()) < 12 * 1024
    contents = re.search(r"\*\*Contents:\*\*(.*?)\n\n", README, re.S).group(1)
    anchors = re.findall(r"\(#([a-z0-9-]+)\)", contents)
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", README, re.M)
    }
    assert anchors and set(anchors) <= headings
    for word in ("seed 000", "seed 001", "seed 002", "seed 004"):
        assert word not in README  # papers are named by title, not by an internal file number


def test_citation_file():
    cff = (REPO / "CITATION.cff").read_text(encoding="utf-8")
    assert "cff-version:" in cff and "Evaluating Remote Sensing Image Captions Beyond Metric Biases" in cff


def test_the_tour_writes_only_where_git_looks_away():
    """Every file the tour writes is under a folder the repository's .gitignore covers, so `git status` stays
    clean after it in a fresh clone (tests/test_docs.py runs the tour and checks the folder it ran in)."""
    import shlex
    import subprocess

    tour = re.search(r"## A five-minute tour.*?```bash offline\n(.*?)```", README, re.S).group(1)
    outs = [shlex.split(line, comments=True) for line in tour.strip().splitlines()]
    outs = [argv[argv.index("--out") + 1] for argv in outs if "--out" in argv]
    assert len(outs) == 3
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", *outs], capture_output=True, text=True
    ).stdout.split()
    assert ignored == outs
