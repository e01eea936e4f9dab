//! Text ↔ token ids for the engine's models.
//!
//! A [`Tokenizer`] wraps a Hugging Face [`tokenizers::Tokenizer`], so encoding and decoding are that
//! crate's well-tested code. It comes from one of two places:
//!
//! - a `tokenizer.json` ([`Tokenizer::from_file`]), with BOS/EOS facts taken from the
//!   `tokenizer_config.json` and `generation_config.json` next to it when they exist;
//! - the metadata of a GGUF file ([`Tokenizer::from_gguf`]), rebuilt the way llama.cpp reads it: a
//!   byte-level BPE model from `tokenizer.ggml.tokens`/`merges`, llama.cpp's pre-tokenizer regexes
//!   for `tokenizer.ggml.pre`, and control tokens as special added tokens.
//!
//! [`Tokenizer::encode`] never adds BOS: chat templates write it themselves.
//! [`Tokenizer::encode_with_special_tokens`] adds what the model's tokenizer adds to raw text.
//! Padding and truncation settings in a `tokenizer.json` are switched off. Streaming decode, which must
//! not emit half a UTF-8 character, lives in [`TextStream`].

mod gguf;
mod stream;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::quantized::gguf_file;

pub use stream::{StopMatch, StopStrings, TextStream};

