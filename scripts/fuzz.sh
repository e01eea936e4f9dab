#!/usr/bin/env bash
# Coverage-guided fuzzing of every input surface (fuzz/src/bin/*.rs), on the stable toolchain.
#
#   scripts/fuzz.sh list                  the targets
#   scripts/fuzz.sh build                 installs the tools if missing, builds every target
#   scripts/fuzz.sh run TARGET [SECONDS]  fuzzes one target (default 600 s)
#   scripts/fuzz.sh smoke [SECONDS]       every target in turn (default 30 s each)
#   scripts/fuzz.sh all [SECONDS]         every target in turn (default 600 s each)
#   scripts/fuzz.sh summary [TARGET...]   the table below, from the last runs' outputs
#   scripts/fuzz.sh repro TARGET FILE     runs one input through TARGET outside AFL (shows the panic)
#   scripts/fuzz.sh tmin TARGET FILE OUT  minimises a crashing input with afl-tmin
#
# run/smoke/all end with one line per target (execs_done, run time, saved crashes and hangs, from
# AFL's fuzzer_stats) and exit 1 if any target saved a crash. Outputs: fuzz/out/TARGET/ (ignored by
# git): `in/` the seeds used, `afl/default/{crashes,hangs,queue,fuzzer_stats}`.
#
# Why cargo-afl (crates.io `cargo-afl` + the `afl` crate) and not Debian's afl++ package: the
# instrumented binaries link AFL++'s compiler runtime, which must match the `afl` crate's version;
# `cargo install cargo-afl` builds exactly that AFL++ (4.40c, vendored in the crate) from source,
# without root, identically on every machine that reaches crates.io, and with rustc's own
# SanitizerCoverage on the stable toolchain (no nightly, no LLVM plugins). Debian's afl++ (4.04c)
# brings an older afl-fuzz and no runtime matching the crate.
#
# Environment: FUZZ_JOBS (cargo -j, default 1), FUZZ_MEM_MB (afl-fuzz -m, default 4096: a small
# input that makes a target allocate more is a bug), FUZZ_TIMEOUT_MS (afl-fuzz -t, default 2000),
# TABLESEEK_SHARED (the shared data, for the run-time seeds). One afl-fuzz at a time, under nice:
# the machine has two cores shared with other work.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ=$ROOT/fuzz
OUT=$FUZZ/out
BIN=$FUZZ/target/release

export AFL_SKIP_CPUFREQ=1                      # no root-only CPU governor tuning
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 # core_pattern may pipe to a handler; no root to change it
export AFL_NO_AFFINITY=1                       # the cores are shared: do not pin (or fail to find a free one)
export AFL_NO_UI=1                             # plain status lines, not a curses screen
export RAYON_NUM_THREADS=1                     # one core per fuzzer (the targets set it too)

die() {
  echo "fuzz.sh: $*" >&2
  exit 2
}

targets() {
  local f
  for f in "$FUZZ"/src/bin/*.rs; do
    basename "$f" .rs
  done
}

is_target() {
  [ -n "$1" ] && [ -f "$FUZZ/src/bin/$1.rs" ]
}

# cargo-afl, and AFL++ built for the current rustc.
ensure_tools() {
  if ! cargo afl --version >/dev/null 2>&1; then
    echo "== installing cargo-afl (cargo install cargo-afl --locked)"
    nice -n 10 cargo install cargo-afl --locked -j "${FUZZ_JOBS:-1}"
  fi
  # Builds AFL++ once per rustc version; says "already built" (and fails) when it is there.
  local out
  if ! out=$(nice -n 10 cargo afl config --build 2>&1); then
    grep -q "already built" <<<"$out" || {
      echo "$out" >&2
      die "cargo afl config --build failed"
    }
  fi
}

build() {
  ensure_tools
  echo "== building the fuzz targets (fuzz/target/release; cargo -j ${FUZZ_JOBS:-1})"
  local start=$SECONDS
  (cd "$FUZZ" && nice -n 10 cargo afl build --release -j "${FUZZ_JOBS:-1}")
  echo "== built in $((SECONDS - start)) s"
}

# AFL++ ships token dictionaries for some input languages; use one where it fits.
dictionary() {
  local dict_dir name
  for dict_dir in "${XDG_DATA_HOME:-$HOME/.local/share}"/afl.rs/rustc-*/afl.rs-*/afl/share/afl/dictionaries; do
    [ -d "$dict_dir" ] && break
  done
  case $1 in
    corpus_delimited | corpus_tabfact) name=csv ;;
    corpus_html) name=html_tags ;;
    corpus_markdown) name=markdown ;;
    corpus_json | eval_dataset | tokenizer_json | agent_parse) name=json ;;
    sql_guard) name=sql ;;
    grep_pattern) name=regexp ;;
    *) return 0 ;;
  esac
  [ -f "$dict_dir/$name.dict" ] && echo "$dict_dir/$name.dict"
  return 0
}

