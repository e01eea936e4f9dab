//! Building a [`Model`] from an HF checkpoint directory, a GGUF file, or a random-init preset.
//!
//! Files are validated before candle sees them so that a missing or truncated file becomes a
//! precise [`EngineError`] instead of an I/O error deep in a tensor read.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::config::{Architecture, Config};
use super::cpu::q4::Q41Rows;
use super::cpu::q4k::Q4KRows;
use super::cpu::q5::Q50Rows;
use super::cpu::q6k::Q6KRows;
use super::cpu::q8::{self as cpu_q8, Q8Rows};
use super::device::DeviceMap;
use super::error::{EngineError, Result};
use super::model::{DecodeRows, Layer, Linear, Model, DEFAULT_PREFILL_CHUNK};
use super::plan::{gguf_facts, MemoryPlan, ModelFacts};
use super::rope::{Rope, RopeLayout};

mod layers;
mod random;

use layers::{build_layer, WeightSource, GGUF_NAMES, HF_NAMES};
use random::load_random;

/// Where a model's weights come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSpec {
    /// An HF checkpoint directory (config.json + safetensors) or a `.gguf` file.
    Path(PathBuf),
    /// Real shapes of a known model with seeded random weights (see [`Config::preset`]).
    Random { preset: String, seed: u64 },
}

impl ModelSpec {
    /// `random:PRESET` or `random:PRESET:SEED` (seed 0 by default), anything else a path.
    pub fn parse(text: &str) -> Result<Self> {
        let Some(rest) = text.strip_prefix("random:") else {
            return Ok(Self::Path(PathBuf::from(text)));
        };
        let (preset, seed) = match rest.split_once(':') {
            Some((preset, seed)) => (
                preset,
                seed.parse()
                    .map_err(|_| EngineError::UnknownPreset(rest.to_string()))?,
            ),
            None => (rest, 0),
        };
        Config::preset(preset)?;
        Ok(Self::Random {
            preset: preset.to_string(),
            seed,
        })
    }
}

/// How block-quantized GGUF weights are held in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QuantizedWeights {
    /// As stored, multiplied by candle's quantized kernels (activations quantized to 8 bits, as
    /// llama.cpp does). Least memory; slow on CPU for types without a SIMD kernel (Q4_1).
    #[default]
    AsStored,
    /// Expanded to dense `dtype` at load: prefill runs as a real GEMM, weights are exact, memory
    /// grows 8x for 4-bit types.
    Dense,
    /// On CPUs with AVX-512 VNNI (f32 activations): Q4_1, Q5_0, Q8_0, Q4_K and Q6_K tensors as
    /// stored, other types re-quantized to Q8_0, multiplied by our int8 kernels for prefill and
    /// decoding alike, with llama.cpp's arithmetic (activations quantized to 8 bits); memory as
    /// the file's. Elsewhere `Dense` for prefill plus a Q8_0 copy for single-row products, i.e.
    /// decoding, which is bound by how fast weights stream. The fastest CPU setting for small
    /// models; logits differ slightly from `Dense`.
    DenseWithQ8Decode,
}

impl QuantizedWeights {
    /// GGUF files up to this size are expanded to dense weights on CPU by [`QuantizedWeights::auto`].
    pub const AUTO_DENSE_MAX_BYTES: u64 = 512 << 20;

    /// The CLI's `--weights auto`: [`QuantizedWeights::DenseWithQ8Decode`] for a GGUF file of at
    /// most [`Self::AUTO_DENSE_MAX_BYTES`] when every layer runs on the CPU, else
    /// [`QuantizedWeights::AsStored`]. With AVX-512 VNNI that mode is the fastest for any size
    /// (Qwen2.5-Coder-1.5B Q4_K_M prefill 1.5x llama.cpp's, as stored 0.7x), but larger files keep
    /// candle's kernels by default: their arithmetic is ggml's row by row, and on the 1.5B our
    /// multi-row prefill flips a near tie (0.07 logits; llama.cpp's own logit gaps there move
    /// by 0.17 between batch sizes) away from llama.cpp's greedy tokens. `--weights dense-q8`
    /// selects the fast mode.
    pub fn auto(model: &Path, devices: &DeviceMap) -> Self {
        let all_cpu = devices.first().is_cpu() && devices.last().is_cpu();
        if all_cpu && Self::is_small_gguf(model) {
            Self::DenseWithQ8Decode
        } else {
            Self::AsStored
        }
    }