/// Errors from loading, encoding or decoding.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("loading tokenizer from {path}: {source}")]
    Load {
        path: PathBuf,
        #[source]
        source: tokenizers::Error,
    },
    #[error("parsing {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("GGUF metadata has no `{0}`, which a tokenizer needs")]
    MissingKey(&'static str),
    #[error("GGUF metadata `{key}`: {reason}")]
    BadKey { key: &'static str, reason: String },
    #[error("GGUF tokenizer model `{0}` is not supported (only byte-level BPE, `gpt2`)")]
    UnsupportedModel(String),
    #[error("GGUF pre-tokenizer `{name}` is not supported; known: {known}")]
    UnsupportedPreTokenizer { name: String, known: String },
    #[error("building the tokenizer: {0}")]
    Build(#[source] tokenizers::Error),
    #[error("encoding text: {0}")]
    Encode(#[source] tokenizers::Error),
    #[error("decoding ids: {0}")]
    Decode(#[source] tokenizers::Error),
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownId { id: u32, vocab_size: usize },
}

pub type Result<T> = std::result::Result<T, TokenizerError>;

/// Token texts that end a turn although a model's metadata does not call them EOS. llama.cpp treats
/// these the same way when they are control tokens ("end of generation" tokens).
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
];

/// The facts about BOS/EOS that the tokenizer model itself does not carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SpecialIds {
    bos: Option<u32>,
    /// End-of-generation ids, the model's own EOS first, no duplicates.
    eos: Vec<u32>,
    pad: Option<u32>,
    add_bos: bool,
}

impl SpecialIds {
    fn push_eos(&mut self, id: u32) {
        if !self.eos.contains(&id) {
            self.eos.push(id);
        }
    }
}

/// A tokenizer for one model. Cheap to share behind `&`; encoding and decoding take `&self`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// A copy of `inner` that reads special-token texts as plain text, for `parse_special = false`.
    /// Made on first use: most callers never need it, and a large vocabulary is costly to copy.
    literal: OnceLock<tokenizers::Tokenizer>,
    special: SpecialIds,
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`. BOS/EOS/padding ids come from a
    /// `tokenizer_config.json` and `generation_config.json` in the same folder when present.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let load_err = |source: tokenizers::Error| TokenizerError::Load {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(|e| load_err(e.into()))?;
        // tokenizers 0.23 panics (`expect("Helper")`) on a syntax error inside `"decoder"`, e.g. a
        // truncated download: only hand it text that is well-formed JSON (fuzz/RESULTS.md).
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| load_err(e.into()))?;
        let mut inner = text.parse::<tokenizers::Tokenizer>().map_err(load_err)?;
        // Lengths are the caller's business: a tokenizer.json's padding/truncation (MiniLM's pads
        // every text to 128) would silently change what `encode` returns.
        inner
            .with_truncation(None)
            .map_err(|source| TokenizerError::Load {
                path: path.to_path_buf(),
                source,
            })?;
        inner.with_padding(None);
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let mut special = SpecialIds::default();
        if let Some(config) = read_json_if_exists(&dir.join("tokenizer_config.json"))? {
            let id_of = |key: &str| {
                config
                    .get(key)
                    .and_then(token_content)
                    .and_then(|text| inner.token_to_id(text))
            };
            special.bos = id_of("bos_token");
            special.pad = id_of("pad_token");
            if let Some(eos) = id_of("eos_token") {
                special.push_eos(eos);
            }
        }
        if let Some(config) = read_json_if_exists(&dir.join("generation_config.json"))? {
            for id in json_ids(config.get("eos_token_id")) {
                special.push_eos(id);
            }
            if special.bos.is_none() {
                special.bos = json_ids(config.get("bos_token_id")).into_iter().next();
            }
        }
        // `add_bos_token` in tokenizer_config.json is only an input to the post-processor, and is
        // often absent (Llama 3); what `encode_with_special_tokens` does is the truth.
        special.add_bos = special.bos.is_some_and(|bos| {
            inner
                .encode_fast("", true)
                .is_ok_and(|probe| probe.get_ids().first() == Some(&bos))
        });
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self::assemble(inner, special, vocab_size))
    }

    /// Rebuilds the tokenizer stored in a GGUF file's metadata, as llama.cpp would use it.
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let built = gguf::build(content)?;
        Ok(Self::assemble(
            built.tokenizer,
            built.special,
            built.vocab_size,
        ))
    }

    fn assemble(inner: tokenizers::Tokenizer, mut special: SpecialIds, vocab_size: usize) -> Self {
        // Sorted by id so that the order of `eos_token_ids` never depends on hash-map iteration.
        let mut added: Vec<(u32, tokenizers::AddedToken)> =
            inner.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        for (id, token) in added {
            if token.special && END_OF_GENERATION_TEXTS.contains(&token.content.as_str()) {
                special.push_eos(id);
            }
        }
        Self {
            inner,
            literal: OnceLock::new(),
            special,
            vocab_size,
        }
    }

    /// Encodes `text` without adding BOS/EOS. With `parse_special`, special-token texts such as
    /// `<|im_start|>` become their ids (what a chat prompt needs); without it they are tokenized as
    /// ordinary text (what untrusted content needs).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.inner
        } else {
            self.literal.get_or_init(|| {
                let mut copy = self.inner.clone();
                copy.set_encode_special_tokens(true);
                copy
            })
        };
        let encoding = tokenizer
            .encode_fast(text, false)
            .map_err(TokenizerError::Encode)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Encodes `text` the way the model's own tokenizer does with `add_special_tokens=True`:
    /// special-token texts become ids, and the post-processor adds its tokens (BOS for Llama 3,
    /// `[CLS]`…`[SEP]` for BERT). Use it for raw text, not for chat-templated prompts, which
    /// already carry BOS.
    pub fn encode_with_special_tokens(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, true)
            .map_err(TokenizerError::Encode)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Decodes `ids` to text; `skip_special` drops special (control) tokens such as EOS.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size,
            });
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(TokenizerError::Decode)
    }

    /// The id of a token given its exact text (`"<|im_end|>"`, or a byte-level piece like `"Ġthe"`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The stored text of a token (byte-level pieces stay encoded, e.g. `"Ġthe"`).
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Ids that end generation: the model's EOS first, then other end-of-turn tokens it defines.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.special.eos
    }

    /// The BOS token as `(id, text)`, when the model has one.
    pub fn bos_token(&self) -> Option<(u32, String)> {
        let id = self.special.bos?;
        Some((id, self.inner.id_to_token(id)?))
    }

    /// The EOS token as `(id, text)`, when the model has one.
    pub fn eos_token(&self) -> Option<(u32, String)> {
        let id = *self.special.eos.first()?;
        Some((id, self.inner.id_to_token(id)?))
    }

    /// The padding id, when the model declares one.
    pub fn pad_token_id(&self) -> Option<u32> {
        self.special.pad
    }

    /// Whether the model expects BOS in front of raw (untemplated) text, i.e. whether
    /// [`Tokenizer::encode_with_special_tokens`] adds it.
    pub fn add_bos(&self) -> bool {
        self.special.add_bos
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The wrapped `tokenizers` tokenizer, for what this type does not expose.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

fn read_json_if_exists(path: &Path) -> Result<Option<serde_json::Value>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TokenizerError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| TokenizerError::Json {
            path: path.to_path_buf(),
            source,
        })
}

/// A special token in `tokenizer_config.json` is either its text or `{"content": text, ...}`.
pub(crate) fn token_content(value: &serde_json::Value) -> Option<&str> {
    match value {
        serde_json::Value::String(text) => Some(text),
        serde_json::Value::Object(map) => map.get("content").and_then(|v| v.as_str()),
        _ => None,
    }
}

/// `generation_config.json` ids are a number or a list of numbers.
fn json_ids(value: Option<&serde_json::Value>) -> Vec<u32> {
    let as_id = |v: &serde_json::Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match value {
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(as_id).collect(),
        Some(v) => as_id(v).into_iter().collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Tokenizer>();
        assert_send_sync::<TextStream>();
    }

    #[test]
    fn generation_config_ids_are_a_number_or_a_list() {
        let one = serde_json::json!(7);
        let many = serde_json::json!([7, 9, -1]);
        assert_eq!(json_ids(Some(&one)), [7]);
        assert_eq!(json_ids(Some(&many)), [7, 9]);
        assert!(json_ids(None).is_empty());
    }
}
