//! Rebuilding a byte-level BPE tokenizer from GGUF metadata, following llama.cpp's `llama-vocab.cpp`.
//!
//! llama.cpp does not store a pre-tokenizer in the file, only its name (`tokenizer.ggml.pre`), and
//! keeps a table of regexes per name. Those regexes run one after another, each splitting every
//! piece left by the previous one and keeping both matches and the text between them; that is
//! exactly a `Split` pre-tokenizer with `Isolated` behaviour, so a `Sequence` of them followed by a
//! regex-free `ByteLevel` reproduces llama.cpp's pieces. Unicode normalization is not applied,
//! because llama.cpp applies none (Qwen's `tokenizer.json` has NFC; the two differ only on
//! unnormalized input).

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::{Result, SpecialIds, TokenizerError};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";

/// llama.cpp's `llama_token_type` values that matter here.
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The GPT-2 regex, shared by several llama.cpp pre-tokenizers.
const GPT2_REGEX: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex as llama.cpp writes it (case-insensitive contractions spelled out).
const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's regex: Llama 3's with single digits.
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A family of `tokenizer.ggml.pre` names that llama.cpp tokenizes the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreTokenizer {
    /// Llama 3 and relatives: whole words found in the vocabulary skip the merges.
    Llama3,
    /// Qwen2/Qwen3 and relatives.
    Qwen2,
    /// SmolLM, StarCoder and relatives: single digits, then GPT-2.
    SmolLm,
    Gpt2,
    /// llama.cpp's fallback when the file names no pre-tokenizer.
    Default,
}

/// `(names, family)`, as in llama.cpp's `llama_vocab::impl::load`.
const PRE_TOKENIZER_NAMES: &[(&[&str], PreTokenizer)] = &[
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "dbrx",
            "smaug-bpe",
        ],
        PreTokenizer::Llama3,
    ),
    (
        &["qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"],
        PreTokenizer::Qwen2,
    ),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
        ],
        PreTokenizer::SmolLm,
    ),
    (
        &[
            "gpt-2",
            "gpt2",
            "phi-2",
            "jina-es",
            "jina-de",
            "jina-v2-es",
            "jina-v2-de",
            "mpt",
            "olmo",
            "jais",
            "gigachat",
            "exaone4",
            "mellum",
        ],
        PreTokenizer::Gpt2,
    ),
    (&["default"], PreTokenizer::Default),
];

impl PreTokenizer {
    fn from_name(name: &str) -> Result<Self> {
        PRE_TOKENIZER_NAMES
            .iter()
            .find(|(names, _)| names.contains(&name))
            .map(|(_, family)| *family)
            .ok_or_else(|| TokenizerError::UnsupportedPreTokenizer {
                name: name.to_string(),
                known: PRE_TOKENIZER_NAMES
                    .iter()
                    .flat_map(|(names, _)| names.iter().copied())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The regexes llama.cpp applies, in order.
    fn regexes(self) -> &'static [&'static str] {
        match self {
            Self::Llama3 => &[LLAMA3_REGEX],
            Self::Qwen2 => &[QWEN2_REGEX],
            Self::SmolLm => &[r"\p{N}", GPT2_REGEX],
            Self::Gpt2 => &[GPT2_REGEX],
            Self::Default => &[
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_REGEX,
                r"\p{N}+",
                r"[0-9][0-9][0-9]",
            ],
        }
    }

    /// llama.cpp sets `ignore_merges` for Llama 3: a piece that is itself a token is not merged.
    fn ignore_merges(self) -> bool {
        self == Self::Llama3
    }

    /// llama.cpp's BOS default when the file has no `add_bos_token`.
    fn adds_bos_by_default(self) -> bool {
        self == Self::Llama3
    }
}

pub(super) struct Built {
    pub tokenizer: tokenizers::Tokenizer,
    pub special: SpecialIds,
    pub vocab_size: usize,
}

pub(super) fn build(content: &Content) -> Result<Built> {
    let model = string(content, KEY_MODEL)?.ok_or(TokenizerError::MissingKey(KEY_MODEL))?;
    if model != "gpt2" {
        return Err(TokenizerError::UnsupportedModel(model.to_string()));
    }
    let pre = match string(content, KEY_PRE)? {
        Some(name) => PreTokenizer::from_name(name)?,
        None => {
            tracing::warn!("GGUF names no pre-tokenizer; using llama.cpp's default, which may tokenize differently from the original model");
            PreTokenizer::Default
        }
    };
    let tokens = strings(content, KEY_TOKENS)?.ok_or(TokenizerError::MissingKey(KEY_TOKENS))?;
    let merges = strings(content, KEY_MERGES)?.ok_or(TokenizerError::MissingKey(KEY_MERGES))?;
    let token_types = match integers(content, KEY_TOKEN_TYPE)? {
        Some(types) if types.len() != tokens.len() => {
            return Err(TokenizerError::BadKey {
                key: KEY_TOKEN_TYPE,
                reason: format!("{} types for {} tokens", types.len(), tokens.len()),
            })
        }
        Some(types) => types,
        None => vec![1; tokens.len()],
    };
    let vocab_size = tokens.len();
    let id_in_vocab = |key: &'static str| -> Result<Option<u32>> {
        match integer(content, key)? {
            Some(id) if id >= 0 && (id as usize) < vocab_size => Ok(Some(id as u32)),
            // llama.cpp marks "no such token" with -1.
            Some(-1) | None => Ok(None),
            Some(id) => Err(TokenizerError::BadKey {
                key,
                reason: format!("id {id} is outside the vocabulary of {vocab_size}"),
            }),
        }
    };

    let mut vocab = Vocab::with_capacity(vocab_size);
    for (id, token) in tokens.iter().enumerate() {
        // Last one wins, as in llama.cpp's `token_to_id`.
        if vocab.insert(token.to_string(), id as u32).is_some() {
            tracing::warn!(token = %token, id, "GGUF vocabulary repeats a token text");
        }
    }
    let merges = merges
        .iter()
        .map(|merge| {
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| TokenizerError::BadKey {
                    key: KEY_MERGES,
                    reason: format!("merge {merge:?} is not two tokens separated by a space"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges())
        .build()
        .map_err(TokenizerError::Build)?;

    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    let mut steps = Vec::new();
    for regex in pre.regexes() {
        let split = Split::new(
            SplitPattern::Regex((*regex).to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(TokenizerError::Build)?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, false, false,
    )));
    tokenizer.with_pre_tokenizer(Some(Sequence::new(steps)));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    // Control tokens are special (skipped by `decode(.., true)`, read as text when special parsing
    // is off); user-defined ones are always matched and always decoded, as in llama.cpp.
    let mut control = Vec::new();
    let mut user_defined = Vec::new();
    for (token, kind) in tokens.iter().zip(&token_types) {
        match *kind {
            TOKEN_TYPE_CONTROL => control.push(AddedToken::from(token.to_string(), true)),
            TOKEN_TYPE_USER_DEFINED => {
                user_defined.push(AddedToken::from(token.to_string(), false).normalized(false))
            }
            _ => {}
        }
    }
    tokenizer
        .add_special_tokens(control)
        .map_err(TokenizerError::Build)?;
    tokenizer
        .add_tokens(user_defined)
        .map_err(TokenizerError::Build)?;

    let mut special = SpecialIds {
        bos: id_in_vocab(KEY_BOS)?,
        eos: Vec::new(),
        pad: id_in_vocab(KEY_PAD)?,
        add_bos: boolean(content, KEY_ADD_BOS)?.unwrap_or(pre.adds_bos_by_default()),
    };
    for key in [KEY_EOS, KEY_EOT, KEY_EOM] {
        if let Some(id) = id_in_vocab(key)? {
            special.push_eos(id);
        }
    }
    // Only `encode_with_special_tokens` runs the post-processor; plain `encode` never adds BOS.
    if let (true, Some(bos)) = (special.add_bos, special.bos) {
        let bos_text = tokens[bos as usize].to_string();
        let processor = TemplateProcessing::builder()
            .try_single(vec![bos_text.clone(), "$A".to_string()])
            .map_err(|e| TokenizerError::Build(e.into()))?
            .special_tokens(vec![(bos_text, bos)])
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string().into()))?;
        tokenizer.with_post_processor(Some(processor));
    }
    Ok(Built {
        tokenizer,
        special,
        vocab_size,
    })
}

fn string<'a>(content: &'a Content, key: &'static str) -> Result<Option<&'a str>> {
    match content.metadata.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(key, "a string", other)),
    }
}

