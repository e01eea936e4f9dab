//! In-process LLM engine on candle: model loading (safetensors, GGUF), tokenizer, chat templates,
//! deterministic greedy decoding, an explicit KV cache with prefix reuse, devices.

mod chat;
mod tokenizer;

pub use chat::{strip_thinking, ChatMessage, ChatTemplate, ChatTemplateError, TemplateOptions};
pub use tokenizer::{StopMatch, StopStrings, TextStream, Tokenizer, TokenizerError};
