#!/usr/bin/env python3
"""Record reference values for tableseek's significance tests (src/eval/stats.rs).

Run once, by hand:  pip install scipy numpy && python3 scripts/make-stats-fixture.py
Writes tests/fixtures/stats.json. CI never runs this script; the Rust tests only read its output.

Every case stores the paired samples `a` and `b` themselves (floats round-trip exactly through
JSON), so the Rust side computes `a - b` bit-for-bit as numpy does and ties/zeros agree.
The cases cover every branch of scipy.stats.wilcoxon's method="auto" choice:
exact (n <= 50, no ties, no zeros), permutation (n <= 13 with ties or zeros), and the normal
approximation (n > 50, or 14..=50 with ties or zeros).
"""
import json
import pathlib
import sys

import numpy as np
import scipy
from scipy import stats

rng = np.random.default_rng(20261202)


def f1_like(n):
    # Per-query F1 scores look like this: many 0s and 1s, a few fractions, lots of ties.
    return rng.choice([0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 2 / 3, 0.4, 0.8, 0.25], size=n)


def continuous(n, shift):
    base = rng.normal(0.5, 0.2, size=n)
    return base + shift + rng.normal(0, 0.1, size=n), base


cases = {}

a, b = continuous(8, 0.05)
cases["n8_continuous"] = (a, b)
# Ties among |d| but no zeros: d = 0.5 appears three times.
cases["n8_ties"] = (np.array([1.0, 0.5, 1.0, 0.25, 0.75, 1.0, 0.0, 0.5]),
                    np.array([0.5, 0.0, 0.5, 0.5, 0.0, 0.0, 0.5, 0.0]))
# Zeros and ties, small n: scipy runs an exact sign-flip permutation test here.
cases["n10_zeros_ties"] = (np.array([1, 1, 0, 0.5, 1, 0, 0.5, 1, 0.25, 1.0]),
                           np.array([1, 0, 0, 0.0, 0.5, 1, 0.5, 0, 0.25, 0.0]))
a, b = f1_like(13), f1_like(13)
cases["n13_f1"] = (a, b)
a, b = f1_like(14), f1_like(14)
cases["n14_f1"] = (a, b)
a, b = f1_like(20), f1_like(20)
cases["n20_f1"] = (a, b)
a, b = continuous(30, 0.02)
cases["n30_continuous"] = (a, b)
a, b = continuous(50, -0.03)
cases["n50_continuous"] = (a, b)
a, b = continuous(51, 0.03)
cases["n51_continuous"] = (a, b)
a, b = continuous(200, 0.01)
cases["n200_continuous"] = (a, b)
a, b = f1_like(200), f1_like(200)
cases["n200_f1"] = (a, b)
# One system a little better on F1-like data, so the p-value is small but not tiny.
a = f1_like(200)
b = np.where(rng.random(200) < 0.15, 0.0, a)
cases["n200_f1_better"] = (a, b)


def wilcoxon_method(d):
    # Mirrors scipy 1.17's choice for method="auto" (scipy/stats/_wilcoxon.py).
    nonzero = np.abs(d[d != 0])
    has_ties = len(np.unique(nonzero)) != len(nonzero)
    has_zeros = bool(np.any(d == 0))
    if len(d) > 50:
        return "normal"
    if not (has_ties or has_zeros):
        return "exact"
    if len(d) <= 13:
        return "permutation"
    return "normal"


out = {
    "generator": "scripts/make-stats-fixture.py",
    "scipy": scipy.__version__,
    "numpy": np.__version__,
    "cases": [],
}
for name, (a, b) in cases.items():
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    d = a - b
    t = stats.ttest_rel(a, b)
    w = stats.wilcoxon(a, b)
    n = len(d)
    mean = float(np.mean(d))
    sem = float(np.std(d, ddof=1) / np.sqrt(n))
    z = float(stats.norm.ppf(0.975))
    out["cases"].append({
        "name": name,
        "a": a.tolist(),
        "b": b.tolist(),
        "mean_diff": mean,
        "t_test": {"t": float(t.statistic), "df": float(t.df), "p_value": float(t.pvalue)},
        "wilcoxon": {
            "statistic": float(w.statistic),
            "p_value": float(w.pvalue),
            "method": wilcoxon_method(d),
        },
        # Normal-theory 95% interval for the mean difference, a yardstick for the bootstrap.
        "normal_ci": [mean - z * sem, mean + z * sem],
    })

path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "stats.json"
path.write_text(json.dumps(out, indent=1) + "\n")
print(f"wrote {path} ({len(out['cases'])} cases)", file=sys.stderr)
