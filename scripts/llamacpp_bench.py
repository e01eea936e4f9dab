"""llama.cpp side of scripts/bench-engine.sh: prompt processing and generation speed of a GGUF model
through llama-cpp-python, measured the same way as examples/engine_bench.rs (fresh context, fixed token
ids, one forward per generated token). Prints one JSON line."""
import json
import sys
import time

from llama_cpp import Llama


def main():
    model, threads = sys.argv[1], int(sys.argv[2])
    pps = [int(x) for x in sys.argv[3].split(",")]
    tg = int(sys.argv[4])
    llm = Llama(
        model_path=model,
        n_ctx=2048,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    tokens = lambda n: [100 + (i * 37) % 5000 for i in range(n)]
    out = {"impl": "llama.cpp"}
    for n in pps:
        llm.reset()
        llm.eval(tokens(1))  # warm-up outside the timing, as for ours
        llm.reset()
        t = time.perf_counter()
        llm.eval(tokens(n))
        out[f"pp{n}"] = n / (time.perf_counter() - t)
    llm.reset()
    llm.eval(tokens(1))
    seq = tokens(tg)
    t = time.perf_counter()
    for tok in seq:
        llm.eval([tok])
    out[f"tg{tg}"] = tg / (time.perf_counter() - t)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
