//! What a model needs, known before any weight is read: its facts from `config.json` or GGUF
//! metadata and tensor headers ([`ModelFacts`]), and a [`MemoryPlan`] for a device map: weight
//! bytes per device, KV bytes per 1k tokens, the longest context a KV budget holds, and each
//! device's free memory. [`MemoryPlan::check`] refuses a model that cannot fit, with the figures,
//! so loading never fails half-way for want of memory.
//!
//! Weight bytes are what the loader will hold, by the rule of its weights mode: checkpoint tensors
//! at the load dtype; GGUF block-quantized tensors as stored, expanded to the load dtype in
//! `dense`, and in `dense-q8` as stored for the types our CPU kernels take (else an 8.5-bit copy).
//! A tied output head shares the embedding. Activations and scratch come on top (tens of MiB for
//! the models here), which is why the check keeps a margin.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::DType;

use super::config::Config;
use super::device::{free_memory, DeviceMap};
use super::error::{EngineError, Result};
use super::load::{io_err, read_gguf, LoadOptions, ModelSpec, QuantizedWeights};

/// Share of a device's free memory a plan may fill: the rest is for activations, scratch and
/// whatever else the process holds.
pub const FIT_MARGIN: f64 = 0.9;

/// Where a model's weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    Gguf,
    Safetensors,
    RandomInit,
}

/// One tensor as its header describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorFacts {
    pub name: String,
    /// `F32`, `BF16`, `Q4_K`, ...
    pub dtype: String,
    pub elements: u64,
    /// Bytes in the file.
    pub stored_bytes: u64,
    /// Decoder layer, when the name places it in one.
    pub layer: Option<usize>,
}

/// A model's facts, read from headers and metadata only.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    pub source: String,
    pub format: WeightFormat,
    pub config: Config,
    pub tensors: Vec<TensorFacts>,
    /// Whether the model ships a chat template (GGUF metadata or tokenizer_config.json).
    pub chat_template: bool,
}

impl ModelFacts {
    /// Reads `spec`'s facts without touching tensor data.
    pub fn read(spec: &ModelSpec) -> Result<Self> {
        match spec {
            ModelSpec::Path(path) if path.is_dir() => read_checkpoint(path),
            ModelSpec::Path(path) if path.exists() => read_gguf_facts(path),
            ModelSpec::Path(path) => Err(EngineError::MissingWeights { path: path.clone() }),
            ModelSpec::Random { preset, .. } => {
                let config = Config::preset(preset)?;
                let tensors = preset_tensors(&config);
                Ok(Self {
                    source: format!("random-init {preset}"),
                    format: WeightFormat::RandomInit,
                    config,
                    tensors,
                    chat_template: false,
                })
            }
        }
    }

    pub fn stored_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.stored_bytes).sum()
    }

    /// Tensor count and stored bytes per dtype.
    pub fn dtypes(&self) -> BTreeMap<String, (usize, u64)> {
        let mut out = BTreeMap::new();
        for t in &self.tensors {
            let entry = out.entry(t.dtype.clone()).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += t.stored_bytes;
        }
        out
    }

    /// KV bytes per cached position at `dtype`.
    pub fn kv_bytes_per_token(&self, dtype: DType) -> u64 {
        let c = &self.config;
        (2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * dtype.size_in_bytes())
            as u64
    }

    /// Bytes one tensor takes once loaded with `options` at `dtype`.
    fn loaded_bytes(&self, t: &TensorFacts, options: &LoadOptions, dtype: DType) -> u64 {
        let dense = t.elements * dtype.size_in_bytes() as u64;
        match self.format {
            WeightFormat::Safetensors | WeightFormat::RandomInit => dense,
            WeightFormat::Gguf => {
                let quantized = !matches!(t.dtype.as_str(), "F32" | "F16" | "BF16");
                if !quantized || t.elements < 2 {
                    return dense;
                }
                match options.quantized {
                    QuantizedWeights::AsStored => t.stored_bytes,
                    QuantizedWeights::Dense => dense,
                    QuantizedWeights::DenseWithQ8Decode => {
                        let kept =
                            matches!(t.dtype.as_str(), "Q4_1" | "Q5_0" | "Q8_0" | "Q4_K" | "Q6_K");
                        if kept && super::cpu::q8::supported() {
                            t.stored_bytes
                        } else if super::cpu::q8::supported() {
                            t.elements * 34 / 32
                        } else {
                            dense + t.elements * 34 / 32
                        }
                    }
                }
            }
        }
    }
}

