"""The power computation behind the default --explain-seeds, against statsmodels' t-test power (an outside
implementation of the same noncentral-t formula) and the issue's hand-checked values."""

from __future__ import annotations

import math

import pytest

from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS, DESIGN, PowerDesign, paired_power, required_seeds


def test_the_default_is_the_computed_one_and_at_least_five():
    assert required_seeds(DESIGN) == DEFAULT_EXPLAIN_SEEDS >= 5
    kw = {"effect": 4.0, "spread": 2.0, "correlation": 0.5, "level": 0.05, "phrases": 3}
    assert paired_power(DEFAULT_EXPLAIN_SEEDS, **kw) >= 0.8 > paired_power(DEFAULT_EXPLAIN_SEEDS - 1, **kw)


@pytest.mark.parametrize("k", [2, 3, 5, 8, 12])
@pytest.mark.parametrize("effect", [2.0, 4.0])
def test_power_matches_statsmodels(k, effect):
    power = pytest.importorskip("statsmodels.stats.power")
    d = effect / (2.0 * math.sqrt(2 * (1 - 0.5)))  # the per-seed difference's effect size
    for phrases in (1, 3):
        ref = power.TTestPower().power(effect_size=d, nobs=k, alpha=0.05 / phrases, alternative="two-sided")
        got = paired_power(k, effect=effect, spread=2.0, correlation=0.5, level=0.05, phrases=phrases)
        assert got == pytest.approx(ref, abs=1e-9)


def test_the_issue_values_for_a_two_point_phrase():
    """18% at K = 3, 40% at K = 5, 68% at K = 8 (uncorrected), as measured by simulation in the issue."""
    got = [paired_power(k, effect=2.0, spread=2.0, correlation=0.5, level=0.05) for k in (3, 5, 8)]
    assert got == pytest.approx([0.18, 0.40, 0.68], abs=0.01)
    assert paired_power(1, effect=4.0, spread=2.0, correlation=0.5, level=0.05) == 0.0
    assert required_seeds(PowerDesign(effect=0.01)) == 200  # nothing reaches it: the cap


def test_the_docs_cost_example_is_what_the_bundled_captions_cost():
    """docs/explain.md's example cost line, for the bundled explain captions at the default seeds."""
    import json
    import re
    from pathlib import Path

    from recon_score.explain import ExplainOptions
    from recon_score.run import SAMPLE_DIR

    repo = Path(__file__).resolve().parents[2]
    line = re.search(r"explain: (\d+) caption\(s\) x \(phrases \+ 1\) x (\d+) seeds = (\d+) renders", (
        repo / "docs" / "explain.md").read_text(encoding="utf-8"))  # fmt: skip
    rows = [json.loads(x) for x in (SAMPLE_DIR / "explain_captions.jsonl").read_text().splitlines()]
    options = ExplainOptions()
    assert (int(line[1]), int(line[2])) == (len(rows), options.seeds)
    assert int(line[3]) == sum(options.renders(r["caption"]) for r in rows)
