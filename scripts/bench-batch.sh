#!/usr/bin/env bash
# Aggregate decoding speed with 1, 4, 8 and 16 parallel sequences, side by side with llama.cpp's
# batched decoding of the same number of sequences (llama-cpp-python's batch API, one sequence id
# per stream, unified KV), alternating runs, medians and ratios printed last.
#
#   scripts/bench-batch.sh [MODEL]          (default models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)
#   RUNS=3 THREADS=2 NPL=1,4,8,16 PP=128 TG=32 scripts/bench-batch.sh models/smollm2-135m-instruct-q4_1.gguf
#
# llama.cpp comes from llama-cpp-python 0.3.36, built once into $LLAMA_CPP_VENV (see bench-engine.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
RUNS=${RUNS:-3}
THREADS=${THREADS:-2}
NPL=${NPL:-1,4,8,16}
PP=${PP:-128}
TG=${TG:-32}
LLAMA_CPP_VENV=${LLAMA_CPP_VENV:-$HOME/.cache/tableseek/llama-cpp-python-0.3.36}

[ -f "$MODEL" ] || { echo "bench-batch: $MODEL not found (run scripts/fetch-models.sh)" >&2; exit 1; }
if ! "$LLAMA_CPP_VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  echo "bench-batch: no llama-cpp-python in $LLAMA_CPP_VENV; run scripts/bench-engine.sh once to build it" >&2
  exit 1
fi

OURS=${BATCH_BENCH_BIN:-}
if [ -z "$OURS" ]; then
  echo "bench-batch: building examples/batch_bench (release)" >&2
  cargo build --quiet --release --example batch_bench
  OURS=target/release/examples/batch_bench
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for run in $(seq 1 "$RUNS"); do
  echo "bench-batch: run $run/$RUNS" >&2
  RAYON_NUM_THREADS=$THREADS "$OURS" "$MODEL" "$NPL" "$PP" "$TG" "$THREADS" | tee -a "$results" >&2
  "$LLAMA_CPP_VENV/bin/python" scripts/llamacpp_batched.py "$MODEL" "$THREADS" "$NPL" "$PP" "$TG" \
    | tee -a "$results" >&2
done

python3 - "$results" "$MODEL" "$THREADS" "$NPL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
npls = [int(n) for n in sys.argv[4].split(",")]
med = {impl: {n: statistics.median(r[f"tg_npl{n}"] for r in rows if r["impl"] == impl) for n in npls}
       for impl in ("tableseek", "llama.cpp")}
print(f"model {sys.argv[2]}, {sys.argv[3]} threads, {len(rows) // 2} alternating runs, "
      "aggregate decode tokens/s (medians)")
print(f"{'seqs':>5} {'tableseek':>10} {'llama.cpp':>10} {'ratio':>7} {'ours vs ours@1':>15}")
for n in npls:
    a, b = med["tableseek"][n], med["llama.cpp"][n]
    print(f"{n:5} {a:10.1f} {b:10.1f} {a / b:7.2f} {a / med['tableseek'][npls[0]]:15.2f}")
PY