fn layer_of(name: &str) -> Option<usize> {
    let rest = name
        .strip_prefix("blk.")
        .or_else(|| name.strip_prefix("model.layers."))?;
    rest.split('.').next()?.parse().ok()
}

fn read_gguf_facts(path: &Path) -> Result<ModelFacts> {
    gguf_facts(path, &read_gguf(path)?)
}

/// Facts of a GGUF whose header `content` was already read (by the loader, so it is read once).
pub(crate) fn gguf_facts(path: &Path, content: &gguf_file::Content) -> Result<ModelFacts> {
    let config = Config::from_gguf_content(content, &path.display().to_string())?;
    let mut tensors: Vec<TensorFacts> = content
        .tensor_infos
        .iter()
        .map(|(name, info)| {
            let elements = info.shape.elem_count() as u64;
            let block = info.ggml_dtype.block_size() as u64;
            TensorFacts {
                name: name.clone(),
                dtype: gguf_dtype_name(info.ggml_dtype),
                elements,
                stored_bytes: elements / block * info.ggml_dtype.type_size() as u64,
                layer: layer_of(name),
            }
        })
        .collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ModelFacts {
        source: path.display().to_string(),
        format: WeightFormat::Gguf,
        config,
        tensors,
        chat_template: content.metadata.contains_key("tokenizer.chat_template"),
    })
}

/// ggml's spelling: `Q4_K`, `Q8_0`, `F32`.
fn gguf_dtype_name(dtype: GgmlDType) -> String {
    let name = format!("{dtype:?}").to_ascii_uppercase();
    match name.strip_suffix('K') {
        Some(stem) if stem.starts_with('Q') && !stem.contains('_') => format!("{stem}_K"),
        _ => name,
    }
}

fn read_checkpoint(dir: &Path) -> Result<ModelFacts> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
    let config = Config::from_hf_json(&text, &config_path.display().to_string())?;
    let mut tensors = Vec::new();
    for shard in super::load::shard_paths(dir)? {
        tensors.extend(safetensors_header(&shard)?);
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let chat_template = std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("chat_template").is_some());
    Ok(ModelFacts {
        source: dir.display().to_string(),
        format: WeightFormat::Safetensors,
        config,
        tensors,
        chat_template,
    })
}

/// A safetensors file's tensor list from its JSON header (8-byte length, then the header), the
/// data never read. The header is capped at 100 MB, as the safetensors crate caps it.
fn safetensors_header(path: &PathBuf) -> Result<Vec<TensorFacts>> {
    let corrupt = |detail: String| EngineError::TruncatedWeights {
        path: path.clone(),
        detail,
    };
    let mut file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| corrupt("shorter than a safetensors header".into()))?;
    let len = u64::from_le_bytes(len);
    if len > 100_000_000 || 8 + len > file_len {
        return Err(corrupt(format!(
            "header length {len} does not fit the file"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(io_err(path))?;
    let header: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| corrupt(format!("header: {e}")))?;
    let mut out = Vec::new();
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype = info
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| corrupt(format!("tensor {name}: no dtype")))?
            .to_string();
        let shape: Vec<u64> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .map(|dims| dims.iter().filter_map(|d| d.as_u64()).collect())
            .ok_or_else(|| corrupt(format!("tensor {name}: no shape")))?;
        let offsets: Vec<u64> = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .map(|o| o.iter().filter_map(|d| d.as_u64()).collect())
            .unwrap_or_default();
        let stored_bytes = match offsets.as_slice() {
            [start, end] if end >= start => end - start,
            _ => return Err(corrupt(format!("tensor {name}: bad data_offsets"))),
        };
        out.push(TensorFacts {
            layer: layer_of(&name),
            elements: shape.iter().product(),
            name,
            dtype,
            stored_bytes,
        });
    }
    Ok(out)
}

