#!/usr/bin/env python3
"""Issue 17's model-choice table from committed run directories: one row per (query set, model),
over the queries every model of that set finished (so rows compare like with like), plus each
run's own totals. R@1 and R@all of the gold table, Acc (TabFact) or F1 (TCR), the parse share of
pattern-generation and refine calls, and wall seconds per query.

    scripts/model-choice-table.py [RESULTS_DIR]   (default results/model-choice)
"""
import json
import os
import statistics
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "results/model-choice"
MODELS = ["smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
SETS = {"tabfact100": ("correct", "Acc"), "tcr100": ("f1", "F1")}


def load(path):
    with open(path) as f:
        return {r["qid"]: r for r in map(json.loads, f)}


def row(records, score):
    calls = [
        c
        for r in records
        for c in r["trajectory"]["calls"]
        if c["kind"].startswith(("pattern", "refine"))
    ]
    mean = lambda xs: statistics.mean(xs) if xs else float("nan")
    return (
        mean([float(r["metrics"]["r_at_1"]) for r in records]),
        mean([float(r["metrics"]["r_all"]) for r in records]),
        mean([float(r["metrics"][score]) for r in records]),
        mean([1.0 if c["parsed"] else 0.0 for c in calls]),
        mean([r["cost"]["ms"]["total"] / 1000 for r in records]),
    )


print("| set | model | queries | R@1 | R@all | Acc/F1 | parse share | s/query |")
print("|---|---|---|---|---|---|---|---|")
for name, (score, label) in SETS.items():
    runs = {}
    for m in MODELS:
        path = os.path.join(ROOT, f"{name}-{m}", "queries.jsonl")
        if os.path.exists(path):
            runs[m] = load(path)
    if not runs:
        continue
    common = set.intersection(*(set(r) for r in runs.values()))
    # The models that finished the whole set, compared on it.
    full = {m: r for m, r in runs.items() if len(r) >= 100}
    common_full = set.intersection(*(set(r) for r in full.values())) if len(full) > 1 else set()
    scopes = (
        ("common to all", runs, common),
        ("common to the full runs", full, common_full),
    )
    for scope, chosen, qids in scopes:
        if not qids or (scope != "common to all" and qids == common):
            continue
        for m, recs in chosen.items():
            records = [recs[q] for q in sorted(qids)]
            r1, rall, s, parse, secs = row(records, score)
            print(f"| {name} ({label}) | {m} | {len(records)} ({scope}) | {r1:.3f} | {rall:.3f} | {s:.3f} | {parse:.3f} | {secs:.1f} |")
    for m, recs in runs.items():
        if len(recs) in (len(common), len(common_full)):
            continue
        r1, rall, s, parse, secs = row(list(recs.values()), score)
        print(f"| {name} ({label}) | {m} | {len(recs)} (all of its run) | {r1:.3f} | {rall:.3f} | {s:.3f} | {parse:.3f} | {secs:.1f} |")
