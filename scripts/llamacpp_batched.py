"""llama.cpp side of scripts/bench-batch.sh: aggregate decoding speed with NPL parallel sequences,
as llama.cpp's batched-bench measures it (S_TG = NPL * TG / time), through llama-cpp-python's
low-level batch API with one sequence id per stream. Each sequence first gets its own PP-token
prompt (one llama_decode per sequence, outside the timing); then each of TG steps is one
llama_decode of a batch holding one token per sequence, logits requested for every row.

    python scripts/llamacpp_batched.py MODEL THREADS NPL_LIST PP TG [--kv-unified 0|1]

Prints one JSON line with tg_npl<N> per N (same keys as examples/batch_bench.rs)."""
import argparse
import ctypes
import json
import time

import llama_cpp as L


def fill(batch, entries):
    """entries: (token, pos, seq_id, logits) per row."""
    batch.n_tokens = len(entries)
    for i, (token, pos, seq, logits) in enumerate(entries):
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if logits else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("threads", type=int)
    ap.add_argument("npl")
    ap.add_argument("pp", type=int)
    ap.add_argument("tg", type=int)
    ap.add_argument("--kv-unified", type=int, default=1)
    a = ap.parse_args()
    npls = [int(x) for x in a.npl.split(",")]
    max_npl = max(npls)

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mparams)
    if not model:
        raise SystemExit(f"cannot load {a.model}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cparams = L.llama_context_default_params()
    cparams.n_ctx = max_npl * (a.pp + a.tg) + 16
    cparams.n_batch = max(a.pp, max_npl)
    cparams.n_ubatch = max(a.pp, max_npl)
    cparams.n_seq_max = max_npl
    cparams.n_threads = a.threads
    cparams.n_threads_batch = a.threads
    if hasattr(cparams, "kv_unified"):
        cparams.kv_unified = bool(a.kv_unified)
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("cannot create a llama.cpp context")
    batch = L.llama_batch_init(max(a.pp, max_npl), 0, max_npl)
    memory = L.llama_get_memory(ctx)

    def prompt(s):
        return [100 + (i * 37 + s * 101) % 5000 for i in range(a.pp)]

    def decode():
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")

    out = {"impl": "llama.cpp", "kv_unified": bool(a.kv_unified)}
    # Warm-up outside the timing.
    fill(batch, [(100, 0, 0, True)])
    decode()
    for npl in npls:
        L.llama_memory_clear(memory, True)
        for s in range(npl):
            fill(batch, [(t, i, s, i == a.pp - 1) for i, t in enumerate(prompt(s))])
            decode()
        started = time.perf_counter()
        for step in range(a.tg):
            fill(batch, [(100 + (step * 53 + s * 7) % 5000, a.pp + step, s, True) for s in range(npl)])
            decode()
            # Reading every row's logits back is part of a real step, as on our side.
            for i in range(npl):
                row = L.llama_get_logits_ith(ctx, i)
                ctypes.string_at(row, 4 * n_vocab)
        out[f"tg_npl{npl}"] = npl * a.tg / (time.perf_counter() - started)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    out.update({"pp": a.pp, "tg": a.tg, "threads": a.threads})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
