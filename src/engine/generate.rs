//! Greedy decoding with prefix reuse, stop conditions, and a logits hook for structured output.
//!
//! Ties in the argmax go to the lowest token id, and NaN logits never win, so the same model,
//! prompt, and options always produce the same tokens.

use std::time::Instant;

use super::error::{EngineError, Result};
use super::kv_cache::KvCache;
use super::model::Model;
use super::prefix_cache::PrefixCache;

/// Default prefix-cache budget: 1 GiB of KV.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 1 << 30;

/// Adjusts next-token logits before the argmax, e.g. to force a grammar (set banned ids to -inf).
pub trait LogitsMask {
    /// `generated` holds the tokens produced so far in this call.
    fn apply(&mut self, generated: &[u32], logits: &mut [f32]);
}

impl<F: FnMut(&[u32], &mut [f32])> LogitsMask for F {
    fn apply(&mut self, generated: &[u32], logits: &mut [f32]) {
        self(generated, logits)
    }
}

/// Options of one [`Generator::generate`] call.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// Generation stops when one of these is produced; it is not included in the output.
    pub stop_token_ids: Vec<u32>,
    /// Drop the oldest prompt tokens when the prompt does not fit the context window (leaving
    /// room for `max_new_tokens`) instead of failing.
    pub truncate_prompt: bool,
    /// Look up and store prompt KV in the prefix cache.
    pub use_prefix_cache: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 256,
            stop_token_ids: Vec::new(),
            truncate_prompt: false,
            use_prefix_cache: true,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token was produced (not included in `tokens`).
    StopToken(u32),
    MaxNewTokens,
    /// The caller's stop hook returned true.
    Hook,
    /// The context window is full.
    ContextFull,
}

/// Counters of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallStats {
    /// Prompt tokens after any truncation.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub generated_tokens: usize,
}

#[derive(Debug, Clone)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub stats: CallStats,
    pub stop_reason: StopReason,
}

/// Index of the largest value; the lowest index among equals; NaN never chosen unless all are.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_val = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &v) in logits.iter().enumerate() {
        if !v.is_nan() && (!found || v > best_val) {
            best = i;
            best_val = v;
            found = true;
        }
    }
    best as u32
}

/// A model plus the prefix cache shared by its calls.
pub struct Generator {
    model: Model,
    prefix_cache: PrefixCache,
}

impl Generator {
    pub fn new(model: Model) -> Self {
        Self::with_prefix_cache_bytes(model, DEFAULT_PREFIX_CACHE_BYTES)
    }

    pub fn with_prefix_cache_bytes(model: Model, bytes: usize) -> Self {
        Self {
            model,
            prefix_cache: PrefixCache::new(bytes),
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefix_cache
    }

    pub fn prefix_cache_mut(&mut self) -> &mut PrefixCache {
        &mut self.prefix_cache
    }

    /// Greedy-decodes after `prompt`. `stop` sees all tokens generated so far after each new one
    /// and ends generation by returning true (e.g. on a stop string).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        stop: impl FnMut(&[u32]) -> bool,
    ) -> Result<GenerateOutput> {
        self.generate_masked(prompt, opts, None, stop)
    }

    /// [`Generator::generate`] with an optional logits mask applied before every argmax.
    pub fn generate_masked(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        mut mask: Option<&mut dyn LogitsMask>,
        mut stop: impl FnMut(&[u32]) -> bool,
    ) -> Result<GenerateOutput> {
        let ctx = self.model.context_len();
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let prompt = if prompt.len() > ctx {
            if !opts.truncate_prompt {
                return Err(EngineError::PromptTooLong {
                    prompt_len: prompt.len(),
                    context_len: ctx,
                });
            }
            let keep = ctx.saturating_sub(opts.max_new_tokens).max(1);
            &prompt[prompt.len() - keep..]
        } else {
            prompt
        };
        let chunk = self.model.prefill_chunk();
        let prefill_start = Instant::now();
        let mut cache = match opts.use_prefix_cache {
            true => self.prefix_cache.lookup(prompt, chunk)?,
            false => None,
        }
        .unwrap_or_else(|| self.model.new_cache());
        let cached_tokens = cache.len();
        let mut logits = self.model.forward(&prompt[cached_tokens..], &mut cache)?;
        if opts.use_prefix_cache {
            // Only whole chunks: see `prefix_cache` for why partial ones are never stored.
            self.prefix_cache
                .insert(prompt, &cache, prompt.len() / chunk * chunk)?;
        }
        let prefill_ms = prefill_start.elapsed().as_secs_f64() * 1e3;

        let decode_start = Instant::now();
        let mut tokens = Vec::new();
        let stop_reason = loop {
            if tokens.len() >= opts.max_new_tokens {
                break StopReason::MaxNewTokens;
            }
            let mut values: Vec<f32> = logits.to_vec1()?;
            if let Some(m) = mask.as_mut() {
                m.apply(&tokens, &mut values);
            }
            let next = argmax(&values);
            if opts.stop_token_ids.contains(&next) {
                break StopReason::StopToken(next);
            }
            tokens.push(next);
            if stop(&tokens) {
                break StopReason::Hook;
            }
            if tokens.len() >= opts.max_new_tokens {
                break StopReason::MaxNewTokens;
            }
            if cache.len() >= ctx {
                break StopReason::ContextFull;
            }
            logits = self.model.forward(&[next], &mut cache)?;
        };
        let stats = CallStats {
            prompt_tokens: prompt.len(),
            cached_tokens,
            prefill_ms,
            decode_ms: decode_start.elapsed().as_secs_f64() * 1e3,
            generated_tokens: tokens.len(),
        };
        tracing::debug!(?stats, ?stop_reason, "generate");
        Ok(GenerateOutput {
            tokens,
            stats,
            stop_reason,
        })
    }

    /// A fresh KV cache for manual [`Model::forward`] calls.
    pub fn new_cache(&self) -> KvCache {
        self.model.new_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::argmax;

    #[test]
    fn argmax_prefers_lowest_id_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
