#!/usr/bin/env bash
# Times the whole `tableseek grep` process (load + parse + score + previews) against ripgrep's
# `rg -i -c` with the same 8 case-insensitive patterns over the same directory, alternating the two
# for several runs so that both see the same machine state, and prints the ratio of the medians last.
#
# usage: scripts/bench-grep.sh [TABLE_DIR]    (default ../shared/data/tabfact/tables)
#   RUNS=N        timed runs of each (default 15, after one warm-up each)
#   TABLESEEK_SHARED=DIR   where `shared/` is, when not beside the repository
set -euo pipefail

cd "$(dirname "$0")/.."
shared="${TABLESEEK_SHARED:-../shared}"
tables="${1:-$shared/data/tabfact/tables}"
runs="${RUNS:-15}"

if [[ ! -d "$tables" ]]; then
    echo "no table directory at $tables (pass one, or set TABLESEEK_SHARED)" >&2
    exit 2
fi
if ! command -v rg >/dev/null 2>&1; then
    echo "installing ripgrep" >&2
    apt-get update -qq && apt-get install -y -qq ripgrep >/dev/null
fi

cargo build --release --quiet --bin tableseek
bin="${CARGO_TARGET_DIR:-target}/release/tableseek"

patterns=(capital "seat of government" australia population "19[0-9]{2}" canberra district year)
ts_args=()
rg_args=()
for p in "${patterns[@]}"; do
    ts_args+=(-p "$p")
    rg_args+=(-e "$p")
done

run_ts() { "$bin" grep "$tables" "${ts_args[@]}" --json >/dev/null; }
# rg exits 1 when nothing matches; only a real failure (2) should stop the bench.
run_rg() { rg -i -c "${rg_args[@]}" "$tables" >/dev/null || [[ $? -eq 1 ]]; }

# Milliseconds (3 decimals) of one run of "$@".
time_ms() {
    local start end
    start=$(date +%s%N)
    "$@"
    end=$(date +%s%N)
    awk -v ns="$((end - start))" 'BEGIN { printf "%.3f", ns / 1e6 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "tables: $tables ($(find "$tables" -type f | wc -l) files)"
echo "tableseek: $bin"
echo "rg: $(rg --version | head -1)"
echo "patterns: ${patterns[*]}"

run_ts
run_rg
ts_times=()
rg_times=()
for ((i = 1; i <= runs; i++)); do
    # Alternate which goes first so neither always runs right after the other.
    if ((i % 2)); then
        t=$(time_ms run_ts)
        r=$(time_ms run_rg)
    else
        r=$(time_ms run_rg)
        t=$(time_ms run_ts)
    fi
    ts_times+=("$t")
    rg_times+=("$r")
    printf 'run %2d  tableseek %8.3f ms  rg %8.3f ms\n' "$i" "$t" "$r"
done

ts_median=$(printf '%s\n' "${ts_times[@]}" | median)
rg_median=$(printf '%s\n' "${rg_times[@]}" | median)
echo "median tableseek: $ts_median ms"
echo "median rg: $rg_median ms"
awk -v t="$ts_median" -v r="$rg_median" 'BEGIN { printf "ratio tableseek/rg: %.2f\n", t / r }'
