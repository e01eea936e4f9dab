#!/usr/bin/env bash
# CI check that the CUDA build compiles on a machine without a GPU, and that the binary then says
# clearly that there is no CUDA device instead of crashing. Uses its own target dir so the CPU
# build's artifacts stay untouched.
#
#   scripts/check-cuda-build.sh     (`cargo build --release --features cuda`; PROFILE=debug for a debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup-cuda-build.sh
. scripts/setup-cuda-build.sh

export CARGO_TARGET_DIR=${CUDA_TARGET_DIR:-target/cuda}
profile_flag=()
profile_dir=debug
if [ "${PROFILE:-release}" = release ]; then profile_flag=(--release); profile_dir=release; fi

started=$(date +%s)
cargo build "${profile_flag[@]}" --features cuda --bin tableseek
echo "check-cuda-build: built in $(( $(date +%s) - started )) s"

bin="$CARGO_TARGET_DIR/$profile_dir/tableseek"
# Without a GPU the run must fail with a message that names CUDA, not a panic or a loader error.
set +e
out=$("$bin" generate --random-init qwen3-0.6b --device cuda:0 --chat hi --max-new-tokens 1 2>&1)
rc=$?
set -e
echo "$out" | tail -3
if [ $rc -eq 0 ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "check-cuda-build: ok (a GPU is present and the run succeeded)"; exit 0
  fi
  echo "check-cuda-build: expected a failure without a GPU" >&2; exit 1
fi
if echo "$out" | grep -qi "panicked"; then echo "check-cuda-build: panic instead of an error" >&2; exit 1; fi
echo "$out" | grep -qi "cuda" || { echo "check-cuda-build: error does not mention CUDA" >&2; exit 1; }
echo "check-cuda-build: ok (no GPU here; the binary reports it)"
