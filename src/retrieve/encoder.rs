//! Choosing and loading a text encoder from a path: a sentence-transformers BERT folder, or a
//! decoder LLM read the Qwen3-Embedding way (last token). `retrieve` and `eval` both load theirs
//! here, so one folder always gives the same encoder.

use std::path::Path;

use super::bert::{BertEncoder, BertError, EncodeOptions};
use super::dense::TextEncoder;
use super::llm_embed::{LlmEmbedError, LlmEmbedOptions, LlmEncoder};
use crate::engine::{DeviceMap, LoadOptions};

/// Which encoder a model path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderKind {
    /// A folder whose config.json says `"model_type": "bert"`.
    Bert,
    /// Anything else: a GGUF file or a decoder checkpoint folder.
    Llm,
}

impl EncoderKind {
    pub fn of(path: &Path) -> Self {
        let model_type = std::fs::read(path.join("config.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|config| config.get("model_type")?.as_str().map(str::to_owned));
        match model_type.as_deref() {
            Some("bert") => EncoderKind::Bert,
            _ => EncoderKind::Llm,
        }
    }
}

/// Encoder settings; `None` takes each kind's default (BERT: 256 tokens, 32 texts a batch, as
/// sentence-transformers; LLM: [`LlmEmbedOptions::default`]).
#[derive(Debug, Clone)]
pub struct EncoderSettings {
    pub max_length: Option<usize>,
    pub batch_size: Option<usize>,
    /// The LLM's query instruction.
    pub task: String,
    /// The LLM's Matryoshka width.
    pub dim: Option<usize>,
    /// A progress bar while a BERT encoder embeds a corpus.
    pub progress: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error("loading the BERT encoder from {path}: {source}")]
    Bert { path: String, source: BertError },
    #[error("loading the LLM encoder from {path}: {source}")]
    Llm { path: String, source: LlmEmbedError },
}

/// The encoder at `path` ([`EncoderKind::of`]); BERT runs on the first device of `devices`, an LLM
/// on all of them, with [`LoadOptions::for_prefill`].
pub fn load_encoder(
    path: &Path,
    devices: &DeviceMap,
    settings: &EncoderSettings,
) -> Result<Box<dyn TextEncoder>, EncoderError> {
    let shown = path.display().to_string();
    match EncoderKind::of(path) {
        EncoderKind::Bert => {
            let mut options = EncodeOptions::default().progress(settings.progress);
            if let Some(max_length) = settings.max_length {
                options = options.max_length(max_length);
            }
            if let Some(batch_size) = settings.batch_size {
                options = options.batch_size(batch_size);
            }
            let encoder = BertEncoder::load(path, devices.first(), options).map_err(|source| {
                EncoderError::Bert {
                    path: shown,
                    source,
                }
            })?;
            Ok(Box::new(encoder))
        }
        EncoderKind::Llm => {
            let defaults = LlmEmbedOptions::default();
            let options = LlmEmbedOptions {
                task: settings.task.clone(),
                dim: settings.dim,
                max_length: settings.max_length.unwrap_or(defaults.max_length),
                batch_size: settings.batch_size.unwrap_or(defaults.batch_size),
            };
            let load = LoadOptions::for_prefill(path, devices);
            let encoder = LlmEncoder::load(path, devices, &load, options).map_err(|source| {
                EncoderError::Llm {
                    path: shown,
                    source,
                }
            })?;
            Ok(Box::new(encoder))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bert_config_makes_a_bert_encoder() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(EncoderKind::of(dir.path()), EncoderKind::Llm);
        std::fs::write(dir.path().join("config.json"), r#"{"model_type":"qwen3"}"#).unwrap();
        assert_eq!(EncoderKind::of(dir.path()), EncoderKind::Llm);
        std::fs::write(dir.path().join("config.json"), r#"{"model_type":"bert"}"#).unwrap();
        assert_eq!(EncoderKind::of(dir.path()), EncoderKind::Bert);
        assert_eq!(
            EncoderKind::of(&dir.path().join("model.gguf")),
            EncoderKind::Llm
        );
    }
}