# Committed seeds plus the large ones made at run time (real GGUF headers, not in git).
prepare_inputs() {
  local target=$1 in=$OUT/$1/in
  rm -rf "$in"
  mkdir -p "$in"
  if [ -d "$FUZZ/seeds/$target" ]; then
    cp "$FUZZ/seeds/$target"/* "$in"/
  fi
  if [ ! -d "$OUT/.runtime-seeds" ]; then
    python3 "$FUZZ/make-seeds.py" runtime "$OUT/.runtime-seeds" || echo "fuzz.sh: no run-time seeds (python3 failed)" >&2
  fi
  if [ -d "$OUT/.runtime-seeds/$target" ]; then
    cp "$OUT/.runtime-seeds/$target"/* "$in"/
  fi
  [ -n "$(ls -A "$in")" ] || printf 'a' >"$in/empty-seed"
}

run_one() {
  local target=$1 seconds=$2
  is_target "$target" || die "no target '$target' (scripts/fuzz.sh list)"
  [ -x "$BIN/$target" ] || die "$BIN/$target is not built (scripts/fuzz.sh build)"
  prepare_inputs "$target"
  local dir=$OUT/$target/afl
  if [ -d "$dir" ]; then
    rm -rf "$dir.prev"
    mv "$dir" "$dir.prev" # one previous run's crashes are kept
  fi
  # Scratch files of path-only surfaces (see fuzz/src/lib.rs): on a tmpfs when there is one.
  local scratch=$OUT/$target/scratch
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    scratch=/dev/shm/tableseek-fuzz-$target
  fi
  mkdir -p "$scratch"
  local dict args=()
  dict=$(dictionary "$target")
  [ -n "$dict" ] && args+=(-x "$dict")
  echo "== fuzzing $target for ${seconds}s (outputs in ${dir#"$ROOT"/})"
  TABLESEEK_FUZZ_TMP=$scratch nice -n 10 cargo afl fuzz -i "$OUT/$target/in" -o "$dir" \
    -V "$seconds" -t "${FUZZ_TIMEOUT_MS:-2000}" -m "${FUZZ_MEM_MB:-4096}" "${args[@]}" \
    -- "$BIN/$target" >"$OUT/$target/afl-fuzz.log" 2>&1 || {
    echo "fuzz.sh: afl-fuzz failed for $target; last lines of ${OUT#"$ROOT"/}/$target/afl-fuzz.log:" >&2
    tail -n 25 "$OUT/$target/afl-fuzz.log" >&2
    return 1
  }
  rm -rf "$scratch"
}

stat_of() {
  sed -n "s/^$2 *: *//p" "$1" | head -1
}

# One line per target; returns 1 when any target saved a crash or has no stats.
summary() {
  local status=0 target stats crashes hangs
  printf '%-18s %12s %10s %8s %6s %8s\n' target execs_done run_time_s execs/s crashes hangs
  for target in "$@"; do
    stats=$OUT/$target/afl/default/fuzzer_stats
    if [ ! -f "$stats" ]; then
      printf '%-18s %s\n' "$target" "no fuzzer_stats (did not run?)"
      status=1
      continue
    fi
    crashes=$(stat_of "$stats" saved_crashes)
    hangs=$(stat_of "$stats" saved_hangs)
    printf '%-18s %12s %10s %8s %6s %8s\n' "$target" "$(stat_of "$stats" execs_done)" \
      "$(stat_of "$stats" run_time)" "$(stat_of "$stats" execs_per_sec)" "${crashes:-?}" "${hangs:-?}"
    if [ "${crashes:-1}" != 0 ]; then
      status=1
      ls "$OUT/$target/afl/default/crashes" | grep -v README | sed "s|^|    crash: fuzz/out/$target/afl/default/crashes/|"
    fi
  done
  return $status
}

run_many() {
  local seconds=$1 failed=0 target
  shift
  for target in "$@"; do
    run_one "$target" "$seconds" || failed=1
  done
  echo
  summary "$@" || failed=1
  return $failed
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  list) targets ;;
  build) build ;;
  run)
    [ $# -ge 1 ] || die "usage: scripts/fuzz.sh run TARGET [SECONDS]"
    ensure_tools
    run_many "${2:-600}" "$1"
    ;;
  smoke)
    ensure_tools
    # shellcheck disable=SC2046
    run_many "${1:-30}" $(targets)
    ;;
  all)
    ensure_tools
    # shellcheck disable=SC2046
    run_many "${1:-600}" $(targets)
    ;;
  summary)
    if [ $# -gt 0 ]; then summary "$@"; else summary $(targets); fi
    ;;
  repro)
    [ $# -eq 2 ] || die "usage: scripts/fuzz.sh repro TARGET FILE"
    is_target "$1" || die "no target '$1'"
    RUST_BACKTRACE=1 "$BIN/$1" <"$2"
    ;;
  tmin)
    [ $# -eq 3 ] || die "usage: scripts/fuzz.sh tmin TARGET FILE OUT"
    is_target "$1" || die "no target '$1'"
    nice -n 10 cargo afl tmin -t "${FUZZ_TIMEOUT_MS:-2000}" -m "${FUZZ_MEM_MB:-4096}" -i "$2" -o "$3" -- "$BIN/$1"
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 2
    ;;
esac
