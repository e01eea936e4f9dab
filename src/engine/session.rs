//! A chat model ready to answer: weights, tokenizer and chat template loaded together from one
//! path, so callers (the CLI, the agent, the rerank baseline) deal in messages and text, not ids.
//!
//! A GGUF file carries all three; an HF checkpoint directory has `tokenizer.json` and
//! `tokenizer_config.json` beside the weights. `--tokenizer` overrides either.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::DType;

use super::batch::{BatchOptions, EngineHandle, EngineThread, Request};
use super::chat::{strip_thinking, ChatMessage, ChatTemplate, TemplateOptions};
use super::constrain::{ConstraintError, Grammar, GrammarCompiler};
use super::device::DeviceMap;
use super::error::{EngineError, Result};
use super::generate::{
    CallStats, GenerateOptions, Generator, LogitsMask, LoopGuard, StopReason,
    DEFAULT_PREFIX_CACHE_BYTES,
};
use super::load::{read_gguf, LoadOptions, ModelSpec, QuantizedWeights};
use super::model::Model;
use super::tokenizer::{StopMatch, StopStrings, TextStream, Tokenizer};

/// How to load a [`ChatModel`].
#[derive(Debug, Clone)]
pub struct ChatModelOptions {
    /// A `tokenizer.json` to use instead of the one that comes with the weights. Required for
    /// random-init models, which have none.
    pub tokenizer: Option<PathBuf>,
    pub devices: DeviceMap,
    /// Defaults to the device map's (f32 on CPU, bf16 on CUDA).
    pub dtype: Option<DType>,
    /// How GGUF block-quantized weights are held (see [`QuantizedWeights`]).
    pub quantized: QuantizedWeights,
    pub prefix_cache_bytes: usize,
    /// Prefill chunk length (and prefix-cache reuse granularity); `None` keeps the engine's default.
    pub prefill_chunk: Option<usize>,
}

impl Default for ChatModelOptions {
    fn default() -> Self {
        Self {
            tokenizer: None,
            devices: DeviceMap::cpu(),
            dtype: None,
            quantized: QuantizedWeights::default(),
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            prefill_chunk: None,
        }
    }
}

/// Options of one [`ChatModel::chat`] call.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    pub max_new_tokens: usize,
    /// Generation ends at the first of these; the answer is cut before it.
    pub stop_strings: Vec<String>,
    /// For templates that read it (Qwen3); `None` leaves the template's default.
    pub enable_thinking: Option<bool>,
    pub truncate_prompt: bool,
    pub use_prefix_cache: bool,
    /// End the reply when it starts cycling (on by default for chat: a looping reply is never an
    /// answer, and the loop would run to `max_new_tokens`). Not applied to constrained calls,
    /// whose grammar closes the reply within a bounded length.
    pub loop_guard: Option<LoopGuard>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 512,
            stop_strings: Vec::new(),
            enable_thinking: None,
            truncate_prompt: false,
            use_prefix_cache: true,
            loop_guard: Some(LoopGuard::default()),
        }
    }
}

/// The result of one chat call.
#[derive(Debug, Clone)]
pub struct ChatOutput {
    /// The templated prompt text, as tokenized.
    pub prompt: String,
    pub prompt_token_ids: Vec<u32>,
    /// Every generated id, the stop token included when one ended generation.
    pub generated_token_ids: Vec<u32>,
    /// Everything the model wrote (up to a stop string), thinking included.
    pub raw_text: String,
    /// The `<think>…</think>` block, if the model wrote one.
    pub thinking: Option<String>,
    /// The reply with any thinking block removed.
    pub text: String,
    pub stats: CallStats,
    pub stop_reason: StopReason,
    /// Whether a logits mask shaped the reply: for [`ChatModel::chat_constrained`], the grammar
    /// was in force for the whole answer (after any thinking) and never gave up.
    pub constrained: bool,
}

/// Weights, tokenizer, template and the prefix cache that successive calls share.
///
/// The weights run either here ([`Generator`], one call at a time) or on a batching engine
/// thread ([`ChatModel::into_engine`]), whose handles many threads call at once; the text side
/// (tokenizer, template, grammars) is shared by the handles.
pub struct ChatModel {
    backend: Backend,
    text: Arc<ChatText>,
}

enum Backend {
    Local(Generator),
    Engine {
        engine: EngineHandle,
        /// The same weights the engine runs (tensors are shared, not copied): for the model's
        /// facts (context window, config).
        model: Model,
    },
}

struct ChatText {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    stop_token_ids: Vec<u32>,
    /// Built on the first constrained call: walking the vocabulary costs time that plain chat
    /// should not pay.
    grammars: OnceLock<GrammarCompiler>,
}

