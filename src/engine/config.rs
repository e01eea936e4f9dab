//! Model hyper-parameters for the decoder families the engine runs (Qwen3, Qwen2 / Qwen2.5 and
//! Llama 3.x / SmolLM2), read from an HF `config.json`, from GGUF metadata, or from a named preset.
//!
//! HF configs come in two generations: transformers 4 writes `rope_theta` / `rope_scaling` at the
//! top level, transformers 5 writes `rope_parameters`. Both are accepted; the top level wins when
//! both are present because Hub checkpoints have been edited that way for older parsers.

use std::collections::HashMap;

use candle_core::quantized::gguf_file;
use serde::Deserialize;

use super::error::{EngineError, Result};

/// Which decoder family the weights belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Qwen3: per-head RMSNorm on q and k before RoPE.
    Qwen3,
    /// Qwen2 / Qwen2.5: Qwen3's layout without the q/k norms, with biases on q, k and v.
    Qwen2,
    /// Llama 2/3.x, SmolLM2, Mistral-like without sliding window.
    Llama,
    /// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention, a routed mixture of experts in
    /// place of the MLP (see [`MoeConfig`]).
    Qwen3Moe,
}

impl Architecture {
    fn parse(name: &str) -> Result<Self> {
        match name {
            "Qwen3ForCausalLM" | "qwen3" => Ok(Self::Qwen3),
            "Qwen2ForCausalLM" | "qwen2" => Ok(Self::Qwen2),
            "LlamaForCausalLM" | "llama" => Ok(Self::Llama),
            "Qwen3MoeForCausalLM" | "qwen3_moe" | "qwen3moe" => Ok(Self::Qwen3Moe),
            other => Err(EngineError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// Whether q, k and v carry a bias (Qwen2's checkpoints always do; their configs do not say).
    pub fn qkv_bias(self) -> bool {
        self == Self::Qwen2
    }

    /// Whether queries and keys go through a per-head RMSNorm before RoPE.
    pub fn qk_norm(self) -> bool {
        matches!(self, Self::Qwen3 | Self::Qwen3Moe)
    }
}

/// The `rope_type: llama3` frequency rescaling of Llama 3.1+.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Llama3RopeScaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
}

/// The mixture-of-experts block of Qwen3-MoE, as transformers' `Qwen3MoeSparseMoeBlock` runs it:
/// a router picks the `num_experts_per_tok` experts with the largest softmax probability per
/// token, and the token's output is their outputs weighted by those probabilities (renormalized
/// to sum to 1 when `norm_topk_prob`).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    /// Each expert's MLP width (the dense layers keep `intermediate_size`).
    pub moe_intermediate_size: usize,
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer is sparse (1: all of them)...
    pub decoder_sparse_step: usize,
    /// ...except these, which keep a dense MLP.
    pub mlp_only_layers: Vec<usize>,
}

impl MoeConfig {
    /// Whether layer `i` routes through experts: transformers' rule.
    pub fn is_sparse(&self, i: usize) -> bool {
        self.num_experts > 0
            && !self.mlp_only_layers.contains(&i)
            && (i + 1).is_multiple_of(self.decoder_sparse_step.max(1))
    }
}

/// Resolved hyper-parameters; everything the forward pass needs, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3RopeScaling>,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Qwen3-MoE's experts; `None` for dense models.
    pub moe: Option<MoeConfig>,
}

/// `eos_token_id` is an int in most configs and a list in Llama 3.1's.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

/// The subset of an HF `config.json` the engine reads, field names as transformers writes them.
#[derive(Debug, Clone, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    eos_token_id: Option<OneOrMany>,
    /// transformers 5 writes `num_local_experts`; Hub checkpoints have `num_experts`.
    #[serde(default, alias = "num_local_experts")]
    pub num_experts: Option<usize>,
    #[serde(default)]
    pub num_experts_per_tok: Option<usize>,
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
    #[serde(default)]
    pub norm_topk_prob: Option<bool>,
    #[serde(default)]
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Vec<usize>,
}

