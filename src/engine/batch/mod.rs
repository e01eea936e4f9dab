//! Continuous batching: many sequences decoded in one step, each bit for bit as it is alone.
//!
//! [`Batcher`] is the scheduler, driven one [`Batcher::step`] at a time by its owner: it admits
//! waiting requests while their KV fits the budget, runs one decoding step over every sequence
//! that has a token to feed ([`Model::decode_batch`]), then prefill pieces of admitted prompts up
//! to the step's token budget. Sequences join and leave between steps. [`EngineHandle`] puts a
//! batcher on its own thread behind a channel, so many callers share one model.
//!
//! Why every sequence's tokens and logits are independent of its neighbours and of when it ran:
//! - decoding rows share a pass over the weights only through kernels that keep rows apart
//!   (`decode`);
//! - a prompt is prefilled in pieces that end at the same absolute chunk boundaries as alone, one
//!   sequence per forward, never padded or stacked with another prompt;
//! - the prefix cache holds whole chunks only, so a hit computes what a miss computes;
//! - each sequence keeps its own mask (grammar), stop hook, loop guard and counters, and is
//!   sampled by the same code as [`Generator::generate_masked`].
//!
//! KV memory is reserved per sequence at admission (its prompt plus `max_new_tokens`, rounded as
//! the cache allocates). When the budget is spent, requests wait; a request larger than the whole
//! budget runs once nothing else does, rather than never.

mod decode;
mod handle;

use std::collections::VecDeque;
use std::time::Instant;

use super::error::{EngineError, Result};
use super::generate::{
    next_token, CallStats, GenerateOptions, GenerateOutput, Generator, LogitsMask, StopReason,
};
use super::kv_cache::{self, KvCache};

pub use handle::{EngineHandle, EngineThread};

/// Identifies a submitted request within one [`Batcher`].
pub type SeqId = u64;

/// A hook that ends generation when it returns true; it sees every token generated so far.
pub type StopHook = Box<dyn FnMut(&[u32]) -> bool + Send>;

/// One generation request: what [`Generator::generate_masked`] takes, owned.
pub struct Request {
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    pub mask: Option<Box<dyn LogitsMask + Send>>,
    pub stop: Option<StopHook>,
}

impl Request {
    pub fn new(prompt: Vec<u32>, options: GenerateOptions) -> Self {
        Self {
            prompt,
            options,
            mask: None,
            stop: None,
        }
    }

    pub fn with_mask(mut self, mask: Box<dyn LogitsMask + Send>) -> Self {
        self.mask = Some(mask);
        self
    }

    pub fn with_stop(mut self, stop: StopHook) -> Self {
        self.stop = Some(stop);
        self
    }
}

/// A finished request: its output, and its mask and stop hook handed back (a grammar mask knows
/// afterwards whether it stayed in force).
pub struct Completion {
    pub id: SeqId,
    pub result: Result<GenerateOutput>,
    pub mask: Option<Box<dyn LogitsMask + Send>>,
    pub stop: Option<StopHook>,
}

/// Limits of one [`Batcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Positions computed per step, decoding rows included. A prefill piece is never cut below a
    /// chunk (that would change its arithmetic), so a step may exceed this by one piece when
    /// nothing else ran.
    pub max_step_tokens: usize,
    /// Sequences admitted at once.
    pub max_sequences: usize,
    /// KV bytes the admitted sequences may reserve together.
    pub kv_budget_bytes: usize,
}

/// Default KV budget on the CPU: 4 GiB, room for 16 sequences of 4k tokens on Qwen2.5-0.5B
/// (12 KiB per position).
pub const DEFAULT_KV_BUDGET_BYTES: usize = 4 << 30;

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max_step_tokens: 512,
            max_sequences: 64,
            kv_budget_bytes: DEFAULT_KV_BUDGET_BYTES,
        }
    }
}

struct Sequence {
    id: SeqId,
    request: Request,
    /// The prompt after any truncation.
    prompt: Vec<u32>,
    cache: KvCache,
    cached_tokens: usize,
    kv_reserved: usize,
    admitted: Instant,
    prefill_ms: Option<f64>,
    decode_started: Option<Instant>,
    tokens: Vec<u32>,
    /// The token to feed at the next decoding step.
    pending: Option<u32>,
}

impl Sequence {
    fn prefilling(&self) -> bool {
        self.cache.len() < self.prompt.len()
    }

    /// The next token by the rules of [`Generator::generate_masked`] (the same function);
    /// `Some` when the sequence is done.
    fn sample(&mut self, logits: Vec<f32>, context_len: usize) -> Option<StopReason> {
        let request = &mut self.request;
        let mask = request
            .mask
            .as_deref_mut()
            .map(|m| m as &mut dyn LogitsMask);
        let mut no_hook = |_: &[u32]| false;
        let stop: &mut dyn FnMut(&[u32]) -> bool = match request.stop.as_mut() {
            Some(hook) => hook.as_mut(),
            None => &mut no_hook,
        };
        let full = self.cache.len() >= context_len;
        match next_token(&mut self.tokens, logits, &request.options, mask, stop, full) {
            Ok(next) => {
                self.pending = Some(next);
                None
            }
            Err(reason) => Some(reason),
        }
    }

