"""Builds the tiny Qwen3-MoE parity fixtures in tests/fixtures/ and their references.

Two random-weight Qwen3MoeForCausalLM checkpoints, made the way ../shared/reference/tiny-models
describes for tiny-qwen3 (torch.manual_seed(seed), initializer_range 0.1 so every Linear,
Embedding and expert weight is N(0, 0.1), every RMSNorm weight 1 + 0.1·N(0,1); the shared
512-token tokenizer; the same 96 input ids):

- tiny-qwen3-moe: 3 layers, 8 experts, top-2, norm_topk_prob false, layer 1 a dense MLP
  (mlp_only_layers [1]). transformers' logits, last hidden states, KV-cache greedy decode,
  embeddings and reranker scores. llama.cpp's qwen3moe graph makes every layer sparse and
  always renormalizes the top-k weights, so this one has no GGUF.
- tiny-qwen3-moe-gguf: 2 layers, every one sparse, norm_topk_prob true (Qwen3-30B-A3B's
  settings), plus its conversion by llama.cpp's convert_hf_to_gguf.py to f32 and q8_0 GGUFs and
  llama.cpp's last-position logits and greedy ids for both (`--llama-cpp`).

Seeds are scanned for a greedy continuation with clear top-1 margins and for router decisions
that no rounding can flip (the gap between each token's k-th and (k+1)-th expert probability).

Experts are written one tensor per expert (`mlp.experts.{e}.gate_proj.weight`, ...), the layout
of the checkpoints on the Hub; transformers 5 holds them fused in memory.

    python3 scripts/make-tiny-qwen3-moe.py ../shared/reference/tiny-models/tiny-qwen3 tests/fixtures
    python3 scripts/make-tiny-qwen3-moe.py --llama-cpp LLAMA_CPP_DIR ../shared/... tests/fixtures

Needs torch, transformers (5.x), safetensors from PyPI; `--llama-cpp` also needs the llama.cpp
source tree vendored in the llama-cpp-python 0.3.36 sdist (for the converter and gguf-py) and
llama-cpp-python itself importable (see scripts/bench-engine.sh for the build). Float32 on CPU.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

VARIANTS = {
    "tiny-qwen3-moe": dict(num_hidden_layers=3, mlp_only_layers=[1], norm_topk_prob=False),
    "tiny-qwen3-moe-gguf": dict(num_hidden_layers=2, mlp_only_layers=[], norm_topk_prob=True),
}
N_EXPERTS, TOP_K = 8, 2


def config(variant):
    return Qwen3MoeConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=False,
        initializer_range=0.1, bos_token_id=509, eos_token_id=511, pad_token_id=509,
        num_experts=N_EXPERTS, num_experts_per_tok=TOP_K, decoder_sparse_step=1,
        output_router_logits=False, use_sliding_window=False, torch_dtype="float32",
        **VARIANTS[variant],
    )


def build(variant, seed):
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config(variant)).eval()
    gen = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "experts" in name or name.endswith("mlp.gate.weight"):
                # transformers 5 leaves fused expert parameters and the router uninitialized
                # or zero; draw them like every other projection.
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def router_gaps(model, ids):
    """Smallest gap between the k-th and (k+1)-th router probability over tokens and layers."""
    gaps = []
    hooks = []

    def hook(module, inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.topk(probs, TOP_K + 1, dim=-1).values
        gaps.append(float((top[:, TOP_K - 1] - top[:, TOP_K]).min()))

    for layer in model.model.layers:
        if hasattr(layer.mlp, "gate") and not hasattr(layer.mlp, "gate_proj"):
            hooks.append(layer.mlp.gate.register_forward_hook(hook))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return min(gaps)


def greedy(model, ids, n=16):
    past, step_logits, out = None, [], []
    with torch.no_grad():
        step = model(ids, use_cache=True)
        past, next_logits = step.past_key_values, step.logits[0, -1]
        for _ in range(n):
            step_logits.append(next_logits.clone())
            tok = int(torch.argmax(next_logits))
            out.append(tok)
            step = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past, next_logits = step.past_key_values, step.logits[0, -1]
    return out, step_logits


def margin(step_logits):
    return min(float(torch.topk(l, 2).values[0] - torch.topk(l, 2).values[1]) for l in step_logits)


def pick_seed(variant, ids):
    best = None
    for seed in range(40):
        model = build(variant, seed)
        toks, steps = greedy(model, ids)
        # The router is checked over the prompt and the whole greedy continuation.
        full = torch.cat([ids, torch.tensor([toks])], dim=1)
        score = (min(margin(steps), 20 * router_gaps(model, full)), len(set(toks)))
        if score[1] >= 8 and (best is None or score[0] > best[0][0]):
            best = (score, seed)
    print(f"{variant}: seed {best[1]} (min(greedy margin, 20·router gap), distinct tokens) = {best[0]}")
    return best[1]


def save_hub_layout(model, out_dir):
    """save_pretrained, then experts rewritten one tensor per expert as Hub checkpoints have them."""
    model.save_pretrained(out_dir, safe_serialization=True)
    path = f"{out_dir}/model.safetensors"
    tensors = load_file(path)
    out = {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name.removesuffix("gate_up_proj")
            half = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :half].contiguous()
                out[f"{base}{e}.up_proj.weight"] = t[e, half:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = name.removesuffix("down_proj")
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    save_file(out, path, metadata={"format": "pt"})
    # The per-expert file must load back to the same model.
    again = Qwen3MoeForCausalLM.from_pretrained(out_dir).eval()
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1


def references(model, ids, out_dir, seed):
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    toks, steps = greedy(model, ids)
    tensors = {
        "input_ids": ids[0].to(torch.int64),
        "logits": out.logits[0].contiguous(),
        "last_hidden": out.hidden_states[-1][0].contiguous(),
        "greedy_ids": torch.tensor(toks, dtype=torch.int64),
        "greedy_step_logits": torch.stack(steps).contiguous(),
    }
    # Embedding and reranker references, as the shared tiny-qwen3's embed_rerank.safetensors.
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, 509, (n,), generator=gen) for n in (5, 17, 40)]
    single, no_yes = [], []
    with torch.no_grad():
        for s in seqs:
            o = model(s.unsqueeze(0), output_hidden_states=True)
            single.append(o.hidden_states[-1][0, -1])
            no_yes.append(o.logits[0, -1, [10, 11]])
        width = max(len(s) for s in seqs)
        padded = torch.stack([torch.cat([torch.full((width - len(s),), 509), s]) for s in seqs])
        mask = torch.stack([torch.cat([torch.zeros(width - len(s)), torch.ones(len(s))]) for s in seqs]).long()
        o = model(padded, attention_mask=mask, output_hidden_states=True)
        batched = o.hidden_states[-1][:, -1]
        batched_no_yes = o.logits[:, -1][:, [10, 11]]
    single = torch.stack(single)
    no_yes = torch.stack(no_yes)
    for i, s in enumerate(seqs):
        tensors[f"seq{i}_ids"] = s.to(torch.int64)
    tensors["emb_single"] = torch.nn.functional.normalize(single, dim=-1).contiguous()
    tensors["emb_batched"] = torch.nn.functional.normalize(batched, dim=-1).contiguous()
    tensors["rerank_p_yes_single"] = torch.softmax(no_yes, dim=-1)[:, 1].contiguous()
    tensors["rerank_p_yes_batched"] = torch.softmax(batched_no_yes, dim=-1)[:, 1].contiguous()
    save_file(tensors, f"{out_dir}/expected.safetensors")
    full = torch.cat([ids, torch.tensor([toks])], dim=1)
    with open(f"{out_dir}/expected.json", "w") as f:
        json.dump({
            "seed": seed, "greedy_ids": toks, "min_greedy_margin": margin(steps),
            "min_router_gap": router_gaps(model, full),
            "p_yes_single": tensors["rerank_p_yes_single"].tolist(),
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        }, f, indent=1)


def convert_and_run_llama_cpp(llama_dir, model_dir, ids):
    """GGUF f32 and q8_0 through llama.cpp's converter, then llama.cpp's outputs for each."""
    name = os.path.basename(model_dir)
    wrapper = f"{model_dir}/.convert.py"
    # The converter rejects tokenizers it has no hash for; this one is Qwen's regex (see the
    # shared tiny-models README), so name it, as was done for tiny-qwen3.
    with open(wrapper, "w") as f:
        f.write(
            "import sys, runpy\n"
            f"sys.path.insert(0, {llama_dir + '/gguf-py'!r}); sys.path.insert(0, {llama_dir!r})\n"
            "import conversion.base as b\n"
            "b.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'qwen2'\n"
            f"sys.argv = ['convert_hf_to_gguf.py'] + sys.argv[1:]\n"
            f"runpy.run_path({llama_dir + '/convert_hf_to_gguf.py'!r}, run_name='__main__')\n"
        )
    results = {}
    for outtype in ("f32", "q8_0"):
        gguf = f"{model_dir}/{name}-{outtype}.gguf"
        subprocess.run([sys.executable, wrapper, model_dir, "--outtype", outtype, "--outfile", gguf],
                       check=True)
        results.update(run_llama_cpp(gguf, outtype, ids))
    os.remove(wrapper)
    save_file(results, f"{model_dir}/llamacpp.safetensors")


def run_llama_cpp(gguf, tag, ids):
    """The shared fixtures' llama.cpp recipe: 2 threads, n_ctx 128, f32 KV, no flash attention."""
    from llama_cpp import Llama
    llm = Llama(model_path=gguf, n_ctx=128, n_batch=128, n_ubatch=128, n_threads=2,
                logits_all=True, type_k=0, type_v=0, flash_attn=False, verbose=False)
    prompt = [int(t) for t in ids[0]]
    llm.eval(prompt)
    last = torch.tensor(llm.scores[llm.n_tokens - 1]).clone()
    out = []
    for _ in range(16):
        tok = int(torch.argmax(torch.tensor(llm.scores[llm.n_tokens - 1])))
        out.append(tok)
        llm.eval([tok])
    return {f"{tag}.last_logits": last.float().contiguous(),
            f"{tag}.greedy_ids": torch.tensor(out, dtype=torch.int64)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("qwen3_dir")
    parser.add_argument("out_root")
    parser.add_argument("--llama-cpp", help="llama.cpp source tree (convert + run the GGUF variant)")
    args = parser.parse_args()
    ids = load_file(f"{args.qwen3_dir}/expected.safetensors")["input_ids"].to(torch.long).unsqueeze(0)
    for variant in VARIANTS:
        out_dir = f"{args.out_root}/{variant}"
        if not (args.llama_cpp and os.path.exists(f"{out_dir}/model.safetensors")):
            seed = pick_seed(variant, ids)
            model = build(variant, seed)
            os.makedirs(out_dir, exist_ok=True)
            save_hub_layout(model, out_dir)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(f"{args.qwen3_dir}/{f}", f"{out_dir}/{f}")
            references(model, ids, out_dir, seed)
        if args.llama_cpp and variant.endswith("-gguf"):
            convert_and_run_llama_cpp(args.llama_cpp, out_dir, ids)


if __name__ == "__main__":
    main()