impl Config {
    /// Parses the text of an HF `config.json`; `source_name` only labels errors.
    pub fn from_hf_json(text: &str, source_name: &str) -> Result<Self> {
        let bad = |detail: String| EngineError::BadConfig {
            source_name: source_name.to_string(),
            detail,
        };
        let hf: HfConfig = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let arch_name = hf
            .architectures
            .first()
            .cloned()
            .or_else(|| hf.model_type.clone())
            .ok_or_else(|| bad("neither `architectures` nor `model_type` is set".into()))?;
        let architecture = Architecture::parse(&arch_name)?;
        // Qwen2's q/k/v biases are implied by the architecture; a Llama-style `attention_bias`
        // would also put one on the output projection, which the forward pass does not have.
        if hf.attention_bias && !architecture.qkv_bias() {
            return Err(bad("attention_bias = true is not supported".into()));
        }
        let params = hf.rope_parameters.as_ref();
        let rope_theta = hf
            .rope_theta
            .or_else(|| {
                params
                    .and_then(|p| p.get("rope_theta"))
                    .and_then(|v| v.as_f64())
            })
            .unwrap_or(10_000.0);
        let scaling_value = match &hf.rope_scaling {
            Some(v) if !v.is_null() => Some(v),
            _ => params,
        };
        let rope_scaling = match scaling_value {
            None => None,
            Some(v) => {
                let kind = v
                    .get("rope_type")
                    .or_else(|| v.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" => Some(
                        serde_json::from_value::<Llama3RopeScaling>(v.clone())
                            .map_err(|e| bad(format!("rope scaling: {e}")))?,
                    ),
                    other => {
                        return Err(bad(format!("rope scaling type `{other}` is not supported")))
                    }
                }
            }
        };
        if hf.num_attention_heads == 0 || hf.num_hidden_layers == 0 {
            return Err(bad(
                "num_attention_heads and num_hidden_layers must be > 0".into()
            ));
        }
        let num_key_value_heads = hf.num_key_value_heads.unwrap_or(hf.num_attention_heads);
        if num_key_value_heads == 0 || !hf.num_attention_heads.is_multiple_of(num_key_value_heads) {
            return Err(bad(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {num_key_value_heads}",
                hf.num_attention_heads
            )));
        }
        let head_dim = hf
            .head_dim
            .unwrap_or(hf.hidden_size / hf.num_attention_heads);
        if !head_dim.is_multiple_of(2) {
            return Err(bad(format!("head_dim {head_dim} must be even for RoPE")));
        }
        let eos_token_ids = match hf.eos_token_id {
            None => Vec::new(),
            Some(OneOrMany::One(id)) => vec![id],
            Some(OneOrMany::Many(ids)) => ids,
        };
        let moe = match architecture {
            Architecture::Qwen3Moe => {
                let need = |v: Option<usize>, key: &str| {
                    v.filter(|&n| n > 0)
                        .ok_or_else(|| bad(format!("`{key}` must be set and > 0 for Qwen3-MoE")))
                };
                let moe = MoeConfig {
                    num_experts: need(hf.num_experts, "num_experts")?,
                    num_experts_per_tok: need(hf.num_experts_per_tok, "num_experts_per_tok")?,
                    moe_intermediate_size: need(hf.moe_intermediate_size, "moe_intermediate_size")?,
                    // transformers' Qwen3MoeConfig default; the released checkpoints set true.
                    norm_topk_prob: hf.norm_topk_prob.unwrap_or(false),
                    decoder_sparse_step: hf.decoder_sparse_step.unwrap_or(1).max(1),
                    mlp_only_layers: hf.mlp_only_layers.clone(),
                };
                if moe.num_experts_per_tok > moe.num_experts {
                    return Err(bad(format!(
                        "num_experts_per_tok {} exceeds num_experts {}",
                        moe.num_experts_per_tok, moe.num_experts
                    )));
                }
                Some(moe)
            }
            _ => None,
        };
        Ok(Self {
            architecture,
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_hidden_layers: hf.num_hidden_layers,
            num_attention_heads: hf.num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: hf.rms_norm_eps,
            rope_theta,
            rope_scaling,
            max_position_embeddings: hf.max_position_embeddings,
            tie_word_embeddings: hf.tie_word_embeddings,
            bos_token_id: hf.bos_token_id,
            eos_token_ids,
            moe,
        })
    }

    /// Reads the `{arch}.*` keys llama.cpp writes. Llama 3 scaling in GGUF lives in the
    /// `rope_freqs` tensor, not in metadata, so the loader handles it.
    pub fn from_gguf(
        metadata: &HashMap<String, gguf_file::Value>,
        source_name: &str,
    ) -> Result<Self> {
        let bad = |detail: String| EngineError::BadConfig {
            source_name: source_name.to_string(),
            detail,
        };
        let arch_name = metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or_else(|| bad("`general.architecture` is missing".into()))?
            .clone();
        let architecture = Architecture::parse(&arch_name)?;
        let get = |key: &str| metadata.get(&format!("{arch_name}.{key}"));
        let get_usize = |key: &str| -> Result<usize> {
            let v = get(key).ok_or_else(|| bad(format!("`{arch_name}.{key}` is missing")))?;
            value_to_u64(v)
                .map(|n| n as usize)
                .ok_or_else(|| bad(format!("`{arch_name}.{key}` is not an integer")))
        };
        let hidden_size = get_usize("embedding_length")?;
        let num_attention_heads = get_usize("attention.head_count")?;
        let num_key_value_heads =
            get_usize("attention.head_count_kv").unwrap_or(num_attention_heads);
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
        {
            return Err(bad(format!(
                "head_count {num_attention_heads} is not a multiple of head_count_kv {num_key_value_heads}"
            )));
        }
        let head_dim = get_usize("attention.key_length")
            .or_else(|_| get_usize("rope.dimension_count"))
            .unwrap_or(hidden_size / num_attention_heads);
        let rms_norm_eps = get("attention.layer_norm_rms_epsilon")
            .and_then(|v| v.to_f32().ok())
            .ok_or_else(|| {
                bad(format!(
                    "`{arch_name}.attention.layer_norm_rms_epsilon` is missing"
                ))
            })?;
        let rope_theta = get("rope.freq_base")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10_000.0);
        let vocab_size = match get_usize("vocab_size") {
            Ok(n) => n,
            Err(_) => metadata
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.to_vec().ok())
                .map(|v| v.len())
                .ok_or_else(|| {
                    bad("vocabulary size unknown (no vocab_size, no tokenizer.ggml.tokens)".into())
                })?,
        };
        let token = |key: &str| metadata.get(key).and_then(value_to_u64).map(|n| n as u32);
        let feed_forward_length = get_usize("feed_forward_length")?;
        let moe = match architecture {
            Architecture::Qwen3Moe => {
                let num_experts_per_tok = get_usize("expert_used_count")?;
                let num_experts = get_usize("expert_count")?;
                if num_experts_per_tok == 0 || num_experts_per_tok > num_experts {
                    return Err(bad(format!(
                        "expert_used_count {num_experts_per_tok} must be in 1..={num_experts}"
                    )));
                }
                Some(MoeConfig {
                    num_experts,
                    num_experts_per_tok,
                    // llama.cpp's fallback when the key is absent.
                    moe_intermediate_size: get_usize("expert_feed_forward_length")
                        .unwrap_or(feed_forward_length / num_experts_per_tok),
                    // llama.cpp's qwen3moe graph always renormalizes the chosen weights.
                    norm_topk_prob: true,
                    decoder_sparse_step: 1,
                    // Set from which layers have a router (`from_gguf_content`).
                    mlp_only_layers: Vec::new(),
                })
            }
            _ => None,
        };
        Ok(Self {
            architecture,
            vocab_size,
            hidden_size,
            intermediate_size: feed_forward_length,
            num_hidden_layers: get_usize("block_count")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            // f32 metadata, widened through its decimal form so 1e-6 stays 1e-6 rather than 9.99999997e-7.
            rms_norm_eps: format!("{rms_norm_eps}")
                .parse()
                .unwrap_or(rms_norm_eps as f64),
            rope_theta: rope_theta as f64,
            rope_scaling: None,
            max_position_embeddings: get_usize("context_length")?,
            // Decided by the loader from whether `output.weight` exists.
            tie_word_embeddings: false,
            bos_token_id: token("tokenizer.ggml.bos_token_id"),
            eos_token_ids: token("tokenizer.ggml.eos_token_id").into_iter().collect(),
            moe,
        })
    }

    /// [`Config::from_gguf`] completed from the tensor index: the embedding table is the
    /// authority on the vocabulary size (Qwen GGUFs pad it beyond the tokenizer's list and do not
    /// always write `{arch}.vocab_size`), and a Qwen3-MoE layer without a router
    /// (`ffn_gate_inp`) is a dense one. llama.cpp's own qwen3moe graph makes every layer sparse;
    /// this reads what transformers' `mlp_only_layers` would have written.
    pub fn from_gguf_content(content: &gguf_file::Content, source_name: &str) -> Result<Self> {
        let mut cfg = Self::from_gguf(&content.metadata, source_name)?;
        // Every layer stores tensors; a corrupt `block_count` (billions) must not drive the per-layer
        // loops below into minutes of work and gigabytes of memory (fuzz/RESULTS.md).
        if cfg.num_hidden_layers > content.tensor_infos.len() {
            return Err(EngineError::BadConfig {
                source_name: source_name.to_string(),
                detail: format!(
                    "{} layers but only {} tensors in the file",
                    cfg.num_hidden_layers,
                    content.tensor_infos.len()
                ),
            });
        }
        if let Some(info) = content.tensor_infos.get("token_embd.weight") {
            if let [rows, _] = info.shape.dims() {
                cfg.vocab_size = *rows;
            }
        }
        if let Some(moe) = cfg.moe.as_mut() {
            moe.mlp_only_layers = (0..cfg.num_hidden_layers)
                .filter(|i| {
                    !content
                        .tensor_infos
                        .contains_key(&format!("blk.{i}.ffn_gate_inp.weight"))
                })
                .collect();
        }
        Ok(cfg)
    }

    /// Real shapes of well-known models, for `--random-init`: lets the agent loop and benchmarks
    /// run at the true cost without downloading weights.
    pub fn preset(name: &str) -> Result<Self> {
        let qwen3 = |hidden, inter, layers, heads, tied| Self {
            architecture: Architecture::Qwen3,
            vocab_size: 151_936,
            hidden_size: hidden,
            intermediate_size: inter,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: 8,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: None,
            max_position_embeddings: 40_960,
            tie_word_embeddings: tied,
            bos_token_id: Some(151_643),
            eos_token_ids: vec![151_645, 151_643],
            moe: None,
        };
        let qwen3_moe = |hidden, layers, heads, kv_heads, experts, used, expert_width| Self {
            architecture: Architecture::Qwen3Moe,
            num_key_value_heads: kv_heads,
            moe: Some(MoeConfig {
                num_experts: experts,
                num_experts_per_tok: used,
                moe_intermediate_size: expert_width,
                norm_topk_prob: true,
                decoder_sparse_step: 1,
                mlp_only_layers: Vec::new(),
            }),
            ..qwen3(hidden, 6144, layers, heads, false)
        };
        match name {
            // Qwen3-30B-A3B's config.json: 128 experts of width 768, 8 per token, every layer sparse.
            "qwen3-30b-a3b" => Ok(qwen3_moe(2048, 48, 32, 4, 128, 8, 768)),
            // The same design at a size a CPU runs in seconds (scripts/gpu-check.sh off a GPU).
            "qwen3-moe-mini" => Ok(qwen3_moe(1024, 8, 16, 4, 32, 4, 384)),
            "qwen3-0.6b" => Ok(qwen3(1024, 3072, 28, 16, true)),
            "qwen3-4b" => Ok(qwen3(2560, 9728, 36, 32, true)),
            "qwen3-8b" => Ok(qwen3(4096, 12288, 36, 32, false)),
            "qwen2.5-0.5b" => Ok(Self {
                architecture: Architecture::Qwen2,
                hidden_size: 896,
                intermediate_size: 4864,
                num_hidden_layers: 24,
                num_attention_heads: 14,
                num_key_value_heads: 2,
                head_dim: 64,
                max_position_embeddings: 32_768,
                ..qwen3(896, 4864, 24, 14, true)
            }),
            "llama-3.1-8b" => Ok(Self {
                architecture: Architecture::Llama,
                vocab_size: 128_256,
                hidden_size: 4096,
                intermediate_size: 14_336,
                num_hidden_layers: 32,
                num_attention_heads: 32,
                num_key_value_heads: 8,
                head_dim: 128,
                rms_norm_eps: 1e-5,
                rope_theta: 500_000.0,
                rope_scaling: Some(Llama3RopeScaling {
                    factor: 8.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_position_embeddings: 8192,
                }),
                max_position_embeddings: 131_072,
                tie_word_embeddings: false,
                bos_token_id: Some(128_000),
                eos_token_ids: vec![128_001, 128_008, 128_009],
                moe: None,
            }),
            other => Err(EngineError::UnknownPreset(other.to_string())),
        }
    }

    /// Query heads per KV head (grouped-query attention).
    pub fn kv_groups(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }
}

