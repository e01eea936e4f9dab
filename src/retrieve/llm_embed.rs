//! Decoder-LLM sentence embeddings in the Qwen3-Embedding recipe, on the engine's forward pass.
//!
//! A text's token ids end with `<|endoftext|>` (Qwen3-Embedding's tokenizer appends it; a
//! tokenizer rebuilt from GGUF does not, so it is added here when missing). The embedding is the
//! final-norm hidden state of that last token, optionally cut to its first `dim` components
//! (Matryoshka), then L2-normalised. Queries carry an instruction, `Instruct: {task}\nQuery:{q}`;
//! documents none. Texts are sorted by length and run in left-padded batches
//! ([`Model::last_hidden_batch`]), as the reference transformers code does.
//!
//! Texts up to the model's window are embedded whole; longer ones keep their first
//! `max_length - 1` tokens plus `<|endoftext|>`, and are counted.

use std::path::{Path, PathBuf};

use super::bert::Embeddings;
use crate::engine::{
    load_tokenizer, DeviceMap, EngineError, LoadOptions, Model, ModelSpec, Tokenizer,
    TokenizerError,
};

/// Default query instruction for table retrieval.
pub const DEFAULT_TASK: &str =
    "Given a question or a claim, retrieve the table that answers or verifies it";

/// Why an LLM encoder could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum LlmEmbedError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("the tokenizer has no <|endoftext|> or EOS token to pool on")]
    NoEndToken,
}

pub type Result<T> = std::result::Result<T, LlmEmbedError>;

/// How an [`LlmEncoder`] formats, cuts and batches.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmEmbedOptions {
    /// The query instruction.
    pub task: String,
    /// Matryoshka width: keep the first `dim` components (before normalising). `None`: all.
    pub dim: Option<usize>,
    /// Tokens per text, `<|endoftext|>` included; capped by the model's context.
    pub max_length: usize,
    /// Texts per forward pass.
    pub batch_size: usize,
}

impl Default for LlmEmbedOptions {
    fn default() -> Self {
        Self {
            task: DEFAULT_TASK.to_string(),
            dim: None,
            max_length: usize::MAX,
            batch_size: 8,
        }
    }
}

/// A causal LM used as a last-token-pooling sentence encoder.
pub struct LlmEncoder {
    model: Model,
    tokenizer: Tokenizer,
    end_id: u32,
    options: LlmEmbedOptions,
    fingerprint: String,
}

impl std::fmt::Debug for LlmEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmEncoder")
            .field("end_id", &self.end_id)
            .field("options", &self.options)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl LlmEncoder {
    /// Loads a GGUF file or checkpoint directory (weights and tokenizer).
    pub fn load(
        path: &Path,
        devices: &DeviceMap,
        load: &LoadOptions,
        options: LlmEmbedOptions,
    ) -> Result<Self> {
        let model = Model::load_with(&ModelSpec::Path(path.to_path_buf()), devices, load)?;
        let tokenizer = load_tokenizer(path, None)?;
        Self::new(model, tokenizer, fingerprint(path)?, options)
    }

    /// `fingerprint` identifies the weights and tokenizer (it keys the embedding cache).
    pub fn new(
        model: Model,
        tokenizer: Tokenizer,
        fingerprint: String,
        mut options: LlmEmbedOptions,
    ) -> Result<Self> {
        options.max_length = options.max_length.min(model.context_len());
        if options.max_length < 2 {
            return Err(LlmEmbedError::InvalidOption(format!(
                "max length {} (at least 2)",
                options.max_length
            )));
        }
        if options.batch_size == 0 {
            return Err(LlmEmbedError::InvalidOption("batch size 0".into()));
        }
        let hidden = model.config().hidden_size;
        if let Some(dim) = options.dim {
            if dim == 0 || dim > hidden {
                return Err(LlmEmbedError::InvalidOption(format!(
                    "dimension {dim} must be within 1..={hidden}"
                )));
            }
        }
        let end_id = tokenizer
            .token_id("<|endoftext|>")
            .or_else(|| tokenizer.eos_token().map(|(id, _)| id))
            .ok_or(LlmEmbedError::NoEndToken)?;
        Ok(Self {
            model,
            tokenizer,
            end_id,
            options,
            fingerprint,
        })
    }

    pub fn options(&self) -> &LlmEmbedOptions {
        &self.options
    }

    /// Embedding width (the Matryoshka width when one is set).
    pub fn dim(&self) -> usize {
        self.options.dim.unwrap_or(self.model.config().hidden_size)
    }

    /// The token pooled on.
    pub fn end_id(&self) -> u32 {
        self.end_id
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Ids as the model sees them (ending with `<|endoftext|>`) and whether the text was cut.
    pub fn token_ids(&self, text: &str) -> Result<(Vec<u32>, bool)> {
        let mut ids = self.tokenizer.encode_with_special_tokens(text)?;
        if ids.last() != Some(&self.end_id) {
            ids.push(self.end_id);
        }
        let max = self.options.max_length;
        if ids.len() <= max {
            return Ok((ids, false));
        }
        ids.truncate(max - 1);
        ids.push(self.end_id);
        Ok((ids, true))
    }

    /// The query text with its instruction.
    pub fn query_text(&self, query: &str) -> String {
        format!("Instruct: {}\nQuery:{query}", self.options.task)
    }

    /// Unit-length embeddings of `texts` (no instruction), in input order.
    pub fn embed_documents<S: AsRef<str>>(&self, texts: &[S]) -> Result<Embeddings> {
        let dim = self.dim();
        let mut tokenized = Vec::with_capacity(texts.len());
        let mut truncated = 0;
        for text in texts {
            let (ids, cut) = self.token_ids(text.as_ref())?;
            truncated += usize::from(cut);
            tokenized.push(ids);
        }
        let mut order: Vec<usize> = (0..texts.len()).collect();
        // Stable: equal lengths keep input order, so batches are the same on every run.
        order.sort_by_key(|&i| tokenized[i].len());
        let mut data = vec![0f32; texts.len() * dim];
        for batch in order.chunks(self.options.batch_size) {
            let seqs: Vec<&[u32]> = batch.iter().map(|&i| tokenized[i].as_slice()).collect();
            let rows: Vec<Vec<f32>> = self
                .model
                .last_hidden_batch(&seqs)?
                .to_vec2()
                .map_err(|e| LlmEmbedError::Engine(EngineError::from(e)))?;
            for (&i, row) in batch.iter().zip(rows) {
                data[i * dim..(i + 1) * dim].copy_from_slice(&unit(&row[..dim]));
            }
        }
        Ok(Embeddings {
            data,
            dim,
            truncated,
        })
    }

    /// The unit-length embedding of a query, instruction included.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        Ok(self.embed_documents(&[self.query_text(query)])?.data)
    }
}

/// `v / |v|`; the sum is taken in f64 so the norm does not depend on summation order.
fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    v.iter().map(|&x| (f64::from(x) / norm) as f32).collect()
}

/// The weights' identity ([`crate::provenance::weights_sha256`]; a checkpoint folder's tokenizer
/// is among its files), so embeddings of other weights or another tokenizer never share a cache
/// entry.
pub fn fingerprint(path: &Path) -> Result<String> {
    crate::provenance::weights_sha256(path).map_err(|e| LlmEmbedError::Io {
        path: e.path,
        source: e.source,
    })
}
