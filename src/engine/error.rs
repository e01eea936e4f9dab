//! The engine's error type: every failure a caller can act on gets its own variant, so the CLI
//! can say what went wrong (which file, which lengths) instead of a bare candle message.

use std::path::PathBuf;

/// Errors from loading and running models.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the model does not fit: its weights need {} on {device}, which has {} free (a plan may use {:.0}% of it)\n{plan}", super::plan::human(*.needed), super::plan::human(*.available), super::plan::FIT_MARGIN * 100.0)]
    DoesNotFit {
        device: String,
        needed: u64,
        available: u64,
        plan: String,
    },
    #[error("model file not found: {path}")]
    MissingWeights { path: PathBuf },
    #[error("weight file {path} is truncated or corrupt: {detail}")]
    TruncatedWeights { path: PathBuf, detail: String },
    #[error("tensor `{name}` is missing from the checkpoint")]
    MissingTensor { name: String },
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    BadTensorShape {
        name: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error("bad model config ({source_name}): {detail}")]
    BadConfig { source_name: String, detail: String },
    #[error("unsupported model architecture `{0}` (supported: Qwen3ForCausalLM / qwen3, Qwen3MoeForCausalLM / qwen3moe, Qwen2ForCausalLM / qwen2, LlamaForCausalLM / llama)")]
    UnsupportedArchitecture(String),
    #[error("tensor `{tensor}` uses quantization type {dtype}, which is not supported (supported: Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K, Q8_0, F16, BF16, F32)")]
    UnsupportedQuantType { tensor: String, dtype: String },
    #[error(
        "unknown random-init preset `{0}` (known: qwen3-0.6b, qwen3-4b, qwen3-8b, qwen2.5-0.5b, llama-3.1-8b)"
    )]
    UnknownPreset(String),
    #[error("prompt has {prompt_len} tokens but the context window is {context_len} tokens")]
    PromptTooLong {
        prompt_len: usize,
        context_len: usize,
    },
    #[error("empty prompt: at least one token is needed to produce logits")]
    EmptyPrompt,
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    #[error("device `{requested}` requested, but this build has no CUDA support (rebuild with `--features cuda`)")]
    CudaNotCompiled { requested: String },
    #[error("bad device spec `{spec}`: {detail}")]
    BadDeviceSpec { spec: String, detail: String },
    #[error("KV cache has {cache_layers} layers, the model has {model_layers}")]
    CacheMismatch {
        cache_layers: usize,
        model_layers: usize,
    },
    #[error("a decoding step got {tokens} tokens for {caches} KV caches")]
    BatchMismatch { tokens: usize, caches: usize },
    #[error("a prefill piece of {len} tokens at position {start} crosses a chunk boundary (chunk {chunk})")]
    PieceCrossesChunk {
        start: usize,
        len: usize,
        chunk: usize,
    },
    #[error("a borrowed logits mask cannot run on the batching engine thread; use chat_constrained, whose mask the call owns")]
    BorrowedMask,
    #[error("the batching engine has stopped: {0}")]
    EngineStopped(String),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Tokenizer(#[from] super::tokenizer::TokenizerError),
    #[error(transparent)]
    ChatTemplate(#[from] super::chat::ChatTemplateError),
    #[error(transparent)]
    Constraint(#[from] super::constrain::ConstraintError),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
