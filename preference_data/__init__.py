"""Human-judgment sets (rankings, ratings) and generated robustness sets (issues 5 and 7)."""
