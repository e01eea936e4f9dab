#!/usr/bin/env bash
# MiniLM encoding throughput on the TabFact tables: tableseek (candle, CPU) against
# sentence-transformers (PyTorch CPU), same model folder, same max length (256), same batch size,
# same thread count, alternating runs so machine load hits both alike. Prints the median
# tables/s of each and, last, the ratio ours / theirs.
#
#   scripts/bench-embed.sh [ROUNDS]        (default 3)
#
# Env: TABLESEEK_SHARED (default ../shared), TABLESEEK_MODELS (default models),
#      THREADS (default: all cores), BENCH_VENV (default ~/.cache/tableseek-bench-venv).
# The venv is made on first use (torch CPU wheels, then sentence-transformers); it lives outside
# the repo so it survives checkouts.
set -euo pipefail

cd "$(dirname "$0")/.."
rounds=${1:-3}
shared=${TABLESEEK_SHARED:-../shared}
models=${TABLESEEK_MODELS:-models}
model="$models/all-MiniLM-L6-v2"
tables="$shared/data/tabfact/tables"
threads=${THREADS:-$(nproc)}
venv=${BENCH_VENV:-$HOME/.cache/tableseek-bench-venv}

[[ -d $tables ]] || { echo "no $tables (set TABLESEEK_SHARED)" >&2; exit 1; }
[[ -f $model/model.safetensors ]] || { echo "no $model (set TABLESEEK_MODELS)" >&2; exit 1; }

if ! "$venv/bin/python" -c 'import sentence_transformers' 2>/dev/null; then
    python3 -m venv "$venv"
    # CPU-only torch wheels keep the venv small; plain PyPI torch pulls in CUDA libraries.
    "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu \
        || "$venv/bin/pip" install -q torch
    "$venv/bin/pip" install -q sentence-transformers
fi

cargo build --release -q
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo '{"qid": 0, "query": "warm-up"}' > "$work/query.jsonl"

ours() {
    RAYON_NUM_THREADS=$threads ./target/release/tableseek retrieve --method dense --no-cache \
        --corpus "$tables" --queries "$work/query.jsonl" --embed-model "$model" \
        --out "$work/run.jsonl" 2>&1 \
        | sed -n 's/.*(\([0-9.]*\) tables\/s).*/\1/p'
}

theirs() {
    OMP_NUM_THREADS=$threads "$venv/bin/python" - "$model" "$tables" "$threads" <<'PY'
import os, sys, time
import torch
from sentence_transformers import SentenceTransformer
model_dir, tables, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 256
texts = [open(os.path.join(tables, f), encoding="utf-8").read() for f in sorted(os.listdir(tables))]
start = time.perf_counter()
model.encode(texts, batch_size=32, normalize_embeddings=True)
print(f"{len(texts) / (time.perf_counter() - start):.2f}")
PY
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

: > "$work/ours"; : > "$work/theirs"
for ((i = 1; i <= rounds; i++)); do
    o=$(ours); t=$(theirs)
    echo "round $i: tableseek $o tables/s, sentence-transformers $t tables/s"
    echo "$o" >> "$work/ours"; echo "$t" >> "$work/theirs"
done
o=$(median < "$work/ours"); t=$(median < "$work/theirs")
echo "median: tableseek $o tables/s, sentence-transformers $t tables/s ($threads threads, $rounds rounds)"
awk -v o="$o" -v t="$t" 'BEGIN {printf "ratio tableseek / sentence-transformers: %.2f\n", o / t}'
