#!/usr/bin/env bash
# Peak memory (max RSS) of `eval --method bm25` over the first N TabFact test claims, for each N
# given (default 1000 10000): the run must keep memory flat as the query count grows, since
# records stream to queries.jsonl and only their scores stay in memory.
#
#   scripts/eval-rss.sh [N ...]        # needs ../shared (or $TABLESEEK_SHARED) and models/
#
# QA stays real (SmolLM2-135M, the smallest bundled model) but cheap: one new token, tables cut
# to 400 characters, so 10,000 queries take minutes; what is measured is the harness, not the model.
set -euo pipefail
cd "$(dirname "$0")/.."
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000 10000)
bin=${TABLESEEK_BIN:-target/release/tableseek}
[ -x "$bin" ] || cargo build --release --quiet
model=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%8s %12s %10s\n' queries max_rss_MiB seconds
for n in "${counts[@]}"; do
  start=$(date +%s.%N)
  /usr/bin/time -f '%M' -o "$work/rss-$n" "$bin" eval --dataset tabfact-test --limit "$n" \
    --method bm25 --model "$model" --threads 1 --max-new-tokens 1 --max-table-chars 400 \
    --no-timings --out "$work/run-$n" > /dev/null 2> "$work/log-$n" ||
    { tail -20 "$work/log-$n"; exit 1; }
  end=$(date +%s.%N)
  kib=$(tail -1 "$work/rss-$n")
  printf '%8d %12.1f %10.1f\n' "$n" "$(echo "$kib / 1024" | bc -l)" "$(echo "$end - $start" | bc -l)"
done