/// The tensors a random-init model builds, with HF names, at f32 "stored" size.
fn preset_tensors(c: &Config) -> Vec<TensorFacts> {
    let (h, q, kv, inter) = (
        c.hidden_size as u64,
        (c.num_attention_heads * c.head_dim) as u64,
        (c.num_key_value_heads * c.head_dim) as u64,
        c.intermediate_size as u64,
    );
    let tensor = |name: String, elements: u64, layer| TensorFacts {
        name,
        dtype: "F32".into(),
        elements,
        stored_bytes: 4 * elements,
        layer,
    };
    let mut out = vec![
        tensor(
            "model.embed_tokens.weight".into(),
            c.vocab_size as u64 * h,
            None,
        ),
        tensor("model.norm.weight".into(), h, None),
    ];
    if !c.tie_word_embeddings {
        out.push(tensor(
            "lm_head.weight".into(),
            c.vocab_size as u64 * h,
            None,
        ));
    }
    for i in 0..c.num_hidden_layers {
        let mut parts = vec![
            ("self_attn.q_proj".to_string(), h * q),
            ("self_attn.k_proj".into(), h * kv),
            ("self_attn.v_proj".into(), h * kv),
            ("self_attn.o_proj".into(), q * h),
            ("input_layernorm".into(), h),
            ("post_attention_layernorm".into(), h),
        ];
        match &c.moe {
            Some(moe) if moe.is_sparse(i) => {
                let width = moe.moe_intermediate_size as u64;
                parts.push(("mlp.gate".into(), moe.num_experts as u64 * h));
                for e in 0..moe.num_experts {
                    for proj in ["gate_proj", "up_proj", "down_proj"] {
                        parts.push((format!("mlp.experts.{e}.{proj}"), h * width));
                    }
                }
            }
            _ => {
                for proj in ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"] {
                    parts.push((proj.into(), h * inter));
                }
            }
        }
        for (part, elements) in parts {
            out.push(tensor(
                format!("model.layers.{i}.{part}.weight"),
                elements,
                Some(i),
            ));
        }
    }
    out
}

/// One device's share of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePlan {
    /// `cpu`, `cuda:0`, ...
    pub device: String,
    /// Decoder layers `start..end` on this device.
    pub layers: (usize, usize),
    pub weight_bytes: u64,
    /// Free memory now, where the device reports it.
    pub free_bytes: Option<u64>,
}

/// Where a model's memory goes on a device map.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    pub dtype: DType,
    pub devices: Vec<DevicePlan>,
    pub kv_bytes_per_1k_tokens: u64,
    pub kv_budget_bytes: u64,
    /// Positions the KV budget holds for one sequence, capped by the model's context window.
    pub max_context_in_budget: usize,
    pub context_len: usize,
}

impl MemoryPlan {
    /// The plan for `facts` loaded with `options` onto `devices`, with `kv_budget_bytes` of KV.
    pub fn new(
        facts: &ModelFacts,
        devices: &DeviceMap,
        options: &LoadOptions,
        kv_budget_bytes: u64,
    ) -> Self {
        let dtype = options.dtype.unwrap_or_else(|| devices.default_dtype());
        let layers = facts.config.num_hidden_layers;
        let assignment = devices.layer_assignment(layers);
        let slots = devices.devices().len();
        let mut plans: Vec<DevicePlan> = (0..slots)
            .map(|slot| {
                let mine: Vec<usize> = (0..layers).filter(|&l| assignment[l] == slot).collect();
                DevicePlan {
                    device: device_name(devices, slot),
                    layers: match (mine.first(), mine.last()) {
                        (Some(&a), Some(&b)) => (a, b + 1),
                        _ => (0, 0),
                    },
                    weight_bytes: 0,
                    free_bytes: free_memory(&devices.devices()[slot]),
                }
            })
            .collect();
        for t in &facts.tensors {
            let bytes = facts.loaded_bytes(t, options, dtype);
            let slot = match t.layer {
                Some(layer) => assignment.get(layer).copied().unwrap_or(slots - 1),
                // The embeddings sit on the first device; the final norm and head on the last.
                None if t.name.contains("embed") || t.name.starts_with("token_embd") => 0,
                None => slots - 1,
            };
            plans[slot].weight_bytes += bytes;
        }
        let per_token = facts.kv_bytes_per_token(dtype);
        let context_len = facts.config.max_position_embeddings;
        Self {
            dtype,
            devices: plans,
            kv_bytes_per_1k_tokens: per_token * 1000,
            kv_budget_bytes,
            max_context_in_budget: ((kv_budget_bytes / per_token.max(1)) as usize).min(context_len),
            context_len,
        }
    }