/// The mask of one call: a caller's own (local model only) or one the call owns (it can travel
/// to the engine thread and back).
enum CallMask<'a> {
    None,
    Borrowed(&'a mut dyn LogitsMask),
    Owned(Box<dyn LogitsMask + Send>),
}

impl ChatModel {
    pub fn load(spec: &ModelSpec, opts: &ChatModelOptions) -> Result<Self> {
        let load_options = LoadOptions {
            dtype: opts.dtype,
            quantized: opts.quantized,
            prefill_chunk: opts.prefill_chunk,
        };
        let model = Model::load_with(spec, &opts.devices, &load_options)?;
        let (tokenizer, template) = match spec {
            ModelSpec::Path(path) if path.is_dir() => load_hf_text(path, opts)?,
            ModelSpec::Path(path) => load_gguf_text(path, opts)?,
            ModelSpec::Random { preset, .. } => {
                let path = opts.tokenizer.as_deref().ok_or_else(|| EngineError::BadConfig {
                    source_name: format!("random-init {preset}"),
                    detail: "a random-init model has no tokenizer: pass --tokenizer tokenizer.json (its directory's tokenizer_config.json supplies the chat template)".into(),
                })?;
                let tokenizer = Tokenizer::from_file(path)?;
                let config = path.with_file_name("tokenizer_config.json");
                (tokenizer, ChatTemplate::from_tokenizer_config(config)?)
            }
        };
        let stop_token_ids = tokenizer.eos_token_ids().to_vec();
        Ok(Self {
            backend: Backend::Local(Generator::with_prefix_cache_bytes(
                model,
                opts.prefix_cache_bytes,
            )),
            text: Arc::new(ChatText {
                tokenizer,
                template,
                stop_token_ids,
                grammars: OnceLock::new(),
            }),
        })
    }

    /// Moves the weights and the prefix cache onto a batching engine thread and returns a chat
    /// model that calls it; [`ChatModel::engine_clone`] makes more for other threads. Each call's
    /// tokens are bitwise what the local model gives (see [`crate::engine::batch`]).
    pub fn into_engine(self, options: BatchOptions) -> Result<(Self, EngineThread)> {
        match self.backend {
            Backend::Local(generator) => {
                let model = generator.model().clone();
                let (engine, thread) = EngineHandle::spawn(generator, options)?;
                Ok((
                    Self {
                        backend: Backend::Engine { engine, model },
                        text: self.text,
                    },
                    thread,
                ))
            }
            Backend::Engine { .. } => Err(EngineError::EngineStopped(
                "this chat model already runs on an engine thread".into(),
            )),
        }
    }

    /// [`ChatModel::into_engine`] with `handles` handles (at least one), for as many threads. The
    /// engine thread ends once every handle is dropped; join it then.
    pub fn into_engine_handles(
        self,
        options: BatchOptions,
        handles: usize,
    ) -> Result<(Vec<Self>, EngineThread)> {
        let (first, thread) = self.into_engine(options)?;
        let mut models = Vec::with_capacity(handles.max(1));
        for _ in 1..handles.max(1) {
            let handle = first.engine_clone().ok_or_else(|| {
                EngineError::EngineStopped("an engine-backed model has no handle".into())
            })?;
            models.push(handle);
        }
        models.push(first);
        Ok((models, thread))
    }