    /// Whether `model` is a file of at most [`Self::AUTO_DENSE_MAX_BYTES`].
    pub fn is_small_gguf(model: &Path) -> bool {
        std::fs::metadata(model)
            .map(|m| m.is_file() && m.len() <= Self::AUTO_DENSE_MAX_BYTES)
            .unwrap_or(false)
    }
}

/// What `--weights` asks for: a [`QuantizedWeights`] or `auto`, which picks one per model and
/// device map ([`WeightsMode::resolve`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsMode {
    /// [`QuantizedWeights::AsStored`].
    AsStored,
    /// [`QuantizedWeights::Dense`].
    Dense,
    /// [`QuantizedWeights::DenseWithQ8Decode`].
    DenseQ8,
    /// [`QuantizedWeights::auto`].
    #[default]
    Auto,
}

impl WeightsMode {
    pub fn resolve(self, model: &Path, devices: &DeviceMap) -> QuantizedWeights {
        match self {
            WeightsMode::AsStored => QuantizedWeights::AsStored,
            WeightsMode::Dense => QuantizedWeights::Dense,
            WeightsMode::DenseQ8 => QuantizedWeights::DenseWithQ8Decode,
            WeightsMode::Auto => QuantizedWeights::auto(model, devices),
        }
    }
}

/// Loading settings beyond the weights' location and devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOptions {
    /// Activation, KV and dense-weight dtype; defaults to the device map's (f32 CPU, bf16 CUDA).
    pub dtype: Option<DType>,
    /// GGUF only. SmolLM2-135M Q4_1 decoding llama.cpp's reference message on a 2-core AVX-512
    /// VNNI machine (`tableseek generate ... --weights W --threads 2 --json`, one run each, 40
    /// tokens): as stored 21 tokens/s, dense 23, dense + quantized decode 101 and 126 (two runs).
    /// All reproduce llama.cpp's 40 greedy tokens.
    pub quantized: QuantizedWeights,
    /// Prefill chunk; [`DEFAULT_PREFILL_CHUNK`] when `None`.
    pub prefill_chunk: Option<usize>,
}

impl LoadOptions {
    /// For a model that only ever prefills (embedding and reranker heads): dense weights for a
    /// GGUF small enough for [`QuantizedWeights::auto`]'s rule on an all-CPU map (there is no
    /// decoding for the 8-bit copy to speed up), else as stored.
    pub fn for_prefill(model: &Path, devices: &DeviceMap) -> Self {
        let quantized = match QuantizedWeights::auto(model, devices) {
            QuantizedWeights::DenseWithQ8Decode => QuantizedWeights::Dense,
            other => other,
        };
        LoadOptions {
            quantized,
            ..LoadOptions::default()
        }
    }
}

impl Model {
    /// Loads weights onto `devices`; `dtype` defaults to the device map's (f32 CPU, bf16 CUDA).
    pub fn load(spec: &ModelSpec, devices: &DeviceMap, dtype: Option<DType>) -> Result<Self> {
        Self::load_with(
            spec,
            devices,
            &LoadOptions {
                dtype,
                ..Default::default()
            },
        )
    }

    /// [`Model::load`] with every option.
    /// A model whose weights cannot fit its devices' free memory is refused before any weight is
    /// read ([`super::plan::MemoryPlan::check`]).
    pub fn load_with(spec: &ModelSpec, devices: &DeviceMap, opts: &LoadOptions) -> Result<Self> {
        let dtype = opts.dtype.unwrap_or_else(|| devices.default_dtype());
        let mut model = match spec {
            ModelSpec::Path(path) if path.is_dir() => {
                check_fits(&ModelFacts::read(spec)?, devices, opts)?;
                load_hf(path, devices, dtype)?
            }
            ModelSpec::Path(path) if path.exists() => load_gguf(path, devices, dtype, opts)?,
            ModelSpec::Path(path) => {
                return Err(EngineError::MissingWeights { path: path.clone() })
            }
            ModelSpec::Random { preset, seed } => {
                check_fits(&ModelFacts::read(spec)?, devices, opts)?;
                Self::random(&Config::preset(preset)?, *seed, devices, Some(dtype))?
            }
        };
        if let Some(chunk) = opts.prefill_chunk {
            model.set_prefill_chunk(chunk);
        }
        Ok(model)
    }

