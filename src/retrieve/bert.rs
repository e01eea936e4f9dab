//! A BERT-family sentence encoder (all-MiniLM-L6-v2 and kin) on candle.
//!
//! [`BertEncoder::load`] reads a sentence-transformers model folder: `config.json` (Hugging Face
//! `BertConfig` names), `model.safetensors` (mmaped, Hugging Face tensor names, with or without a
//! `bert.` prefix) and `tokenizer.json`. [`BertEncoder::embed`] turns texts into unit vectors the way
//! sentence-transformers does for all-MiniLM-L6-v2: `[CLS] text [SEP]` truncated to the maximum
//! length (default 256, sentence-transformers' `max_seq_length`), a post-LN BERT forward pass with
//! erf-GELU, mean pooling over the attention mask, then L2 normalisation.
//!
//! Texts are sorted by token count and batched, so padding stays small; each batch carries an
//! attention mask, so a text's embedding does not depend on what it was batched with (up to float
//! rounding).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::bert_cpu::CpuBertLayer;
use crate::engine::Tokenizer;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Config {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::engine::tokenizer::TokenizerError),
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, BertError>;

/// The fields of a Hugging Face `BertConfig` that the forward pass needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    #[serde(default = "default_position_embedding_type")]
    pub position_embedding_type: String,
}

fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_hidden_act() -> String {
    "gelu".into()
}
fn default_position_embedding_type() -> String {
    "absolute".into()
}

impl BertConfig {
    fn validate(&self) -> Result<()> {
        // HF "gelu" is the erf form; the tanh approximations would shift embeddings measurably.
        if self.hidden_act != "gelu" {
            return Err(BertError::Unsupported(format!(
                "hidden_act {:?} (only \"gelu\")",
                self.hidden_act
            )));
        }
        if self.position_embedding_type != "absolute" {
            return Err(BertError::Unsupported(format!(
                "position_embedding_type {:?} (only \"absolute\")",
                self.position_embedding_type
            )));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(BertError::Unsupported(format!(
                "hidden_size {} not divisible by {} heads",
                self.hidden_size, self.num_attention_heads
            )));
        }
        Ok(())
    }
}

/// How [`BertEncoder`] tokenizes and batches.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodeOptions {
    /// Tokens per text including `[CLS]`/`[SEP]`; longer texts are truncated (and counted).
    pub max_length: usize,
    /// Texts per forward pass.
    pub batch_size: usize,
    /// Show a progress bar on stderr while embedding (when stderr is a terminal).
    pub progress: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            max_length: 256,
            batch_size: 32,
            progress: false,
        }
    }
}

impl EncodeOptions {
    pub fn max_length(mut self, max_length: usize) -> Self {
        self.max_length = max_length;
        self
    }

    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }
}

/// Unit-length embeddings of a list of texts, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Row-major, `len * dim` values.
    pub data: Vec<f32>,
    pub dim: usize,
    /// How many texts were longer than the maximum length and lost their tail.
    pub truncated: usize,
}

impl Embeddings {
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

struct BertEmbeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
}