    /// Another handle to the same engine thread (`None` for a local model, which has one owner).
    pub fn engine_clone(&self) -> Option<Self> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Engine { engine, model } => Some(Self {
                backend: Backend::Engine {
                    engine: engine.clone(),
                    model: model.clone(),
                },
                text: self.text.clone(),
            }),
        }
    }

    /// Whether the chat template has a reasoning mode (see [`ChatTemplate::supports_thinking`]).
    pub fn supports_thinking(&self) -> bool {
        self.text.template.supports_thinking()
    }

    /// A new-token budget per call that fits the model: thinking models get the method's 8,192;
    /// others answer in a few hundred tokens, and a small model that starts repeating itself
    /// should not burn thousands of steps. 1,024 leaves room for the longest structured action
    /// (`agent::schemas::MAX_ACTION_CHARS`, about 750): at 512, one of SmolLM2's pattern lists in
    /// 50 TabFact claims was cut before its JSON closed.
    pub fn default_max_new_tokens(&self) -> usize {
        if self.supports_thinking() {
            8192
        } else {
            1024
        }
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.text.tokenizer
    }

    pub fn model(&self) -> &Model {
        match &self.backend {
            Backend::Local(generator) => generator.model(),
            Backend::Engine { model, .. } => model,
        }
    }

    /// The local generator (`None` once the model runs on an engine thread).
    pub fn generator_mut(&mut self) -> Option<&mut Generator> {
        match &mut self.backend {
            Backend::Local(generator) => Some(generator),
            Backend::Engine { .. } => None,
        }
    }

    /// The prompt text the template makes of `messages`, ending with the assistant header.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        let options = TemplateOptions {
            add_generation_prompt: true,
            enable_thinking,
        };
        Ok(self.text.template.render(messages, &options)?)
    }

    /// Token ids of a templated prompt. Special tokens written by the template (`<|im_start|>`)
    /// map to their ids; BOS is added only when the tokenizer asks for it and the template did
    /// not already write it.
    pub fn encode_prompt(&self, prompt: &str) -> Result<Vec<u32>> {
        let tokenizer = &self.text.tokenizer;
        let mut ids = tokenizer.encode(prompt, true)?;
        if tokenizer.add_bos() {
            if let Some((bos, _)) = tokenizer.bos_token() {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        Ok(ids)
    }

    /// log p(`continuation` | `prompt`) summed over the continuation's tokens, and the tokens
    /// run. `prompt` is raw model text (special tokens such as `<|im_start|>` map to their
    /// ids, as in [`ChatModel::encode_prompt`]); the continuation is plain text, tokenized on
    /// its own, so its tokens are the same after any prompt. Runs on the model's weights in
    /// this thread, also for an engine handle.
    pub fn continuation_logprob(&self, prompt: &str, continuation: &str) -> Result<(f64, usize)> {
        let context = self.encode_prompt(prompt)?;
        let continuation = self.text.tokenizer.encode(continuation, false)?;
        let logprob = self.model().continuation_logprob(&context, &continuation)?;
        Ok((logprob, context.len() + continuation.len()))
    }

    /// Greedy reply to `messages`.
    pub fn chat(&mut self, messages: &[ChatMessage], opts: &ChatOptions) -> Result<ChatOutput> {
        self.chat_masked(messages, opts, None)
    }

    /// [`ChatModel::chat`] with a logits mask (structured decoding). A borrowed mask cannot
    /// travel to an engine thread: on one, use [`ChatModel::chat_constrained`].
    pub fn chat_masked(
        &mut self,
        messages: &[ChatMessage],
        opts: &ChatOptions,
        mask: Option<&mut dyn LogitsMask>,
    ) -> Result<ChatOutput> {
        let prompt = self.render(messages, opts.enable_thinking)?;
        let constrained = mask.is_some();
        let mask = match mask {
            Some(mask) => CallMask::Borrowed(mask),
            None => CallMask::None,
        };
        let (mut output, _) = self.chat_prompt(prompt, opts, mask)?;
        output.constrained = constrained;
        Ok(output)
    }

    /// The grammar compiler over this model's tokenizer, built on first use.
    pub fn grammar_compiler(&self) -> Result<&GrammarCompiler, ConstraintError> {
        if let Some(compiler) = self.text.grammars.get() {
            return Ok(compiler);
        }
        let started = std::time::Instant::now();
        let compiler = GrammarCompiler::new(&self.text.tokenizer)?;
        tracing::debug!(
            ms = started.elapsed().as_secs_f64() * 1e3,
            "token trie for structured decoding"
        );
        Ok(self.text.grammars.get_or_init(|| compiler))
    }

    /// A greedy reply whose answer must match `grammar`. When the template leaves the model
    /// room to think (a thinking template whose prompt does not already close `<think>`), the
    /// thinking is free and the grammar applies after `</think>`.
    pub fn chat_constrained(
        &mut self,
        messages: &[ChatMessage],
        opts: &ChatOptions,
        grammar: &Grammar,
    ) -> Result<ChatOutput> {
        let prompt = self.render(messages, opts.enable_thinking)?;
        let gate = if self.supports_thinking() && !prompt.trim_end().ends_with("</think>") {
            Some(self.text.tokenizer.encode("</think>", true)?)
        } else {
            None
        };
        let mask = self.grammar_compiler()?.compile_gated(grammar, gate)?;
        let (mut output, mask) = self.chat_prompt(prompt, opts, CallMask::Owned(Box::new(mask)))?;
        output.constrained = mask.is_some_and(|mask| mask.in_force());
        Ok(output)
    }

    /// Returns the output and the call's owned mask, if it had one.
    fn chat_prompt(
        &mut self,
        prompt: String,
        opts: &ChatOptions,
        mut mask: CallMask<'_>,
    ) -> Result<(ChatOutput, Option<Box<dyn LogitsMask + Send>>)> {
        let prompt_token_ids = self.encode_prompt(&prompt)?;
        let generate_options = GenerateOptions {
            max_new_tokens: opts.max_new_tokens,
            stop_token_ids: self.text.stop_token_ids.clone(),
            truncate_prompt: opts.truncate_prompt,
            use_prefix_cache: opts.use_prefix_cache,
            // A grammar bounds its own output and always closes it, so a reply that cycles under
            // one still ends parseable (a pattern list repeating one pattern, say); cutting it at the
            // loop would leave unclosed JSON.
            loop_guard: opts.loop_guard.filter(|_| matches!(mask, CallMask::None)),
        };
        let stops = StopStrings::new(opts.stop_strings.iter().cloned());
        // Decoding happens inside the stop hook, one token at a time, so the text is only built
        // once; a decode error there ends generation and is reported afterwards.
        let stream_error = Arc::new(Mutex::new(None));
        let mut hook = {
            let text = self.text.clone();
            let stops = stops.clone();
            let stream_error = stream_error.clone();
            let mut stream = TextStream::new(true);
            move |generated: &[u32]| {
                if stops.is_empty() {
                    return false;
                }
                let Some(&last) = generated.last() else {
                    return false;
                };
                match stream.push(&text.tokenizer, last) {
                    Ok(_) => matches!(stops.check(stream.text()), StopMatch::Found { .. }),
                    Err(err) => {
                        if let Ok(mut slot) = stream_error.lock() {
                            *slot = Some(err);
                        }
                        true
                    }
                }
            }
        };
        let (output, owned_mask) = match &mut self.backend {
            Backend::Local(generator) => {
                let mask_ref: Option<&mut dyn LogitsMask> = match &mut mask {
                    CallMask::None => None,
                    CallMask::Borrowed(mask) => Some(&mut **mask),
                    CallMask::Owned(mask) => Some(mask.as_mut()),
                };
                let output = generator.generate_masked(
                    &prompt_token_ids,
                    &generate_options,
                    mask_ref,
                    &mut hook,
                )?;
                let owned = match mask {
                    CallMask::Owned(mask) => Some(mask),
                    _ => None,
                };
                (output, owned)
            }
            Backend::Engine { engine, .. } => {
                let mut request = Request::new(prompt_token_ids.clone(), generate_options)
                    .with_stop(Box::new(hook));
                match mask {
                    CallMask::None => {}
                    CallMask::Owned(mask) => request = request.with_mask(mask),
                    CallMask::Borrowed(_) => return Err(EngineError::BorrowedMask),
                }
                let done = engine.generate(request)?;
                (done.result?, done.mask)
            }
        };
        let stream_error = stream_error.lock().ok().and_then(|mut slot| slot.take());
        if let Some(err) = stream_error {
            return Err(err.into());
        }
        let tokenizer = &self.text.tokenizer;
        let mut raw_text = tokenizer.decode(&output.tokens, true)?;
        if let StopMatch::Found { at, .. } = stops.check(&raw_text) {
            raw_text.truncate(at);
        }
        let (thinking, text) = strip_thinking(&raw_text);
        // The stop token was generated too: report it, as llama.cpp does, so ids compare 1:1.
        let mut generated_token_ids = output.tokens;
        if let StopReason::StopToken(id) = output.stop_reason {
            generated_token_ids.push(id);
        }
        let output = ChatOutput {
            prompt,
            prompt_token_ids,
            generated_token_ids,
            raw_text,
            thinking,
            text,
            stats: output.stats,
            stop_reason: output.stop_reason,
            constrained: false,
        };
        Ok((output, owned_mask))
    }
}

/// The tokenizer that comes with a GGUF file or checkpoint directory, or `tokenizer` instead;
/// for callers that run a model without its chat template (embedding and reranker heads).
pub fn load_tokenizer(path: &Path, tokenizer: Option<&Path>) -> Result<Tokenizer> {
    Ok(match tokenizer {
        Some(file) => Tokenizer::from_file(file)?,
        None if path.is_dir() => Tokenizer::from_file(path.join("tokenizer.json"))?,
        None => Tokenizer::from_gguf(&read_gguf(path)?)?,
    })
}

fn load_gguf_text(path: &Path, opts: &ChatModelOptions) -> Result<(Tokenizer, ChatTemplate)> {
    let content = read_gguf(path)?;
    let tokenizer = match &opts.tokenizer {
        Some(file) => Tokenizer::from_file(file)?,
        None => Tokenizer::from_gguf(&content)?,
    };
    Ok((tokenizer, ChatTemplate::from_gguf(&content)?))
}

fn load_hf_text(dir: &Path, opts: &ChatModelOptions) -> Result<(Tokenizer, ChatTemplate)> {
    let tokenizer_file = opts
        .tokenizer
        .clone()
        .unwrap_or_else(|| dir.join("tokenizer.json"));
    let tokenizer = Tokenizer::from_file(&tokenizer_file)?;
    let template = ChatTemplate::from_tokenizer_config(dir.join("tokenizer_config.json"))?;
    Ok((tokenizer, template))
}