fn value_to_u64(v: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value as V;
    match v {
        V::U8(n) => Some(*n as u64),
        V::U16(n) => Some(*n as u64),
        V::U32(n) => Some(*n as u64),
        V::U64(n) => Some(*n),
        V::I8(n) => u64::try_from(*n).ok(),
        V::I16(n) => u64::try_from(*n).ok(),
        V::I32(n) => u64::try_from(*n).ok(),
        V::I64(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_config_with_both_rope_generations() {
        let text = r#"{"architectures":["LlamaForCausalLM"],"vocab_size":512,"hidden_size":64,
            "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
            "rms_norm_eps":1e-5,"max_position_embeddings":512,"eos_token_id":[1,2],
            "rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":64}}"#;
        let cfg = Config::from_hf_json(text, "test").unwrap();
        assert_eq!(cfg.architecture, Architecture::Llama);
        assert_eq!(cfg.head_dim, 16);
        assert_eq!(cfg.rope_theta, 500_000.0);
        assert_eq!(
            cfg.rope_scaling.unwrap().original_max_position_embeddings,
            64
        );
        assert_eq!(cfg.eos_token_ids, vec![1, 2]);
        assert!(!cfg.tie_word_embeddings);
    }

    #[test]
    fn qwen2_config_implies_qkv_biases_and_no_qk_norm() {
        // Qwen2.5-0.5B-Instruct's config.json, trimmed: no `attention_bias`, no `head_dim`.
        let text = r#"{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","vocab_size":151936,
            "hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,"num_attention_heads":14,
            "num_key_value_heads":2,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
            "max_position_embeddings":32768,"tie_word_embeddings":true,"eos_token_id":151645,
            "use_sliding_window":false,"sliding_window":32768}"#;
        let cfg = Config::from_hf_json(text, "test").unwrap();
        assert_eq!(cfg.architecture, Architecture::Qwen2);
        assert!(cfg.architecture.qkv_bias());
        assert!(!cfg.architecture.qk_norm());
        assert_eq!(cfg.head_dim, 64);
        assert_eq!(cfg.kv_groups(), 7);
        assert!(cfg.tie_word_embeddings);
        // A Llama asking for attention biases is still refused (it would need an output bias).
        let llama = text
            .replace("Qwen2ForCausalLM", "LlamaForCausalLM")
            .replace(r#""model_type":"qwen2","#, r#""attention_bias":true,"#);
        assert!(matches!(
            Config::from_hf_json(&llama, "test"),
            Err(EngineError::BadConfig { .. })
        ));
    }

    #[test]
    fn unsupported_architecture_is_named() {
        let text = r#"{"architectures":["MistralForCausalLM"],"vocab_size":8,"hidden_size":8,
            "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":1,"rms_norm_eps":1e-5,
            "max_position_embeddings":8}"#;
        match Config::from_hf_json(text, "test") {
            Err(EngineError::UnsupportedArchitecture(name)) => {
                assert_eq!(name, "MistralForCausalLM")
            }
            other => panic!("expected UnsupportedArchitecture, got {other:?}"),
        }
    }

    #[test]
    fn presets_have_consistent_shapes() {
        for name in [
            "qwen3-0.6b",
            "qwen3-4b",
            "qwen3-8b",
            "qwen2.5-0.5b",
            "llama-3.1-8b",
            "qwen3-30b-a3b",
            "qwen3-moe-mini",
        ] {
            let cfg = Config::preset(name).unwrap();
            assert_eq!(
                cfg.num_attention_heads % cfg.num_key_value_heads,
                0,
                "{name}"
            );
        }
        assert!(matches!(
            Config::preset("gpt-2"),
            Err(EngineError::UnknownPreset(_))
        ));
    }
}
