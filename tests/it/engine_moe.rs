//! Qwen3-MoE against transformers and llama.cpp on the tiny checkpoints in `tests/fixtures/`
//! (`scripts/make-tiny-qwen3-moe.py`): `tiny-qwen3-moe` has a dense layer among sparse ones and
//! unnormalized top-k weights; `tiny-qwen3-moe-gguf` is every-layer-sparse with renormalized
//! weights, converted by llama.cpp to f32 and q8_0 GGUFs and run by llama.cpp.

use std::path::PathBuf;

use tableseek::engine::{
    Architecture, DeviceMap, GenerateOptions, Generator, LoadOptions, Model, ModelSpec,
    QuantizedWeights,
};
use tableseek::retrieve::rerank::{RerankBatching, RerankOptions, Reranker};

use super::engine_parity::{
    check_decode_batch_rows, check_hf_dir, greedy, ids, load, load_st, max_abs_diff, test_devices,
};

const TOL: f32 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    crate::common::fixtures_dir().join(name)
}

#[test]
fn moe_config_reads_experts_and_dense_layers() {
    let model = load(fixture("tiny-qwen3-moe"), &DeviceMap::cpu(), 16);
    assert_eq!(model.architecture(), Architecture::Qwen3Moe);
    let moe = model.config().moe.clone().unwrap();
    assert_eq!(
        (moe.num_experts, moe.num_experts_per_tok, moe.norm_topk_prob),
        (8, 2, false)
    );
    assert_eq!(moe.mlp_only_layers, vec![1]);
    assert!(moe.is_sparse(0) && !moe.is_sparse(1) && moe.is_sparse(2));
    let gguf = load(
        fixture("tiny-qwen3-moe-gguf").join("tiny-qwen3-moe-gguf-q8_0.gguf"),
        &DeviceMap::cpu(),
        16,
    );
    let moe = gguf.config().moe.clone().unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.num_experts_per_tok,
            moe.moe_intermediate_size
        ),
        (8, 2, 32)
    );
    assert!(moe.norm_topk_prob && moe.mlp_only_layers.is_empty());
}

/// Logits at every position (one chunk, 16-token chunks, a two-device split), decode steps
/// through the KV cache, and greedy ids, as for the dense fixtures.
#[test]
fn tiny_qwen3_moe_matches_transformers() {
    check_hf_dir("tiny-qwen3-moe", fixture("tiny-qwen3-moe"));
    check_hf_dir("tiny-qwen3-moe-gguf", fixture("tiny-qwen3-moe-gguf"));
}

#[test]
fn moe_gguf_f32_matches_transformers_and_llama_cpp() {
    let dir = fixture("tiny-qwen3-moe-gguf");
    let expected = load_st(dir.join("expected.safetensors"));
    let llamacpp = load_st(dir.join("llamacpp.safetensors"));
    let input = ids(&expected["input_ids"]);
    for devices in [test_devices(1), test_devices(2)] {
        let model = load(dir.join("tiny-qwen3-moe-gguf-f32.gguf"), &devices, 16);
        let logits = model.forward_all(&input, &mut model.new_cache()).unwrap();
        let diff = max_abs_diff(&logits, &expected["logits"]);
        let last = logits.get(95).unwrap();
        let vs_llamacpp = max_abs_diff(&last, &llamacpp["f32.last_logits"]);
        eprintln!(
            "moe f32 gguf on {:?}: max |Δlogits| vs transformers {diff:.3e}, last vs llama.cpp {vs_llamacpp:.3e}",
            devices.kinds()
        );
        assert!(diff <= TOL, "{diff}");
        assert!(vs_llamacpp <= TOL, "{vs_llamacpp}");
        assert_eq!(greedy(model, &input, 16), ids(&llamacpp["f32.greedy_ids"]));
    }
}

/// Q8_0 experts as stored: candle's kernels and ours (the CPU's `dense-q8` mode multiplies the
/// stored expert blocks), against llama.cpp's q8_0 run.
#[test]
fn moe_gguf_q8_0_matches_llama_cpp() {
    let dir = fixture("tiny-qwen3-moe-gguf");
    let path = dir.join("tiny-qwen3-moe-gguf-q8_0.gguf");
    let expected = load_st(dir.join("expected.safetensors"));
    let llamacpp = load_st(dir.join("llamacpp.safetensors"));
    let input = ids(&expected["input_ids"]);
    for quantized in [
        QuantizedWeights::AsStored,
        QuantizedWeights::DenseWithQ8Decode,
    ] {
        let options = LoadOptions {
            quantized,
            prefill_chunk: Some(16),
            ..Default::default()
        };
        let model =
            Model::load_with(&ModelSpec::Path(path.clone()), &DeviceMap::cpu(), &options).unwrap();
        let last = model.forward(&input, &mut model.new_cache()).unwrap();
        let vs_llamacpp = max_abs_diff(&last, &llamacpp["q8_0.last_logits"]);
        let vs_hf = max_abs_diff(&last, &expected["logits"].get(95).unwrap());
        eprintln!("moe q8_0 {quantized:?}: last-position max |Δlogits| vs llama.cpp {vs_llamacpp:.3e}, vs transformers f32 {vs_hf:.3e}");
        // As for the dense q8_0 fixtures: llama.cpp's own q8_0 logits are several 1e-2 from
        // transformers', so this bound catches gross errors; the greedy ids are the real check.
        assert!(vs_llamacpp < 0.1, "{quantized:?}: {vs_llamacpp}");
        assert_eq!(
            greedy(model, &input, 16),
            ids(&llamacpp["q8_0.greedy_ids"]),
            "{quantized:?}"
        );
    }
}

