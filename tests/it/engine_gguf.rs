//! GGUF paths the shipped fixtures do not cover, checked on GGUFs written here with candle's
//! writer: a Llama 3 checkpoint (q/k rows permuted the way llama.cpp's converter does, scaling
//! in a `rope_freqs` tensor) against transformers' logits, and the k-quant types.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use tableseek::engine::{Config, DeviceMap, Model, ModelSpec};

fn tiny(name: &str) -> Option<PathBuf> {
    crate::common::existing(
        crate::common::shared_dir()
            .join("reference/tiny-models")
            .join(name),
    )
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// llama.cpp's converter: per head, `w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2)`.
fn permute_for_interleaved_rope(w: &Tensor, n_head: usize) -> Tensor {
    let (out, inp) = w.dims2().unwrap();
    w.reshape((n_head, 2, out / n_head / 2, inp))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((out, inp))
        .unwrap()
        .contiguous()
        .unwrap()
}

fn write_gguf(path: &Path, metadata: &[(&str, gguf_file::Value)], tensors: &[(String, QTensor)]) {
    let md: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut File::create(path).unwrap(), &md, &ts).unwrap();
}

fn llama_metadata(cfg: &Config) -> Vec<(&'static str, gguf_file::Value)> {
    use gguf_file::Value as V;
    vec![
        ("general.architecture", V::String("llama".into())),
        ("llama.block_count", V::U32(cfg.num_hidden_layers as u32)),
        (
            "llama.context_length",
            V::U32(cfg.max_position_embeddings as u32),
        ),
        ("llama.embedding_length", V::U32(cfg.hidden_size as u32)),
        (
            "llama.feed_forward_length",
            V::U32(cfg.intermediate_size as u32),
        ),
        (
            "llama.attention.head_count",
            V::U32(cfg.num_attention_heads as u32),
        ),
        (
            "llama.attention.head_count_kv",
            V::U32(cfg.num_key_value_heads as u32),
        ),
        ("llama.rope.freq_base", V::F32(cfg.rope_theta as f32)),
        ("llama.rope.dimension_count", V::U32(cfg.head_dim as u32)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            V::F32(cfg.rms_norm_eps as f32),
        ),
        ("llama.vocab_size", V::U32(cfg.vocab_size as u32)),
        ("tokenizer.ggml.eos_token_id", V::U32(511)),
    ]
}

/// HF → GGUF tensor names, with q/k permuted; every 2-D weight stored as `quant`.
fn hf_to_gguf(
    st: &HashMap<String, Tensor>,
    cfg: &Config,
    quant: GgmlDType,
) -> Vec<(String, QTensor)> {
    let mut out = Vec::new();
    let mut names: Vec<&String> = st.keys().collect();
    names.sort();
    for name in names {
        let t = &st[name];
        let gguf_name = name
            .replace("model.embed_tokens", "token_embd")
            .replace("model.norm", "output_norm")
            .replace("lm_head", "output")
            .replace("model.layers.", "blk.")
            .replace("self_attn.q_proj", "attn_q")
            .replace("self_attn.k_proj", "attn_k")
            .replace("self_attn.v_proj", "attn_v")
            .replace("self_attn.o_proj", "attn_output")
            .replace("input_layernorm", "attn_norm")
            .replace("post_attention_layernorm", "ffn_norm")
            .replace("mlp.gate_proj", "ffn_gate")
            .replace("mlp.up_proj", "ffn_up")
            .replace("mlp.down_proj", "ffn_down");
        let t = if gguf_name.ends_with("attn_q.weight") {
            permute_for_interleaved_rope(t, cfg.num_attention_heads)
        } else if gguf_name.ends_with("attn_k.weight") {
            permute_for_interleaved_rope(t, cfg.num_key_value_heads)
        } else {
            t.clone()
        };
        let dtype = if t.rank() == 2 { quant } else { GgmlDType::F32 };
        out.push((gguf_name, QTensor::quantize(&t, dtype).unwrap()));
    }
    out
}

/// transformers' llama3 frequency formula, in f64, as the divisor of each base frequency.
fn llama3_rope_factors(cfg: &Config) -> Vec<f32> {
    let s = cfg.rope_scaling.unwrap();
    let d = cfg.head_dim;
    let old = s.original_max_position_embeddings as f64;
    (0..d / 2)
        .map(|i| {
            let inv = 1.0 / cfg.rope_theta.powf((2 * i) as f64 / d as f64);
            let wavelen = 2.0 * std::f64::consts::PI / inv;
            let scaled = if wavelen < old / s.high_freq_factor {
                inv
            } else if wavelen > old / s.low_freq_factor {
                inv / s.factor
            } else {
                let smooth =
                    (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * inv / s.factor + smooth * inv
            };
            (inv / scaled) as f32
        })
        .collect()
}

#[test]
fn llama3_gguf_with_rope_freqs_matches_transformers() {
    let Some(dir) = tiny("tiny-llama3-rope") else {
        return;
    };
    let cfg = Config::from_hf_json(
        &std::fs::read_to_string(dir.join("config.json")).unwrap(),
        "config.json",
    )
    .unwrap();
    let st = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let expected =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let factors = llama3_rope_factors(&cfg);
    let mut tensors = hf_to_gguf(&st, &cfg, GgmlDType::F32);
    let freqs = Tensor::new(factors.as_slice(), &Device::Cpu).unwrap();
    tensors.push((
        "rope_freqs.weight".into(),
        QTensor::quantize(&freqs, GgmlDType::F32).unwrap(),
    ));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny-llama3-rope-f32.gguf");
    write_gguf(&path, &llama_metadata(&cfg), &tensors);

    let model = Model::load(&ModelSpec::Path(path), &DeviceMap::cpu(), None).unwrap();
    assert!(
        model.config().rope_scaling.is_none(),
        "GGUF scaling comes from rope_freqs"
    );
    let ids: Vec<u32> = expected["input_ids"]
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|x| x as u32)
        .collect();
    let logits = model.forward_all(&ids, &mut model.new_cache()).unwrap();
    let diff = max_abs_diff(&logits, &expected["logits"]);
    eprintln!("llama3 GGUF with rope_freqs: max |Δlogits| {diff:.3e}");
    assert!(diff <= 1e-4, "{diff}");
}

