"""README examples run as written (each uses the smoke preset)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_quick_start_leads_with_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    assert first[0].startswith("./dev reconscore score --preset smoke") and first[1].startswith("./dev test")
    ci = (REPO / ".ci" / "run").read_text()
    assert "./dev test" in ci


def test_python_examples_run(monkeypatch):
    monkeypatch.chdir(REPO)
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
    assert 0 <= namespace["best"].recon_score <= 100
    assert list(namespace["table"].columns[:3]) == ["bleu4", "cider", "rouge"]
    assert 0.9 <= namespace["recall"] <= 1.0