    fn finish(self, result: Result<StopReason>) -> Completion {
        let decode_ms = self
            .decode_started
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        let result = result.map(|stop_reason| GenerateOutput {
            stats: CallStats {
                prompt_tokens: self.prompt.len(),
                cached_tokens: self.cached_tokens,
                prefill_ms: self.prefill_ms.unwrap_or(0.0),
                decode_ms,
                generated_tokens: self.tokens.len(),
            },
            tokens: self.tokens,
            stop_reason,
        });
        Completion {
            id: self.id,
            result,
            mask: self.request.mask,
            stop: self.request.stop,
        }
    }
}

/// The scheduler: owns the model (through its [`Generator`], with the shared prefix cache) and
/// every sequence's KV.
pub struct Batcher {
    generator: Generator,
    options: BatchOptions,
    next_id: SeqId,
    waiting: VecDeque<(SeqId, Request)>,
    /// Admitted sequences in admission order.
    active: Vec<Sequence>,
    kv_reserved: usize,
    peak_sequences: usize,
}

impl Batcher {
    pub fn new(generator: Generator, options: BatchOptions) -> Self {
        Self {
            generator,
            options,
            next_id: 0,
            waiting: VecDeque::new(),
            active: Vec::new(),
            kv_reserved: 0,
            peak_sequences: 0,
        }
    }

    pub fn generator(&self) -> &Generator {
        &self.generator
    }

    pub fn generator_mut(&mut self) -> &mut Generator {
        &mut self.generator
    }

