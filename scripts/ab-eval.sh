#!/usr/bin/env bash
# A/B of two TableSeek settings on the same queries: runs `tableseek eval --method tableseek` once
# per arm and dataset (resumable: rerun the same command after an interruption), then
# `tableseek compare` per dataset (paired bootstrap, Wilcoxon, t-test on per-query scores).
#
#   scripts/ab-eval.sh NAME "ARGS_A" "ARGS_B"
#   e.g. scripts/ab-eval.sh constrain "--constrain on" "--constrain off"
#        scripts/ab-eval.sh history "--history none" "--history full"
#
# Env: DATASETS (default "tabfact-test-1k spider-single-table"), LIMIT (queries per dataset,
#      default 50), STEPS (default 5), OUT (default runs/ab), BIN (default target/release/tableseek,
#      built when missing), REPEAT=1 also reruns arm A with --no-timings twice and checks that the
#      two query records are byte-identical (the determinism check).
# Extra agent flags for both arms go in COMMON (e.g. COMMON="--strategy 5s3").
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:?usage: scripts/ab-eval.sh NAME "ARGS_A" "ARGS_B"}
args_a=${2:?missing ARGS_A}
args_b=${3:?missing ARGS_B}
datasets=${DATASETS:-tabfact-test-1k spider-single-table}
limit=${LIMIT:-50}
steps=${STEPS:-5}
out=${OUT:-runs/ab}/$name
bin=${BIN:-target/release/tableseek}
[ -x "$bin" ] || cargo build --release --quiet --bin tableseek

run_arm() { # DATASET ARM_DIR ARGS...
  local dataset=$1 dir=$2
  shift 2
  local start=$SECONDS
  # shellcheck disable=SC2086  # COMMON and the arm's args are word lists on purpose
  "$bin" eval --dataset "$dataset" --method tableseek --steps "$steps" --limit "$limit" \
    $COMMON_ARGS "$@" --out "$dir" --resume
  echo "ab-eval: $dir took $((SECONDS - start)) s (this invocation)"
}

COMMON_ARGS=${COMMON:-}
for dataset in $datasets; do
  # shellcheck disable=SC2086
  run_arm "$dataset" "$out/$dataset-a" $args_a
  # shellcheck disable=SC2086
  run_arm "$dataset" "$out/$dataset-b" $args_b
  echo "== $name on $dataset: A = $args_a, B = $args_b"
  "$bin" compare "$out/$dataset-a" "$out/$dataset-b" | tee "$out/$dataset-compare.txt"
  if [ "${REPEAT:-0}" = 1 ]; then
    for i in 1 2; do
      rm -rf "$out/$dataset-a-repeat$i"
      # shellcheck disable=SC2086
      run_arm "$dataset" "$out/$dataset-a-repeat$i" $args_a --no-timings >/dev/null
    done
    if cmp "$out/$dataset-a-repeat1/queries.jsonl" "$out/$dataset-a-repeat2/queries.jsonl"; then
      echo "ab-eval: $dataset arm A twice: queries.jsonl byte-identical"
    else
      echo "ab-eval: $dataset arm A twice: queries.jsonl DIFFER" >&2
      exit 1
    fi
  fi
done