#[test]
fn moe_prefix_cache_hits_are_bitwise_fresh() {
    let dir = fixture("tiny-qwen3-moe");
    let expected = load_st(dir.join("expected.safetensors"));
    let input = ids(&expected["input_ids"]);
    let opts = GenerateOptions {
        max_new_tokens: 16,
        ..Default::default()
    };
    let mut warm = Generator::new(load(dir.clone(), &test_devices(1), 16));
    let mut other = input[..53].to_vec();
    other.extend([1, 2, 3, 4, 5, 6, 7]);
    warm.generate(&other, &opts, |_| false).unwrap();
    let served = warm.generate(&input, &opts, |_| false).unwrap();
    assert_eq!(served.stats.cached_tokens, 48);
    assert_eq!(served.tokens, ids(&expected["greedy_ids"]));
    let model = warm.model().clone();
    let mut restored = warm.prefix_cache_mut().lookup(&input, 16).unwrap().unwrap();
    restored.truncate(48);
    let from_cache = model.forward_all(&input[48..], &mut restored).unwrap();
    let from_scratch = model
        .forward_all(&input, &mut model.new_cache())
        .unwrap()
        .narrow(0, 48, 48)
        .unwrap();
    assert_eq!(
        from_cache.to_vec2::<f32>().unwrap(),
        from_scratch.to_vec2::<f32>().unwrap()
    );
}

/// Last-token embeddings (alone and as a left-padded batch) and Qwen3-Reranker's p(yes), as
/// transformers computes them on the same checkpoint.
#[test]
fn moe_embeddings_and_rerank_scores_match_transformers() {
    let dir = fixture("tiny-qwen3-moe");
    let refs = load_st(dir.join("expected.safetensors"));
    let model = load(dir.clone(), &DeviceMap::cpu(), 16);
    let seqs: Vec<Vec<u32>> = ["seq0_ids", "seq1_ids", "seq2_ids"]
        .iter()
        .map(|k| ids(&refs[*k]))
        .collect();
    let single: Vec<Vec<f32>> = refs["emb_single"].to_vec2().unwrap();
    let p_yes: Vec<f32> = refs["rerank_p_yes_single"].to_vec1().unwrap();
    for (i, seq) in seqs.iter().enumerate() {
        let emb = model.embed_last_token(seq).unwrap();
        let diff = emb
            .iter()
            .zip(&single[i])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-5, "embedding {i}: {diff}");
        let logits: Vec<f32> = model
            .forward(seq, &mut model.new_cache())
            .unwrap()
            .to_vec1()
            .unwrap();
        let p = 1.0 / (1.0 + (logits[10] - logits[11]).exp());
        assert!(
            (p - p_yes[i]).abs() < 1e-5,
            "p(yes) {i}: {p} vs {}",
            p_yes[i]
        );
    }
    let refs_of: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
    let batched = model.embed_batch(&refs_of).unwrap();
    let expected: Vec<Vec<f32>> = refs["emb_batched"].to_vec2().unwrap();
    for (i, (a, b)) in batched.iter().zip(&expected).enumerate() {
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-5, "batched embedding {i}: {diff}");
    }
    let logits = model.last_logits_batch(&refs_of).unwrap();
    let no_yes: Vec<Vec<f32>> = logits.narrow(1, 10, 2).unwrap().to_vec2().unwrap();
    let p_batched: Vec<f32> = refs["rerank_p_yes_batched"].to_vec1().unwrap();
    for (i, row) in no_yes.iter().enumerate() {
        let p = 1.0 / (1.0 + (row[0] - row[1]).exp());
        assert!((p - p_batched[i]).abs() < 1e-5, "batched p(yes) {i}");
    }
}

/// The retrieval layer's reranker on the MoE checkpoint: the shared-prefix loop and one padded
/// batch score the same documents alike (both as the model's p(yes)).
#[test]
fn moe_serves_as_reranker() {
    let dir = fixture("tiny-qwen3-moe");
    let scores = |batching| {
        let model = load(dir.clone(), &DeviceMap::cpu(), 16);
        let tokenizer = tableseek::engine::load_tokenizer(&dir, None).unwrap();
        let options = RerankOptions {
            yes_no_ids: Some((11, 10)),
            batching,
            ..RerankOptions::default()
        };
        let mut reranker = Reranker::new(model, tokenizer, options).unwrap();
        reranker
            .score(
                "which team won in 1998",
                &["| year | team |\n| 1998 | red |", "a recipe for bread"],
            )
            .unwrap()
            .scores
    };
    let looped = scores(RerankBatching::SharedPrefix);
    let padded = scores(RerankBatching::Padded);
    assert_eq!(looped.len(), 2);
    for (a, b) in looped.iter().zip(&padded) {
        assert!((0.0..=1.0).contains(a));
        assert!((a - b).abs() <= 1e-4, "{a} vs {b}");
    }
}

/// One batched decoding step over sequences of different lengths gives each row the bits it
/// gets alone, though the rows route to different experts.
#[test]
fn moe_decode_batch_rows_are_bitwise_the_rows_alone() {
    check_decode_batch_rows(&fixture("tiny-qwen3-moe"));
}

/// A preset at Qwen3-30B-A3B's design, scaled down, runs from random weights.
#[test]
fn moe_random_preset_generates() {
    let spec = ModelSpec::parse("random:qwen3-moe-mini:3").unwrap();
    let mut model = Model::load(&spec, &DeviceMap::cpu(), None).unwrap();
    model.set_prefill_chunk(64);
    let tokens = greedy(model, &[1, 2, 3, 4, 5], 4);
    assert_eq!(tokens.len(), 4);
}
