"""How many seeds an explanation needs: the power of the paired t-test behind a phrase's significance
(docs/explain.md, "How many seeds"). No numpy or torch at import: the CLI reads the default when it starts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PowerDesign:
    """The design the default seed count is planned for (docs/explain.md, "How many seeds")."""

    effect: float = 4.0  # ReconScore points a wrong phrase costs
    spread: float = 2.0  # sd of one render's ReconScore over seeds
    correlation: float = 0.5  # between the renders with and without the phrase under one seed
    power: float = 0.8
    level: float = 0.05  # two-sided, family-wise over the caption's phrases
    phrases: int = 3  # phrases tested together (Holm); 3 or fewer in >= 95% of UCM/RSICD/RSITMD test captions


DESIGN = PowerDesign()
DEFAULT_EXPLAIN_SEEDS = 6  # required_seeds(DESIGN); tests/recon_score/test_explain_power.py keeps them equal
MAX_SEEDS = 200


def paired_power(
    seeds: int,
    *,
    effect: float,
    spread: float,
    correlation: float,
    level: float,
    phrases: int = 1,
) -> float:
    """Power of the two-sided paired t-test at level / phrases (Bonferroni: a lower bound of Holm's power for one
    phrase among them) with `seeds` pairs: a noncentral t with seeds - 1 degrees of freedom."""
    from scipy import stats

    if seeds < 2:
        return 0.0  # one seed: no noise estimate, nothing is ever significant
    sd = spread * math.sqrt(2.0 * (1.0 - correlation))
    df, ncp = seeds - 1, effect / sd * math.sqrt(seeds)
    crit = float(stats.t.ppf(1.0 - level / phrases / 2.0, df))
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))


def required_seeds(design: PowerDesign = DESIGN) -> int:
    """The smallest K >= 2 whose power reaches `design.power` (MAX_SEEDS when none up to it does)."""
    test = asdict(design)
    target = test.pop("power")
    for k in range(2, MAX_SEEDS + 1):
        if paired_power(k, **test) >= target:
            return k
    return MAX_SEEDS
