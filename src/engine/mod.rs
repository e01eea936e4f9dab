//! In-process LLM engine on candle: model loading (safetensors, GGUF), tokenizer, chat templates,
//! deterministic greedy decoding, an explicit KV cache with prefix reuse, devices.