impl BertEmbeddings {
    fn load(vb: VarBuilder, cfg: &BertConfig) -> Result<Self> {
        Ok(Self {
            word: embedding(cfg.vocab_size, cfg.hidden_size, vb.pp("word_embeddings"))?,
            position: embedding(
                cfg.max_position_embeddings,
                cfg.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_type: embedding(
                cfg.type_vocab_size,
                cfg.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (_, seq_len) = ids.dims2()?;
        let positions = Tensor::arange(0u32, seq_len as u32, ids.device())?;
        // Single-segment input: every token type is 0.
        let token_types = ids.zeros_like()?;
        let xs = self
            .word
            .forward(ids)?
            .broadcast_add(&self.position.forward(&positions)?)?
            .add(&self.token_type.forward(&token_types)?)?;
        Ok(self.norm.forward(&xs)?)
    }
}

struct BertLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

impl BertLayer {
    fn load(vb: VarBuilder, cfg: &BertConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let attention = vb.pp("attention");
        Ok(Self {
            query: linear(h, h, attention.pp("self").pp("query"))?,
            key: linear(h, h, attention.pp("self").pp("key"))?,
            value: linear(h, h, attention.pp("self").pp("value"))?,
            attention_out: linear(h, h, attention.pp("output").pp("dense"))?,
            attention_norm: layer_norm(
                h,
                cfg.layer_norm_eps,
                attention.pp("output").pp("LayerNorm"),
            )?,
            intermediate: linear(h, cfg.intermediate_size, vb.pp("intermediate").pp("dense"))?,
            output: linear(cfg.intermediate_size, h, vb.pp("output").pp("dense"))?,
            output_norm: layer_norm(h, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
        })
    }

    /// `xs`: (batch, seq, hidden); `bias`: (batch, 1, 1, seq), 0 for tokens, a large negative
    /// number for padding.
    fn forward(&self, xs: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let (b, t, h) = xs.dims3()?;
        // Linear layers on (batch * seq, hidden): one large matrix product each instead of a
        // batched product against a broadcast weight, which candle's CPU backend runs far slower.
        let flat = xs.reshape((b * t, h))?;
        let split = |x: Tensor| -> Result<Tensor> {
            Ok(x.reshape((b, t, self.heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = split(self.query.forward(&flat)?)?;
        let k = split(self.key.forward(&flat)?)?;
        let v = split(self.value.forward(&flat)?)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * t, h))?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + &flat)?)?;
        let inner = self.intermediate.forward(&attended)?.gelu_erf()?;
        let out = self
            .output_norm
            .forward(&(self.output.forward(&inner)? + &attended)?)?;
        Ok(out.reshape((b, t, h))?)
    }
}

/// The encoder layers: fused on CPU (see `bert_cpu`), candle ops elsewhere.
enum Layers {
    Candle(Vec<BertLayer>),
    Cpu(Vec<CpuBertLayer>),
}

/// The BERT encoder stack without the pooler (sentence-transformers pools the hidden states).
struct BertModel {
    embeddings: BertEmbeddings,
    layers: Layers,
}

impl BertModel {
    fn load(vb: VarBuilder, cfg: &BertConfig, fused_cpu: bool) -> Result<Self> {
        let embeddings = BertEmbeddings::load(vb.pp("embeddings"), cfg)?;
        let layer_vb = |i: usize| vb.pp(format!("encoder.layer.{i}"));
        let layers = if fused_cpu {
            Layers::Cpu(
                (0..cfg.num_hidden_layers)
                    .map(|i| CpuBertLayer::load(layer_vb(i), cfg))
                    .collect::<Result<Vec<_>>>()?,
            )
        } else {
            Layers::Candle(
                (0..cfg.num_hidden_layers)
                    .map(|i| BertLayer::load(layer_vb(i), cfg))
                    .collect::<Result<Vec<_>>>()?,
            )
        };
        Ok(Self { embeddings, layers })
    }

    /// `mask`: (batch, seq), 1 for the first `lengths[i]` tokens of row i, 0 after (right padding).
    fn forward(&self, ids: &Tensor, mask: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let mut xs = self.embeddings.forward(ids)?;
        match &self.layers {
            Layers::Candle(layers) => {
                // Masked keys get -1e4 less than the rest: after softmax their weight is exp(-1e4)
                // = 0 in f32, exactly what HF's dtype-minimum bias gives, without risking
                // -inf - -inf.
                let bias = ((mask.to_dtype(DType::F32)? - 1.0)? * 1e4)?.reshape((b, 1, 1, t))?;
                for layer in layers {
                    xs = layer.forward(&xs, &bias)?;
                }
                Ok(xs)
            }
            Layers::Cpu(layers) => {
                let shape = xs.shape().clone();
                let mut data = xs.flatten_all()?.to_vec1::<f32>()?;
                let threads = candle_core::utils::get_num_threads();
                for layer in layers {
                    data = layer.forward(&data, lengths, t, threads);
                }
                Ok(Tensor::from_vec(data, shape, xs.device())?)
            }
        }
    }
}

/// A loaded sentence encoder: tokenizer, weights, options. Cheap to call from one thread at a time;
/// candle parallelises each forward pass itself.
pub struct BertEncoder {
    model: BertModel,
    tokenizer: Tokenizer,
    config: BertConfig,
    device: Device,
    options: EncodeOptions,
    fingerprint: String,
}

impl std::fmt::Debug for BertEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEncoder")
            .field("config", &self.config)
            .field("options", &self.options)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl BertEncoder {
    /// Loads `dir/config.json`, `dir/model.safetensors` and `dir/tokenizer.json` onto `device` (f32).
    pub fn load(dir: impl AsRef<Path>, device: &Device, options: EncodeOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let config_path = dir.join("config.json");
        let weights_path = dir.join("model.safetensors");
        let config_bytes = read(&config_path)?;
        let config: BertConfig =
            serde_json::from_slice(&config_bytes).map_err(|source| BertError::Config {
                path: config_path.clone(),
                source,
            })?;
        config.validate()?;
        if options.max_length < 2 || options.max_length > config.max_position_embeddings {
            return Err(BertError::InvalidOption(format!(
                "max length {} must be within 2..={} (the model's position embeddings)",
                options.max_length, config.max_position_embeddings
            )));
        }
        if options.batch_size == 0 {
            return Err(BertError::InvalidOption("batch size 0".into()));
        }
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))?;
        let fingerprint = fingerprint(&config_bytes, &weights_path)?;
        // SAFETY (of the mmap): the weights file is treated as read-only for the model's lifetime;
        // candle copies each tensor out of the map when it builds it.
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[&weights_path], DType::F32, device)? };
        // Checkpoints saved from `BertForXxx` carry a `bert.` prefix; sentence-transformers' do not.
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let model = BertModel::load(vb, &config, device.is_cpu())?;
        Ok(Self {
            model,
            tokenizer,
            config,
            device: device.clone(),
            options,
            fingerprint,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    pub fn options(&self) -> &EncodeOptions {
        &self.options
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// Which forward pass runs: `"cpu-fused-1"` (see `bert_cpu`) or `"candle"`. The two agree to
    /// about 1e-6, not bit for bit, so embedding caches key on it.
    pub fn kernels(&self) -> &'static str {
        match self.model.layers {
            Layers::Cpu(_) => "cpu-fused-1",
            Layers::Candle(_) => "candle",
        }
    }

    /// SHA-256 (hex) over the config and the weights: two encoders with the same fingerprint and
    /// maximum length produce the same embeddings, so caches key on it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Token ids as the model sees them: `[CLS] … [SEP]`, cut to the maximum length keeping the
    /// final `[SEP]` (as the HF tokenizer's truncation does). The flag says whether it was cut.
    pub fn token_ids(&self, text: &str) -> Result<(Vec<u32>, bool)> {
        let mut ids = self.tokenizer.encode_with_special_tokens(text)?;
        let max = self.options.max_length;
        if ids.len() <= max {
            return Ok((ids, false));
        }
        let last = ids[ids.len() - 1];
        ids.truncate(max - 1);
        ids.push(last);
        Ok((ids, true))
    }

    /// Unit-length embeddings of `texts`, in input order.
    pub fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Embeddings> {
        let dim = self.dim();
        let mut tokenized = Vec::with_capacity(texts.len());
        let mut truncated = 0;
        for text in texts {
            let (ids, cut) = self.token_ids(text.as_ref())?;
            truncated += usize::from(cut);
            tokenized.push(ids);
        }
        let mut order: Vec<usize> = (0..texts.len()).collect();
        // Stable sort: equal lengths keep input order, so batches are the same on every run.
        order.sort_by_key(|&i| tokenized[i].len());

        let progress = self.progress_bar(texts.len());
        let mut data = vec![0f32; texts.len() * dim];
        for batch in order.chunks(self.options.batch_size) {
            let rows = self.embed_batch(batch.iter().map(|&i| tokenized[i].as_slice()))?;
            for (&i, row) in batch.iter().zip(rows.chunks(dim)) {
                data[i * dim..(i + 1) * dim].copy_from_slice(row);
            }
            progress.inc(batch.len() as u64);
        }
        progress.finish_and_clear();
        Ok(Embeddings {
            data,
            dim,
            truncated,
        })
    }

    /// Embeds one text.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed(&[text])?.data)
    }

    fn progress_bar(&self, len: usize) -> ProgressBar {
        if !self.options.progress || len < 2 {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "embedding {bar:30} {pos}/{len} texts, {per_sec}, eta {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    }

    /// Pooled, normalised rows (row-major) for one padded batch.
    fn embed_batch<'a>(&self, batch: impl ExactSizeIterator<Item = &'a [u32]>) -> Result<Vec<f32>> {
        let batch: Vec<&[u32]> = batch.collect();
        let width = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(batch.len() * width);
        let mut mask = Vec::with_capacity(batch.len() * width);
        for row in &batch {
            ids.extend_from_slice(row);
            ids.resize(ids.len() + width - row.len(), 0);
            mask.extend(std::iter::repeat_n(1f32, row.len()));
            mask.extend(std::iter::repeat_n(0f32, width - row.len()));
        }
        let shape = (batch.len(), width);
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let lengths: Vec<usize> = batch.iter().map(|ids| ids.len()).collect();
        let hidden = self.model.forward(&ids, &mask, &lengths)?;
        // Mean over real tokens only: padding rows of `hidden` are not zero.
        let summed = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?;
        let counts = mask.sum_keepdim(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        let unit = mean.broadcast_div(&norms)?;
        Ok(unit.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?)
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| BertError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn fingerprint(config: &[u8], weights: &Path) -> Result<String> {
    let file = std::fs::File::open(weights).map_err(|source| BertError::Io {
        path: weights.to_path_buf(),
        source,
    })?;
    // SAFETY: read-only map of a file we only hash.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| BertError::Io {
        path: weights.to_path_buf(),
        source,
    })?;
    let mut hasher = Sha256::new();
    hasher.update((config.len() as u64).to_le_bytes());
    hasher.update(config);
    hasher.update(&map[..]);
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_config(layers: usize) -> BertConfig {
        BertConfig {
            num_hidden_layers: layers,
            ..serde_json::from_str(
                r#"{"vocab_size":50,"hidden_size":48,"num_hidden_layers":1,
                    "num_attention_heads":4,"intermediate_size":96,"max_position_embeddings":64}"#,
            )
            .unwrap()
        }
    }

    /// A random BERT (deterministic values) as a VarBuilder over plain tensors.
    fn tiny_bert(cfg: &BertConfig) -> VarBuilder<'static> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut tensors = std::collections::HashMap::new();
        let mut add = |name: String, shape: &[usize], offset: f32| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|_| next() * 0.4 + offset).collect();
            tensors.insert(name, Tensor::from_vec(values, shape, &Device::Cpu).unwrap());
        };
        let h = cfg.hidden_size;
        add(
            "embeddings.word_embeddings.weight".into(),
            &[cfg.vocab_size, h],
            0.0,
        );
        add(
            "embeddings.position_embeddings.weight".into(),
            &[cfg.max_position_embeddings, h],
            0.0,
        );
        add(
            "embeddings.token_type_embeddings.weight".into(),
            &[cfg.type_vocab_size, h],
            0.0,
        );
        let norm = |add: &mut dyn FnMut(String, &[usize], f32), prefix: String| {
            add(format!("{prefix}.weight"), &[h], 1.0);
            add(format!("{prefix}.bias"), &[h], 0.0);
        };
        norm(&mut add, "embeddings.LayerNorm".into());
        for i in 0..cfg.num_hidden_layers {
            let l = format!("encoder.layer.{i}");
            for (name, outputs, inputs) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", cfg.intermediate_size, h),
                ("output.dense", h, cfg.intermediate_size),
            ] {
                add(format!("{l}.{name}.weight"), &[outputs, inputs], 0.0);
                add(format!("{l}.{name}.bias"), &[outputs], 0.0);
            }
            norm(&mut add, format!("{l}.attention.output.LayerNorm"));
            norm(&mut add, format!("{l}.output.LayerNorm"));
        }
        VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu)
    }

    #[test]
    fn fused_cpu_layers_match_the_candle_layers() {
        let cfg = tiny_config(2);
        let vb = tiny_bert(&cfg);
        let candle = BertModel::load(vb.clone(), &cfg, false).unwrap();
        let fused = BertModel::load(vb, &cfg, true).unwrap();
        // Three texts of 37, 21 and 2 tokens, right-padded to 37.
        let lengths = [37usize, 21, 2];
        let width = 37;
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        for (row, &len) in lengths.iter().enumerate() {
            for j in 0..width {
                ids.push(if j < len {
                    ((row * 31 + j * 7) % 50) as u32
                } else {
                    0
                });
                mask.push(if j < len { 1f32 } else { 0f32 });
            }
        }
        let ids = Tensor::from_vec(ids, (3, width), &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(mask, (3, width), &Device::Cpu).unwrap();
        let expected = candle.forward(&ids, &mask, &lengths).unwrap();
        let got = fused.forward(&ids, &mask, &lengths).unwrap();
        assert_eq!(expected.dims(), got.dims());
        let worst = (expected - got)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(worst < 1e-4, "largest difference {worst}");
    }

    #[test]
    fn fused_cpu_layer_gives_the_same_bits_on_one_thread_and_several() {
        let cfg = tiny_config(1);
        let layer = CpuBertLayer::load(tiny_bert(&cfg).pp("encoder.layer.0"), &cfg).unwrap();
        let lengths = [40usize, 33, 5, 17];
        let xs: Vec<f32> = (0..4 * 40 * 48)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let one = layer.forward(&xs, &lengths, 40, 1);
        let four = layer.forward(&xs, &lengths, 40, 4);
        assert!(one
            .iter()
            .zip(&four)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn config_rejects_other_activations() {
        let mut cfg: BertConfig = serde_json::from_str(
            r#"{"vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
                "intermediate_size":16,"max_position_embeddings":16}"#,
        )
        .unwrap();
        assert!(cfg.validate().is_ok());
        cfg.hidden_act = "gelu_new".into();
        assert!(matches!(cfg.validate(), Err(BertError::Unsupported(_))));
    }
}