    /// Seeded random weights for any config (norms 1, projections uniform with std 0.02): same
    /// config and seed give the same weights on every machine.
    pub fn random(
        cfg: &Config,
        seed: u64,
        devices: &DeviceMap,
        dtype: Option<DType>,
    ) -> Result<Self> {
        load_random(
            cfg,
            seed,
            devices,
            dtype.unwrap_or_else(|| devices.default_dtype()),
        )
    }
}

/// Refuses weights that cannot fit `devices` before any is read.
fn check_fits(facts: &ModelFacts, devices: &DeviceMap, opts: &LoadOptions) -> Result<()> {
    MemoryPlan::new(facts, devices, opts, 0).check(None)
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            EngineError::MissingWeights {
                path: path.to_path_buf(),
            }
        } else {
            EngineError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

/// The weights outside the decoder layers.
struct Ends {
    embed: Tensor,
    norm: Tensor,
    lm_head: Linear,
}

fn assemble(
    cfg: Config,
    devices: &DeviceMap,
    dtype: DType,
    rope: Rope,
    ends: Ends,
    mut layer: impl FnMut(usize, &Device) -> Result<Layer>,
) -> Result<Model> {
    let Ends {
        embed,
        norm,
        lm_head,
    } = ends;
    let layer_devices = devices.layer_devices(cfg.num_hidden_layers);
    let layers = layer_devices
        .iter()
        .enumerate()
        .map(|(i, d)| layer(i, d))
        .collect::<Result<Vec<_>>>()?;
    Ok(Model {
        cfg,
        embed,
        layers,
        norm,
        lm_head,
        rope,
        dtype,
        prefill_chunk: DEFAULT_PREFILL_CHUNK,
    })
}

// ---------------------------------------------------------------- HF safetensors

pub(crate) fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(io_err(&index))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| EngineError::BadConfig {
                source_name: index.display().to_string(),
                detail: e.to_string(),
            })?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| EngineError::BadConfig {
                source_name: index.display().to_string(),
                detail: "no `weight_map` object".into(),
            })?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(EngineError::MissingWeights { path: single });
    }
    Ok(found)
}

/// Checks that each shard exists and that its header matches its length.
fn validate_safetensors(path: &Path) -> Result<()> {
    let file = File::open(path).map_err(io_err(path))?;
    // SAFETY: a read-only map that only lives for this header check; the file must not be
    // truncated meanwhile, the usual mmap caveat for weight files.
    let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(path))?;
    safetensors::SafeTensors::deserialize(&mmap).map_err(|e| EngineError::TruncatedWeights {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    Ok(())
}

struct StWeights {
    st: MmapedSafetensors,
    names: HashSet<String>,
    dtype: DType,
}

impl StWeights {
    fn get(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        if !self.names.contains(name) {
            return Err(EngineError::MissingTensor {
                name: name.to_string(),
            });
        }
        let t = self.st.load(name, device)?;
        if t.dims() != shape {
            return Err(EngineError::BadTensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                actual: t.dims().to_vec(),
            });
        }
        Ok(t.to_dtype(self.dtype)?)
    }

    fn linear(&self, name: &str, out: usize, inp: usize, device: &Device) -> Result<Linear> {
        Ok(Linear::new(QMatMul::Tensor(self.get(
            name,
            &[out, inp],
            device,
        )?)))
    }
}

