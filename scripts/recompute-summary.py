#!/usr/bin/env python3
"""Recompute R@all and Acc of a tableseek run directory from queries.jsonl and check summary.json.

An independent check of the Rust aggregation: R@all is recomputed from the stored gold tables and
tables_seen (not from the stored per-query metrics), Acc from the stored verdict and gold label.

    python3 scripts/recompute-summary.py RUNDIR [RUNDIR...]

Exit status 0 when every run agrees, 1 otherwise. Standard library only.
"""

import json
import sys
from pathlib import Path

TOLERANCE = 1e-9


def read_records(run_dir: Path):
    records = []
    with open(run_dir / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                # A half-written last record (killed run); tableseek ignores it too.
                break
            if line.strip():
                records.append(json.loads(line))
    return records


def recompute(records):
    r_all = [r["gold"]["tables"][0] in r["tables_seen"] for r in records]
    claims = [r for r in records if r["task"] == "fact_verification"]
    # An unverifiable or missing verdict counts as wrong.
    correct = [r.get("verdict") == ("supported" if r["gold"]["label"] == 1 else "refuted") for r in claims]
    return {
        "n": len(records),
        "r_all": sum(r_all) / len(r_all) if r_all else None,
        "acc": sum(correct) / len(correct) if correct else None,
    }


def check(run_dir: Path) -> bool:
    records = read_records(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    ours = recompute(records)
    stored = {"n": summary["n"], "r_all": summary["metrics"]["r_all"], "acc": summary["metrics"]["acc"]}
    ok = True
    for key, value in ours.items():
        other = stored[key]
        same = (value is None and other is None) or (
            value is not None and other is not None and abs(value - other) <= TOLERANCE
        )
        print(f"{run_dir}: {key} recomputed {value} summary {other} {'ok' if same else 'MISMATCH'}")
        ok &= same
    return ok


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    results = [check(Path(arg)) for arg in argv[1:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
