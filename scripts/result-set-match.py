#!/usr/bin/env python3
"""Execution accuracy of SQL QA runs on Spider: the share of queries whose result rows equal the gold
SQL's executed rows (../shared/data/spider/spider_single_table.jsonl), as Spider's own evaluation
compares them: rows as a multiset (a list where the gold SQL orders its result), each row's cells as a
multiset (column order free), numbers compared at 1e-6, text exactly.

    scripts/result-set-match.py RUN_DIR [SPIDER_JSONL]

RUN_DIR is an `eval --qa sql` run of a baseline (oracle, bm25, dense, rerank: each attempt's rows are
in `qa_output`) or of an agent (tableseek, tablerag: in the trajectory's calls), on the
spider-single-table dataset or on a TCR-style query file (`bench build-tcr`: pass it as the second
argument; its `answer_rows` are the gold rows). The last query that ran is the one scored, as
`../shared/method/tablerag.md` defines execution match. Prints matched / total and lists the misses.
"""
import json
import os
import sys
from collections import Counter


def cell(v):
    if v is None:
        return ("null",)
    try:
        x = float(v)
        return ("num", round(x, 6))
    except (TypeError, ValueError):
        return ("text", str(v))


def row_key(row):
    return tuple(sorted(Counter(cell(v) for v in row).items()))


def same(pred, gold, ordered):
    p = [row_key(r) for r in pred]
    g = [row_key(r) for r in gold]
    return p == g if ordered else Counter(p) == Counter(g)


def main():
    run = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "shared", "data", "spider", "spider_single_table.jsonl")
    spider_path = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
        "TABLESEEK_SHARED_SPIDER", default)
    gold = {}
    for line in open(spider_path):
        q = json.loads(line)
        gold[q["qid"]] = q
    matched, total, misses = 0, 0, []
    for line in open(os.path.join(run, "queries.jsonl")):
        rec = json.loads(line)
        q = gold.get(rec["qid"])
        if q is None:
            continue
        total += 1
        if rec.get("trajectory"):
            attempts = [c["sql"] for c in rec["trajectory"]["calls"] if c.get("sql")]
        else:
            try:
                attempts = json.loads(rec.get("qa_output") or "[]")
            except json.JSONDecodeError:
                attempts = []
            if not isinstance(attempts, list):  # text QA: no query
                attempts = []
        ok_attempts = [a for a in attempts if a.get("error") is None and a.get("sql")]
        rows = ok_attempts[-1]["rows"] if ok_attempts else None
        truncated = ok_attempts[-1].get("truncated") if ok_attempts else False
        gold_rows = q["answer_rows"] if "answer_rows" in q else q["answer"]
        ordered = q.get("order_matters", False)
        if rows is not None and not truncated and same(rows, gold_rows, ordered):
            matched += 1
        else:
            misses.append((rec["qid"], ok_attempts[-1]["sql"] if ok_attempts else None))
    print(f"result-set match: {matched}/{total} = {matched / max(total, 1):.3f}")
    for qid, sql in misses:
        print(f"  miss {qid}: {sql!r}"[:200])


if __name__ == "__main__":
    main()