fn load_hf(dir: &Path, devices: &DeviceMap, dtype: DType) -> Result<Model> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
    let cfg = Config::from_hf_json(&text, &config_path.display().to_string())?;
    let paths = shard_paths(dir)?;
    for p in &paths {
        validate_safetensors(p)?;
    }
    // SAFETY: as in `validate_safetensors`; tensors are copied out of the maps, which are dropped
    // when loading ends.
    let st = unsafe { MmapedSafetensors::multi(&paths) }?;
    let names = st.tensors().into_iter().map(|(n, _)| n).collect();
    let w = StWeights { st, names, dtype };
    let h = cfg.hidden_size;
    let embed = w.get(
        "model.embed_tokens.weight",
        &[cfg.vocab_size, h],
        devices.first(),
    )?;
    let last = devices.last();
    let lm_head = if w.names.contains("lm_head.weight") {
        w.linear("lm_head.weight", cfg.vocab_size, h, last)?
    } else if cfg.tie_word_embeddings {
        Linear::new(QMatMul::Tensor(embed.to_device(last)?))
    } else {
        return Err(EngineError::MissingTensor {
            name: "lm_head.weight".into(),
        });
    };
    let norm = w.get("model.norm.weight", &[h], last)?;
    let rope = Rope::from_config(&cfg, RopeLayout::Halves);
    let layer = |i: usize, d: &Device| build_layer(&w, &HF_NAMES, &cfg, i, d);
    assemble(
        cfg.clone(),
        devices,
        dtype,
        rope,
        Ends {
            embed,
            norm,
            lm_head,
        },
        layer,
    )
}

// ---------------------------------------------------------------- GGUF

const SUPPORTED_QUANTS: [GgmlDType; 10] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    // llama.cpp's Q4_K_M falls back to Q5_0 where a row is not a whole number of 256-blocks
    // (Qwen2.5-0.5B: 896 columns).
    GgmlDType::Q5_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8_0,
];

/// Reads a GGUF header (metadata and tensor index), e.g. for the tokenizer; checks that every
/// tensor lies inside the file and uses a supported type.
pub fn read_gguf(path: &Path) -> Result<gguf_file::Content> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    let content = gguf_file::Content::read(&mut file).map_err(|e| {
        let msg = e.to_string();
        match msg.strip_prefix("unknown dtype for tensor ") {
            Some(code) => EngineError::UnsupportedQuantType {
                tensor: "(unknown)".into(),
                dtype: format!("ggml type {code}"),
            },
            None => EngineError::TruncatedWeights {
                path: path.to_path_buf(),
                detail: msg,
            },
        }
    })?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let info = &content.tensor_infos[name];
        if !SUPPORTED_QUANTS.contains(&info.ggml_dtype) {
            return Err(EngineError::UnsupportedQuantType {
                tensor: name.clone(),
                dtype: format!("{:?}", info.ggml_dtype),
            });
        }
        // Checked: the shape and offset are untrusted header fields (fuzz/RESULTS.md).
        let end = info
            .shape
            .dims()
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| {
                (n / info.ggml_dtype.block_size()).checked_mul(info.ggml_dtype.type_size())
            })
            .and_then(|bytes| {
                content
                    .tensor_data_offset
                    .checked_add(info.offset)?
                    .checked_add(bytes as u64)
            });
        let Some(end) = end else {
            return Err(EngineError::TruncatedWeights {
                path: path.to_path_buf(),
                detail: format!(
                    "tensor `{name}`: shape {:?} at offset {} is past any file size",
                    info.shape.dims(),
                    info.offset
                ),
            });
        };
        if end > file_len {
            return Err(EngineError::TruncatedWeights {
                path: path.to_path_buf(),
                detail: format!("tensor `{name}` ends at byte {end}, the file has {file_len}"),
            });
        }
    }
    Ok(content)
}

struct GgufWeights {
    content: gguf_file::Content,
    file: std::cell::RefCell<File>,
    dtype: DType,
    quantized: QuantizedWeights,
}