fn strings<'a>(content: &'a Content, key: &'static str) -> Result<Option<Vec<&'a str>>> {
    let Some(value) = content.metadata.get(key) else {
        return Ok(None);
    };
    let Value::Array(items) = value else {
        return Err(wrong_type(key, "an array of strings", value));
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(s) => Ok(s.as_str()),
            other => Err(wrong_type(key, "an array of strings", other)),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn as_integer(value: &Value) -> Option<i64> {
    match *value {
        Value::U8(v) => Some(v.into()),
        Value::I8(v) => Some(v.into()),
        Value::U16(v) => Some(v.into()),
        Value::I16(v) => Some(v.into()),
        Value::U32(v) => Some(v.into()),
        Value::I32(v) => Some(v.into()),
        Value::U64(v) => i64::try_from(v).ok(),
        Value::I64(v) => Some(v),
        _ => None,
    }
}

fn integer(content: &Content, key: &'static str) -> Result<Option<i64>> {
    match content.metadata.get(key) {
        None => Ok(None),
        Some(value) => as_integer(value)
            .map(Some)
            .ok_or_else(|| wrong_type(key, "an integer", value)),
    }
}

fn integers(content: &Content, key: &'static str) -> Result<Option<Vec<i64>>> {
    let Some(value) = content.metadata.get(key) else {
        return Ok(None);
    };
    let Value::Array(items) = value else {
        return Err(wrong_type(key, "an array of integers", value));
    };
    items
        .iter()
        .map(|item| as_integer(item).ok_or_else(|| wrong_type(key, "an array of integers", item)))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn boolean(content: &Content, key: &'static str) -> Result<Option<bool>> {
    match content.metadata.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(key, "a boolean", other)),
    }
}

fn wrong_type(key: &'static str, expected: &str, found: &Value) -> TokenizerError {
    TokenizerError::BadKey {
        key,
        reason: format!("expected {expected}, found {:?}", found.value_type()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_pre_tokenizer_name_resolves_and_its_regexes_compile() {
        for (names, family) in PRE_TOKENIZER_NAMES {
            for name in *names {
                assert_eq!(PreTokenizer::from_name(name).unwrap(), *family);
            }
            for regex in family.regexes() {
                Split::new(
                    SplitPattern::Regex((*regex).to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{regex}: {e}"));
            }
        }
    }

    #[test]
    fn unknown_pre_tokenizer_is_an_error_naming_it() {
        let err = PreTokenizer::from_name("klingon").unwrap_err();
        assert!(err.to_string().contains("klingon"), "{err}");
    }
}
