//! In-process LLM engine on candle: model loading (safetensors, GGUF), tokenizer, chat templates,
//! deterministic greedy decoding, an explicit KV cache with prefix reuse, devices.
//!
//! - [`config`]: hyper-parameters from HF `config.json`, GGUF metadata, or presets.
//! - [`load`]: building a [`Model`] from a checkpoint directory, a GGUF file, or random weights.
//! - [`model`]: the Qwen3 / Qwen3-MoE / Qwen2 / Llama forward pass with chunked prefill, plus batched last-token
//!   hidden states for embedding and reranker heads.
//! - [`kv_cache`], [`prefix_cache`]: caller-owned KV and the LRU store of prompt prefixes.
//! - [`batch`]: continuous batching (many sequences per step, each bit for bit as alone) and a
//!   thread-owned engine behind a cloneable handle.
//! - [`generate`]: greedy decoding with stop conditions and a logits hook.
//! - [`constrain`]: structured decoding, a grammar (JSON schema, Lark) as that hook (llguidance).
//! - [`device`]: device specs and layer split.
//! - [`plan`]: a model's facts and memory plan from headers alone; refusal before loading.
//! - [`hub`]: `ORG/NAME[@REVISION][:QUANT]` resolved offline in the local Hugging Face cache.
//! - [`session`]: weights + tokenizer + template behind one `chat(messages)` call.
//! - [`tokenizer`], [`chat`]: text ↔ ids (tokenizer.json or rebuilt from GGUF) and chat templates.
//!
//! ```no_run
//! use tableseek::engine::{DeviceMap, GenerateOptions, Generator, Model, ModelSpec};
//! # fn main() -> Result<(), tableseek::engine::EngineError> {
//! let devices = DeviceMap::parse("cpu", None)?;
//! let model = Model::load(&ModelSpec::Path("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".into()), &devices, None)?;
//! let eos = model.config().eos_token_ids.clone();
//! let mut generator = Generator::new(model);
//! let opts = GenerateOptions { max_new_tokens: 64, stop_token_ids: eos, ..Default::default() };
//! let out = generator.generate(&[1, 9690, 198], &opts, |_generated| false)?;
//! println!("{:?} {:?}", out.tokens, out.stats);
//! # Ok(())
//! # }
//! ```

pub(crate) mod attention;
pub mod batch;
pub mod config;
pub(crate) mod cpu;
pub mod device;
pub mod error;
pub(crate) mod ffn;
pub mod generate;
pub mod hub;
pub mod kv_cache;
pub(crate) mod linear;
pub mod load;
pub mod model;
pub mod plan;
pub mod prefix_cache;
pub mod rope;

pub use batch::{BatchOptions, Batcher, Completion, EngineHandle, Request};
pub use config::{Architecture, Config, MoeConfig};
pub use device::{free_memory, parse_bytes, parse_dtype, DeviceMap};
pub use error::EngineError;
pub use generate::{
    CallStats, GenerateOptions, GenerateOutput, Generator, LogitsMask, LoopGuard, StopReason,
};
pub use kv_cache::KvCache;
pub use load::{read_gguf, LoadOptions, ModelSpec, QuantizedWeights, WeightsMode};
pub use model::Model;
pub use prefix_cache::PrefixCache;

pub mod chat;
mod chat_namespace;
pub mod constrain;
pub mod session;
pub mod tokenizer;

pub use chat::{strip_thinking, ChatMessage, ChatTemplate, ChatTemplateError, TemplateOptions};
pub use constrain::{ConstraintError, Grammar, GrammarCompiler, GrammarMask};
pub use session::{load_tokenizer, ChatModel, ChatModelOptions, ChatOptions, ChatOutput};
pub use tokenizer::{StopMatch, StopStrings, TextStream, Tokenizer, TokenizerError};
