#!/usr/bin/env bash
# Evaluation throughput at several --concurrency levels, and whether the records agree.
#
#   scripts/eval-concurrency.sh [LIMIT] [LEVELS]      (defaults 100, "1 4 8")
#
# Runs TableSeek with the default model on the first LIMIT TabFact test-1k claims once per level
# (2 threads), and prints per level: wall seconds, prompt tokens, the share served from the prefix
# cache, R@1 and accuracy. Each level's queries.jsonl is compared with the first level's after
# zeroing what `--no-timings` zeroes (times, and cache hits, which depend on what ran alongside).
# Outputs go to $OUT (default /tmp/eval-concurrency).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-100}
LEVELS=${2:-1 4 8}
OUT=${OUT:-/tmp/eval-concurrency}
MODEL=${MODEL:-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
export TABLESEEK_SHARED=${TABLESEEK_SHARED:-../shared}
cargo build --quiet --release --bin tableseek
mkdir -p "$OUT"
for c in $LEVELS; do
  rm -rf "$OUT/c$c"
  start=$(date +%s.%N)
  target/release/tableseek eval --dataset tabfact-test-1k --limit "$LIMIT" --threads 2 \
    --model "$MODEL" --method tableseek --steps 5 --concurrency "$c" --out "$OUT/c$c" \
    > "$OUT/c$c.log" 2>&1
  end=$(date +%s.%N)
  echo "$c $start $end" >> "$OUT/walls.txt"
done
python3 - "$OUT" $LEVELS <<'PY'
import json, sys
out, levels = sys.argv[1], sys.argv[2:]
walls = {}
for line in open(f"{out}/walls.txt"):
    c, s, e = line.split()
    walls[c] = float(e) - float(s)

def normalized(record):
    cost = record.get("cost", {})
    cost["cached_tokens"] = 0
    cost["ms"] = {k: 0.0 for k in cost.get("ms", {})}
    t = record.get("trajectory")
    if t:
        for call in t.get("calls", []):
            call["ms"], call["cached_tokens"] = 0.0, 0
            if call.get("sql"):
                call["sql"]["ms"] = 0.0
        t["totals"]["ms"], t["totals"]["cached_tokens"] = 0.0, 0
    return json.dumps(record, sort_keys=True)

reference = None
print("| concurrency | wall s | s/query | prompt tokens | from prefix cache | R@1 | Acc | records vs first |")
print("|---|---|---|---|---|---|---|---|")
for c in levels:
    records = [json.loads(l) for l in open(f"{out}/c{c}/queries.jsonl")]
    prompt = sum(r["cost"]["prompt_tokens"] for r in records)
    cached = sum(r["cost"]["cached_tokens"] for r in records)
    n = len(records)
    r1 = sum(float(r["metrics"].get("r_at_1", 0)) for r in records) / n
    acc = sum(float(r["metrics"].get("correct", r["metrics"].get("acc", 0))) for r in records) / n
    norm = [normalized(r) for r in records]
    same = "reference" if reference is None else ("equal" if norm == reference else
            f"DIFFER at {sum(a != b for a, b in zip(norm, reference))} of {n}")
    reference = reference or norm
    print(f"| {c} | {walls[c]:.1f} | {walls[c]/n:.2f} | {prompt} | {cached/prompt:.3f} | {r1:.3f} | {acc:.3f} | {same} |")
PY
