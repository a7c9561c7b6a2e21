"""The power table of docs/explain.md ("How many seeds"): how often a phrase's paired t-test over K seeds, Holm-
corrected over the caption's phrases, finds a phrase that costs 2 or 4 ReconScore points, and how often a caption
where no phrase matters gets one "significant" phrase (the family-wise error rate, with and without Holm).

Assumptions (recon_score.explain_power.DESIGN): one render's score varies by 2 points over seeds, the renders
with and without a phrase under one seed correlate by 0.5. Analytic columns: the noncentral t
(recon_score.explain_power.paired_power; for Holm over m phrases, its Bonferroni lower bound at level / m).
Simulated columns: `--sims` captions per cell of m phrases, normal scores with that spread and correlation, one
phrase with the effect and the others none, scipy's `ttest_rel` and Holm exactly as `ReconScorer.explain` runs
them.

Usage: ./dev python benchmarks/explain_power.py [--sims 20000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from recon_score.explain import holm
from recon_score.explain_power import DEFAULT_EXPLAIN_SEEDS, DESIGN, paired_power, required_seeds

KS = (2, 3, 4, 5, 6, 7, 8, 10, 12)


def simulate(k: int, m: int, effect: float, sims: int, rng: np.random.Generator, *, correct: bool = True):
    """(share of captions where phrase 0, costing `effect`, is significant; share with >= 1 significant phrase
    among the m - 1 phrases that do nothing, or among all m when effect is 0)."""
    rho, sd = DESIGN.correlation, DESIGN.spread
    z0 = rng.standard_normal((sims, 1, k))
    zk = rng.standard_normal((sims, m, k))
    full = sd * z0
    reduced = sd * (rho * z0 + np.sqrt(1 - rho**2) * zk)
    reduced[:, 0, :] -= effect  # leaving phrase 0 out costs `effect` points
    p = stats.ttest_rel(np.broadcast_to(full, reduced.shape), reduced, axis=-1).pvalue
    adjusted = np.array([holm(list(row)) for row in p]) if correct else p
    sig = adjusted < DESIGN.level
    nulls = sig[:, 1:] if effect else sig
    return float(sig[:, 0].mean()), float(nulls.any(axis=1).mean()) if nulls.shape[1] else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    kw = {"spread": DESIGN.spread, "correlation": DESIGN.correlation, "level": DESIGN.level}
    m = DESIGN.phrases
    print(
        f"seed spread {DESIGN.spread} points, same-seed correlation {DESIGN.correlation}, two-sided level "
        f"{DESIGN.level}; simulated: {args.sims} captions per cell (seed {args.seed})\n"
    )
    print(
        "| K | 2 points, 1 phrase | 4 points, 1 phrase | 4 points, Holm over 3 (bound) | 4 points, Holm over 3 "
        "(simulated) | no effect: FWER of 3, uncorrected | no effect: FWER of 3, Holm | of 8, Holm |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k in KS:
        a2 = paired_power(k, effect=2.0, **kw)
        a4 = paired_power(k, effect=DESIGN.effect, **kw)
        b4 = paired_power(k, effect=DESIGN.effect, phrases=m, **kw)
        s4, _ = simulate(k, m, DESIGN.effect, args.sims, rng)
        _, raw = simulate(k, m, 0.0, args.sims, rng, correct=False)
        _, fwer = simulate(k, m, 0.0, args.sims, rng)
        _, fwer8 = simulate(k, 8, 0.0, args.sims, rng)
        print(f"| {k} | {a2:.0%} | {a4:.0%} | {b4:.0%} | {s4:.0%} | {raw:.1%} | {fwer:.1%} | {fwer8:.1%} |")
    need = required_seeds(DESIGN)
    print(
        f"\nsmallest K with >= {DESIGN.power:.0%} power for a {DESIGN.effect:g}-point phrase, Holm over "
        f"{m} phrases (bound): {need}; the default --explain-seeds is {DEFAULT_EXPLAIN_SEEDS}"
    )


if __name__ == "__main__":
    main()
