#!/usr/bin/env bash
# Engine speed side by side with llama.cpp on the same GGUF: prompt processing (128 and 512 tokens)
# and generation (128 tokens) in tokens/s, alternating runs, medians and ratios printed last.
#
#   scripts/bench-engine.sh [MODEL]          (default models/smollm2-135m-instruct-q4_1.gguf)
#   RUNS=5 THREADS=2 WEIGHTS=dense-q8 [ENGINE_BENCH_BIN=path] scripts/bench-engine.sh
#
# llama.cpp comes from llama-cpp-python 0.3.36 (PyPI), which builds llama.cpp from source on first
# use (about 9 minutes on 2 cores); the build is cached in $LLAMA_CPP_VENV, outside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-models/smollm2-135m-instruct-q4_1.gguf}
RUNS=${RUNS:-3}
THREADS=${THREADS:-2}
WEIGHTS=${WEIGHTS:-dense-q8}
LLAMA_CPP_VENV=${LLAMA_CPP_VENV:-$HOME/.cache/tableseek/llama-cpp-python-0.3.36}

[ -f "$MODEL" ] || { echo "bench-engine: $MODEL not found (run scripts/fetch-models.sh)" >&2; exit 1; }

if ! "$LLAMA_CPP_VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  echo "bench-engine: building llama-cpp-python 0.3.36 into $LLAMA_CPP_VENV (once; several minutes)" >&2
  python3 -m venv "$LLAMA_CPP_VENV"
  "$LLAMA_CPP_VENV/bin/pip" install --quiet --upgrade pip
  # Native CPU build, as a user of llama.cpp on this machine would get it.
  CMAKE_ARGS="-DGGML_NATIVE=ON" "$LLAMA_CPP_VENV/bin/pip" install --quiet --no-cache-dir \
    llama-cpp-python==0.3.36
fi

# ENGINE_BENCH_BIN: an already built engine_bench (e.g. to compare two builds); else build it.
OURS=${ENGINE_BENCH_BIN:-}
if [ -z "$OURS" ]; then
  echo "bench-engine: building examples/engine_bench (release)" >&2
  cargo build --quiet --release --example engine_bench
  OURS=target/release/examples/engine_bench
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for run in $(seq 1 "$RUNS"); do
  echo "bench-engine: run $run/$RUNS" >&2
  RAYON_NUM_THREADS=$THREADS "$OURS" "$MODEL" 128,512 128 "$WEIGHTS" "$THREADS" | tee -a "$results" >&2
  "$LLAMA_CPP_VENV/bin/python" scripts/llamacpp_bench.py "$MODEL" "$THREADS" 128,512 128 \
    | tee -a "$results" >&2
done

python3 - "$results" "$MODEL" "$THREADS" "$WEIGHTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = ["pp128", "pp512", "tg128"]
med = {impl: {k: statistics.median(r[k] for r in rows if r["impl"] == impl) for k in keys}
       for impl in ("tableseek", "llama.cpp")}
print(f"model {sys.argv[2]}, {sys.argv[3]} threads, tableseek weights {sys.argv[4]}, "
      f"{len(rows) // 2} alternating runs, medians in tokens/s")
print(f"{'test':8} {'tableseek':>10} {'llama.cpp':>10} {'ratio':>7}")
for k in keys:
    a, b = med["tableseek"][k], med["llama.cpp"][k]
    print(f"{k:8} {a:10.1f} {b:10.1f} {a / b:7.2f}")
print("ratios tableseek/llama.cpp: " + ", ".join(
    f"{k} {med['tableseek'][k] / med['llama.cpp'][k]:.2f}" for k in keys))
PY