impl GgufWeights {
    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn qtensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<QTensor> {
        let info =
            self.content
                .tensor_infos
                .get(name)
                .ok_or_else(|| EngineError::MissingTensor {
                    name: name.to_string(),
                })?;
        if info.shape.dims() != shape {
            return Err(EngineError::BadTensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                actual: info.shape.dims().to_vec(),
            });
        }
        Ok(self
            .content
            .tensor(&mut *self.file.borrow_mut(), name, device)?)
    }

    /// Small tensors (norms) and the embedding table, dequantized to the activation dtype.
    fn dense(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        Ok(self
            .qtensor(name, shape, device)?
            .dequantize(device)?
            .to_dtype(self.dtype)?)
    }

    fn linear(&self, name: &str, out: usize, inp: usize, device: &Device) -> Result<Linear> {
        let q = self.qtensor(name, &[out, inp], device)?;
        self.linear_from(q, out, inp, device)
    }

    /// A projection from stored blocks `[out, inp]`, held as the weights mode says.
    fn linear_from(&self, q: QTensor, out: usize, inp: usize, device: &Device) -> Result<Linear> {
        let block_quantized =
            !matches!(q.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        if block_quantized && self.quantized != QuantizedWeights::AsStored {
            let q8_fits = inp.is_multiple_of(GgmlDType::Q8_0.block_size());
            if self.quantized == QuantizedWeights::DenseWithQ8Decode
                && q8_fits
                && device.is_cpu()
                && self.dtype == DType::F32
                && cpu_q8::supported()
            {
                // Types with a kernel of ours multiply the stored blocks (llama.cpp's arithmetic
                // and bytes); the rest a Q8_0 copy of the dense weights. Either serves every row
                // count, so no dense copy is kept: the stored tensor stays for `Linear::rows`.
                let stored = match q.dtype() {
                    GgmlDType::Q4_1 => {
                        Q41Rows::from_gguf_blocks(&q.data()?, out, inp).map(DecodeRows::Q41)
                    }
                    GgmlDType::Q8_0 => {
                        Q8Rows::from_gguf_blocks(&q.data()?, out, inp).map(DecodeRows::Q8)
                    }
                    GgmlDType::Q5_0 => {
                        Q50Rows::from_gguf_blocks(&q.data()?, out, inp).map(DecodeRows::Q50)
                    }
                    GgmlDType::Q4K => {
                        Q4KRows::from_gguf_blocks(&q.data()?, out, inp).map(DecodeRows::Q4K)
                    }
                    GgmlDType::Q6K => {
                        Q6KRows::from_gguf_blocks(&q.data()?, out, inp).map(DecodeRows::Q6K)
                    }
                    _ => None,
                };
                let rows = match stored {
                    Some(rows) => Some(rows),
                    None => {
                        let values = q.dequantize(device)?.flatten_all()?.to_vec1::<f32>()?;
                        Q8Rows::quantize(&values, out, inp).map(DecodeRows::Q8)
                    }
                };
                if let Some(rows) = rows {
                    return Ok(Linear::with_decode_rows(
                        QMatMul::QTensor(Arc::new(q)),
                        rows,
                    ));
                }
            }
            let dense = q.dequantize(device)?;
            let exact = QMatMul::Tensor(dense.to_dtype(self.dtype)?);
            if self.quantized == QuantizedWeights::DenseWithQ8Decode && q8_fits {
                let q8 = QTensor::quantize(&dense, GgmlDType::Q8_0)?;
                return Ok(Linear::with_single_row(exact, QMatMul::from_qtensor(q8)?));
            }
            return Ok(Linear::new(exact));
        }
        let mm = QMatMul::from_arc(Arc::new(q))?;
        // F32/F16 weights come back dense in their own dtype; run them in the activation dtype.
        Ok(Linear::new(match mm {
            QMatMul::Tensor(t) | QMatMul::TensorF16(t) => QMatMul::Tensor(t.to_dtype(self.dtype)?),
            q => q,
        }))
    }
}

impl WeightSource for StWeights {
    fn tensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        self.get(name, shape, device)
    }
    fn linear(&self, name: &str, out: usize, inp: usize, device: &Device) -> Result<Linear> {
        StWeights::linear(self, name, out, inp, device)
    }
    fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }
    fn stacked(
        &self,
        name: &str,
        n: usize,
        total_rows: usize,
        rows: std::ops::Range<usize>,
        inp: usize,
        device: &Device,
    ) -> Result<Vec<Linear>> {
        let all = self.get(name, &[n, total_rows, inp], device)?;
        (0..n)
            .map(|e| {
                let part = all.get(e)?.narrow(0, rows.start, rows.len())?;
                Ok(Linear::new(QMatMul::Tensor(part.contiguous()?)))
            })
            .collect()
    }
}