    pub fn weight_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.weight_bytes).sum()
    }

    /// Refuses a plan whose weights exceed [`FIT_MARGIN`] of a device's free memory (summed over
    /// the entries that name the same device), or of `budget` when one is given for the devices.
    pub fn check(&self, budget: Option<u64>) -> Result<()> {
        let mut by_device: BTreeMap<&str, (u64, Option<u64>)> = BTreeMap::new();
        for d in &self.devices {
            let entry = by_device
                .entry(d.device.as_str())
                .or_insert((0, budget.or(d.free_bytes)));
            entry.0 += d.weight_bytes;
        }
        for (device, (needed, free)) in by_device {
            let Some(free) = free else { continue };
            if needed as f64 > free as f64 * FIT_MARGIN {
                return Err(EngineError::DoesNotFit {
                    device: device.to_string(),
                    needed,
                    available: free,
                    plan: self.render(),
                });
            }
        }
        Ok(())
    }

    /// The plan as a few aligned lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for d in &self.devices {
            let free = d
                .free_bytes
                .map(|b| format!(", {} free", human(b)))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<8} layers {:>3}..{:<3} weights {:>10}{free}\n",
                d.device,
                d.layers.0,
                d.layers.1,
                human(d.weight_bytes)
            ));
        }
        out.push_str(&format!(
            "  weights in all {} ({:?}); KV cache {} per 1k tokens; --kv-memory {} holds {} tokens (context window {})",
            human(self.weight_bytes()),
            self.dtype,
            human(self.kv_bytes_per_1k_tokens),
            human(self.kv_budget_bytes),
            self.max_context_in_budget,
            self.context_len
        ));
        out
    }
}

fn device_name(devices: &DeviceMap, slot: usize) -> String {
    match devices.kinds()[slot] {
        super::device::DeviceKind::Cpu => "cpu".into(),
        super::device::DeviceKind::Cuda(n) => format!("cuda:{n}"),
    }
}

/// `1.23 GiB`-style sizes.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_read_from_both_naming_schemes() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("model.layers.3.mlp.up_proj.weight"), Some(3));
        assert_eq!(layer_of("token_embd.weight"), None);
    }

    #[test]
    fn a_preset_plan_splits_weights_and_sizes_the_kv_cache() {
        let facts = ModelFacts::read(&ModelSpec::Random {
            preset: "qwen3-0.6b".into(),
            seed: 0,
        })
        .unwrap();
        let devices = DeviceMap::parse("cpu,cpu", Some("3,1")).unwrap();
        let plan = MemoryPlan::new(&facts, &devices, &LoadOptions::default(), 1 << 30);
        assert_eq!(plan.devices[0].layers, (0, 21));
        assert_eq!(plan.devices[1].layers, (21, 28));
        // Qwen3-0.6B: 28 layers, 8 KV heads of 128 at f32.
        assert_eq!(plan.kv_bytes_per_1k_tokens, 1000 * 2 * 28 * 8 * 128 * 4);
        assert_eq!(
            plan.max_context_in_budget,
            ((1u64 << 30) / (2 * 28 * 8 * 128 * 4)) as usize
        );
        assert_eq!(plan.weight_bytes(), facts.stored_bytes());
        assert!(plan.devices[0].weight_bytes > 2 * plan.devices[1].weight_bytes);
        assert!(human(plan.weight_bytes()).ends_with("GiB"));
        assert!(plan.check(Some(u64::MAX / 2)).is_ok());
        let err = plan.check(Some(1 << 20)).unwrap_err().to_string();
        assert!(err.contains("cpu") && err.contains("KV cache"), "{err}");
    }
}