/// Every supported quantization loads and runs: a random model written with k-quant / legacy
/// weights stays close to the same weights dequantized to f32.
#[test]
fn quantized_types_load_and_run() {
    let mut cfg = Config::preset("llama-3.1-8b").unwrap();
    cfg.rope_scaling = None;
    cfg.vocab_size = 256;
    cfg.hidden_size = 256;
    cfg.intermediate_size = 512;
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.head_dim = 64;
    cfg.max_position_embeddings = 128;
    // Deterministic pseudo-random weights (a multiplicative hash, not candle's unseeded randn).
    let dev = Device::Cpu;
    let mut st = HashMap::new();
    let mut salt = 0u64;
    let mut add = |name: String, shape: &[usize], scale: f32| {
        salt += 1;
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n as u64)
            .map(|i| {
                if scale == 0.0 {
                    return 1.0;
                }
                let x = (i + 1)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
                let u = ((x ^ (x >> 29)) >> 40) as f32 / (1u64 << 24) as f32;
                (2.0 * u - 1.0) * scale
            })
            .collect();
        st.insert(name, Tensor::from_vec(data, shape, &dev).unwrap());
    };
    let (h, ff, qd, kvd) = (256, 512, 256, 128);
    add(
        "model.embed_tokens.weight".into(),
        &[cfg.vocab_size, h],
        0.5,
    );
    add("lm_head.weight".into(), &[cfg.vocab_size, h], 0.17);
    add("model.norm.weight".into(), &[h], 0.0);
    for i in 0..2 {
        let p = format!("model.layers.{i}");
        add(format!("{p}.input_layernorm.weight"), &[h], 0.0);
        add(format!("{p}.post_attention_layernorm.weight"), &[h], 0.0);
        add(format!("{p}.self_attn.q_proj.weight"), &[qd, h], 0.17);
        add(format!("{p}.self_attn.k_proj.weight"), &[kvd, h], 0.17);
        add(format!("{p}.self_attn.v_proj.weight"), &[kvd, h], 0.17);
        add(format!("{p}.self_attn.o_proj.weight"), &[h, qd], 0.17);
        add(format!("{p}.mlp.gate_proj.weight"), &[ff, h], 0.17);
        add(format!("{p}.mlp.up_proj.weight"), &[ff, h], 0.17);
        add(format!("{p}.mlp.down_proj.weight"), &[h, ff], 0.17);
    }
    let tmp = tempfile::tempdir().unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 % 256) as u32).collect();
    for quant in [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::F16,
    ] {
        let quantized = hf_to_gguf(&st, &cfg, quant);
        // The reference: exactly the quantized values, stored as f32.
        let dense: Vec<(String, QTensor)> = quantized
            .iter()
            .map(|(n, q)| {
                (
                    n.clone(),
                    QTensor::quantize(&q.dequantize(&dev).unwrap(), GgmlDType::F32).unwrap(),
                )
            })
            .collect();
        let (qp, dp) = (tmp.path().join("q.gguf"), tmp.path().join("d.gguf"));
        write_gguf(&qp, &llama_metadata(&cfg), &quantized);
        write_gguf(&dp, &llama_metadata(&cfg), &dense);
        let run = |p: &Path| -> Tensor {
            let model =
                Model::load(&ModelSpec::Path(p.to_path_buf()), &DeviceMap::cpu(), None).unwrap();
            model.forward(&prompt, &mut model.new_cache()).unwrap()
        };
        let (q, d) = (run(&qp), run(&dp));
        let scale = d.abs().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        let diff = max_abs_diff(&q, &d);
        let dot = |a: &Tensor, b: &Tensor| {
            (a * b)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        let cosine = dot(&q, &d) / (dot(&q, &q) * dot(&d, &d)).sqrt();
        eprintln!("{quant:?}: vs dequantized weights max |Δlogits| {diff:.3e} (max |logit| {scale:.2}), cosine {cosine:.5}");
        // Only the activations differ (quantized to 8 bits inside each matmul, per 32 or 256
        // values); a wrong block layout would give unrelated logits.
        assert!(cosine > 0.995, "{quant:?}: cosine {cosine}");
        assert!(diff < 0.1 * scale, "{quant:?}: {diff} vs {scale}");
    }
}