impl WeightSource for GgufWeights {
    fn tensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        self.dense(name, shape, device)
    }
    fn linear(&self, name: &str, out: usize, inp: usize, device: &Device) -> Result<Linear> {
        GgufWeights::linear(self, name, out, inp, device)
    }
    fn has(&self, name: &str) -> bool {
        GgufWeights::has(self, name)
    }
    /// Each expert's rows sliced out of the stacked blocks as stored: a quantized expert is
    /// never expanded, and each gets its own kernels' copy (see `linear_from`).
    fn stacked(
        &self,
        name: &str,
        n: usize,
        total_rows: usize,
        rows: std::ops::Range<usize>,
        inp: usize,
        device: &Device,
    ) -> Result<Vec<Linear>> {
        let all = self.qtensor(name, &[n, total_rows, inp], &Device::Cpu)?;
        let dtype = all.dtype();
        if !inp.is_multiple_of(dtype.block_size()) {
            return Err(EngineError::BadTensorShape {
                name: name.to_string(),
                expected: vec![n, total_rows, inp.next_multiple_of(dtype.block_size())],
                actual: vec![n, total_rows, inp],
            });
        }
        let row_bytes = inp / dtype.block_size() * dtype.type_size();
        let data = all.data()?;
        (0..n)
            .map(|e| {
                let start = (e * total_rows + rows.start) * row_bytes;
                let bytes = &data[start..start + rows.len() * row_bytes];
                let expert = candle_core::quantized::ggml_file::qtensor_from_ggml(
                    dtype,
                    bytes,
                    vec![rows.len(), inp],
                    device,
                )?;
                self.linear_from(expert, rows.len(), inp, device)
            })
            .collect()
    }
}

fn load_gguf(path: &Path, devices: &DeviceMap, dtype: DType, opts: &LoadOptions) -> Result<Model> {
    let content = read_gguf(path)?;
    check_fits(&gguf_facts(path, &content)?, devices, opts)?;
    let quantized = opts.quantized;
    let mut cfg = Config::from_gguf_content(&content, &path.display().to_string())?;
    let file = File::open(path).map_err(io_err(path))?;
    let w = GgufWeights {
        content,
        file: std::cell::RefCell::new(file),
        dtype,
        quantized,
    };
    let h = cfg.hidden_size;
    // llama.cpp's converter permutes llama q/k rows for its interleaved RoPE; the Qwens use NEOX.
    let layout = match cfg.architecture {
        Architecture::Llama => RopeLayout::Interleaved,
        Architecture::Qwen3 | Architecture::Qwen3Moe | Architecture::Qwen2 => RopeLayout::Halves,
    };
    let rope = if w.has("rope_freqs.weight") {
        let factors: Vec<f32> = w
            .qtensor("rope_freqs.weight", &[cfg.head_dim / 2], &Device::Cpu)?
            .dequantize(&Device::Cpu)?
            .to_vec1()?;
        Rope::with_freq_factors(&cfg, layout, &factors)
    } else {
        Rope::from_config(&cfg, layout)
    };
    let embed = w.dense("token_embd.weight", &[cfg.vocab_size, h], devices.first())?;
    let last = devices.last();
    cfg.tie_word_embeddings = !w.has("output.weight");
    let lm_head = if cfg.tie_word_embeddings {
        w.linear("token_embd.weight", cfg.vocab_size, h, last)?
    } else {
        w.linear("output.weight", cfg.vocab_size, h, last)?
    };
    let norm = w.dense("output_norm.weight", &[h], last)?;
    let layer = |i: usize, d: &Device| build_layer(&w, &GGUF_NAMES, &cfg, i, d);
    assemble(
        cfg.clone(),
        devices,
        dtype,
        rope,
        Ends {
            embed,
            norm,
            lm_head,
        },
        layer,
    )
}