    /// Queues a request; it is admitted at a later [`Batcher::step`].
    pub fn submit(&mut self, request: Request) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back((id, request));
        id
    }

    /// No request waiting or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.active.is_empty()
    }

    /// Sequences admitted now.
    pub fn running(&self) -> usize {
        self.active.len()
    }

    /// Requests not yet admitted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The most sequences that were admitted at once.
    pub fn peak_sequences(&self) -> usize {
        self.peak_sequences
    }

    /// Runs every queued request to the end; completions in the order they finished.
    pub fn run_to_completion(&mut self) -> Vec<Completion> {
        let mut done = Vec::new();
        while !self.is_idle() {
            done.extend(self.step());
        }
        done
    }

    /// Bytes of KV a request reserves: the cache's buffer for its longest possible length.
    fn kv_bytes(&self, prompt_len: usize, max_new_tokens: usize) -> usize {
        let model = self.generator.model();
        let cfg = model.config();
        let positions = kv_cache::capacity_for(
            prompt_len
                .saturating_add(max_new_tokens)
                .min(model.context_len()),
        );
        let per_position = 2
            * model.layer_devices().len()
            * cfg.num_key_value_heads
            * cfg.head_dim
            * model.dtype().size_in_bytes();
        positions * per_position
    }

    fn admit(&mut self, done: &mut Vec<Completion>) {
        while let Some((_, request)) = self.waiting.front() {
            if self.active.len() >= self.options.max_sequences.max(1) {
                break;
            }
            let need = self.kv_bytes(request.prompt.len(), request.options.max_new_tokens);
            if !self.active.is_empty() && self.kv_reserved + need > self.options.kv_budget_bytes {
                break;
            }
            let Some((id, request)) = self.waiting.pop_front() else {
                break;
            };
            match self.start(id, request, need) {
                Ok(sequence) => {
                    self.kv_reserved += sequence.kv_reserved;
                    self.active.push(sequence);
                }
                Err(failed) => {
                    let (request, err) = *failed;
                    done.push(Completion {
                        id,
                        result: Err(err),
                        mask: request.mask,
                        stop: request.stop,
                    })
                }
            }
        }
        self.peak_sequences = self.peak_sequences.max(self.active.len());
    }

    /// Prompt checks and truncation as in [`Generator::generate_masked`], then the prefix cache.
    fn start(
        &mut self,
        id: SeqId,
        request: Request,
        kv_reserved: usize,
    ) -> std::result::Result<Sequence, Box<(Request, EngineError)>> {
        let admitted = Instant::now();
        let ctx = self.generator.model().context_len();
        let opts = &request.options;
        if request.prompt.is_empty() {
            return Err(Box::new((request, EngineError::EmptyPrompt)));
        }
        let prompt = if request.prompt.len() > ctx {
            if !opts.truncate_prompt {
                let err = EngineError::PromptTooLong {
                    prompt_len: request.prompt.len(),
                    context_len: ctx,
                };
                return Err(Box::new((request, err)));
            }
            let keep = ctx.saturating_sub(opts.max_new_tokens).max(1);
            request.prompt[request.prompt.len() - keep..].to_vec()
        } else {
            request.prompt.clone()
        };
        let chunk = self.generator.model().prefill_chunk();
        let cached = match opts.use_prefix_cache {
            true => self.generator.prefix_cache_mut().lookup(&prompt, chunk),
            false => Ok(None),
        };
        let cache = match cached {
            Ok(cache) => cache.unwrap_or_else(|| self.generator.new_cache()),
            Err(err) => return Err(Box::new((request, err))),
        };
        Ok(Sequence {
            id,
            cached_tokens: cache.len(),
            cache,
            prompt,
            request,
            kv_reserved,
            admitted,
            prefill_ms: None,
            decode_started: None,
            tokens: Vec::new(),
            pending: None,
        })
    }

    /// One scheduling step: admit, decode every sequence with a token to feed, then prefill
    /// pieces within the token budget. Returns the requests that finished.
    pub fn step(&mut self) -> Vec<Completion> {
        let mut done = Vec::new();
        self.admit(&mut done);
        let mut finished: Vec<(usize, Result<StopReason>)> = Vec::new();
        let decoded = self.decode_step(&mut finished);
        self.prefill_step(decoded, &mut finished);
        // Remove from the back so earlier indices stay valid; report in admission order.
        finished.sort_by_key(|(index, _)| *index);
        let mut removed: Vec<Completion> = finished
            .into_iter()
            .rev()
            .map(|(index, result)| {
                let sequence = self.active.remove(index);
                self.kv_reserved -= sequence.kv_reserved;
                sequence.finish(result)
            })
            .collect();
        removed.reverse();
        done.extend(removed);
        done
    }

    /// Returns the number of rows decoded.
    fn decode_step(&mut self, finished: &mut Vec<(usize, Result<StopReason>)>) -> usize {
        let model = self.generator.model();
        let ctx = model.context_len();
        let (indices, tokens): (Vec<usize>, Vec<u32>) = self
            .active
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.pending.map(|t| (i, t)))
            .unzip();
        if tokens.is_empty() {
            return 0;
        }
        let mut caches: Vec<&mut KvCache> = self
            .active
            .iter_mut()
            .filter(|s| s.pending.is_some())
            .map(|s| &mut s.cache)
            .collect();
        let logits = model
            .decode_batch(&tokens, &mut caches)
            .and_then(|l| Ok(l.to_vec2::<f32>()?));
        match logits {
            Ok(rows) => {
                for (&i, row) in indices.iter().zip(rows) {
                    let sequence = &mut self.active[i];
                    sequence.pending = None;
                    if let Some(reason) = sequence.sample(row, ctx) {
                        finished.push((i, Ok(reason)));
                    }
                }
            }
            Err(err) => {
                let message = err.to_string();
                for &i in &indices {
                    finished.push((i, Err(EngineError::EngineStopped(message.clone()))));
                }
            }
        }
        tokens.len()
    }

    fn prefill_step(&mut self, decoded: usize, finished: &mut Vec<(usize, Result<StopReason>)>) {
        let mut budget = self.options.max_step_tokens.saturating_sub(decoded);
        let mut ran = decoded > 0;
        let (model, prefix_cache) = self.generator.parts_mut();
        let chunk = model.prefill_chunk();
        let ctx = model.context_len();
        for (i, sequence) in self.active.iter_mut().enumerate() {
            if !sequence.prefilling() {
                continue;
            }
            let start = sequence.cache.len();
            let end = ((start / chunk + 1) * chunk).min(sequence.prompt.len());
            let len = end - start;
            if len > budget && ran {
                break;
            }
            let last = end == sequence.prompt.len();
            let result =
                model.prefill_piece(&sequence.prompt[start..end], &mut sequence.cache, last);
            ran = true;
            budget = budget.saturating_sub(len);
            let logits = match result {
                Ok(Some(logits)) => logits.to_vec1::<f32>().map_err(EngineError::from),
                Ok(None) => continue,
                Err(err) => Err(err),
            };
            let logits = match logits {
                Ok(logits) => logits,
                Err(err) => {
                    finished.push((i, Err(err)));
                    continue;
                }
            };
            if sequence.request.options.use_prefix_cache {
                let whole = sequence.prompt.len() / chunk * chunk;
                let stored = prefix_cache.insert(&sequence.prompt, &sequence.cache, whole);
                if let Err(err) = stored {
                    finished.push((i, Err(err)));
                    continue;
                }
            }
            sequence.prefill_ms = Some(sequence.admitted.elapsed().as_secs_f64() * 1e3);
            sequence.decode_started = Some(Instant::now());
            if let Some(reason) = sequence.sample(logits, ctx) {
                finished.push((i, Ok(reason)));
            }
        }
    }
}
