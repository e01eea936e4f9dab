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

    /// After the call: whether the mask shaped the whole reply (a grammar that gave up, or
    /// never started, says no).
    fn in_force(&self) -> bool {
        true
    }
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
    /// End generation once the output repeats itself (see [`LoopGuard`]). Off by default here, so
    /// raw decoding matches other engines token for token; chat calls turn it on.
    pub loop_guard: Option<LoopGuard>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 256,
            stop_token_ids: Vec::new(),
            truncate_prompt: false,
            use_prefix_cache: true,
            loop_guard: None,
        }
    }
}

/// Stops greedy decoding that has fallen into a cycle. Small models decoded greedily often end in
/// one ("The answer is:\n\nThe answer is:\n\n..." until the token budget runs out); greedy
/// decoding never leaves a cycle of its own, so every further token is wasted time, and on a
/// 2-core CPU a 1,000-token loop costs a minute per call. A block of `period` tokens repeated back
/// to back at least `min_repeats` times, spanning at least `min_span` tokens, ends the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    /// Longest block looked for, in tokens.
    pub max_period: usize,
    /// Fewest back-to-back copies of the block.
    pub min_repeats: usize,
    /// Fewest tokens the copies must cover together, so short blocks need more copies (a token
    /// repeated 4 times is common in real text; 64 times is not).
    pub min_span: usize,
}

impl Default for LoopGuard {
    fn default() -> Self {
        Self {
            max_period: 64,
            min_repeats: 4,
            min_span: 64,
        }
    }
}

impl LoopGuard {
    /// The shortest period with which `tokens` ends in a loop, if it does.
    pub fn period(&self, tokens: &[u32]) -> Option<usize> {
        (1..=self.max_period).find(|&period| {
            let repeats = self.min_repeats.max(self.min_span.div_ceil(period));
            let span = period * repeats;
            span <= tokens.len() && {
                let tail = &tokens[tokens.len() - span..];
                tail[period..].iter().zip(tail).all(|(a, b)| a == b)
            }
        })
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
    /// The output ended in a cycle of this many tokens ([`LoopGuard`]).
    Loop {
        period: usize,
    },
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

/// One greedy step after the logits of the last position, with every stop rule in its order:
/// `Ok(next)` appends `next` to `tokens` and asks for its forward pass; `Err` ends the call.
/// `context_full`: the cache already holds the whole window. Shared by [`Generator`] and the
/// batching engine, so a sequence stops at the same token alone or batched.
pub(crate) fn next_token<'m>(
    tokens: &mut Vec<u32>,
    mut logits: Vec<f32>,
    opts: &GenerateOptions,
    mask: Option<&mut (dyn LogitsMask + 'm)>,
    stop: &mut dyn FnMut(&[u32]) -> bool,
    context_full: bool,
) -> std::result::Result<u32, StopReason> {
    if tokens.len() >= opts.max_new_tokens {
        return Err(StopReason::MaxNewTokens);
    }
    if let Some(mask) = mask {
        mask.apply(tokens, &mut logits);
    }
    let next = argmax(&logits);
    if opts.stop_token_ids.contains(&next) {
        return Err(StopReason::StopToken(next));
    }
    tokens.push(next);
    if stop(tokens) {
        return Err(StopReason::Hook);
    }
    if let Some(period) = opts.loop_guard.and_then(|guard| guard.period(tokens)) {
        return Err(StopReason::Loop { period });
    }
    if tokens.len() >= opts.max_new_tokens {
        return Err(StopReason::MaxNewTokens);
    }
    if context_full {
        return Err(StopReason::ContextFull);
    }
    Ok(next)
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

    /// The model and the prefix cache at once (a scheduler runs one and fills the other).
    pub fn parts_mut(&mut self) -> (&Model, &mut PrefixCache) {
        (&self.model, &mut self.prefix_cache)
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
            let values: Vec<f32> = logits.to_vec1()?;
            let step = next_token(
                &mut tokens,
                values,
                opts,
                mask.as_deref_mut(),
                &mut stop,
                cache.len() >= ctx,
            );
            match step {
                Ok(next) => logits = self.model.forward(&[next], &mut cache)?,
                Err(reason) => break reason,
            }
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
    use super::{argmax, LoopGuard};

    #[test]
    fn loop_guard_needs_enough_copies_over_enough_tokens() {
        let guard = LoopGuard::default();
        let block = [7u32, 8, 9, 10, 11, 12, 13, 14];
        let mut tokens = vec![1, 2, 3];
        // A period of 8 needs max(4, 64 / 8) = 8 copies.
        for copies in 1..=8 {
            tokens.extend(block);
            let expected = (copies == 8).then_some(8);
            assert_eq!(guard.period(&tokens), expected, "{copies} copies");
        }
        // One token repeated: 63 times is not yet a loop, 64 is.
        let mut same = vec![5u32; 63];
        assert_eq!(guard.period(&same), None);
        same.push(5);
        assert_eq!(guard.period(&same), Some(1));
        // A block longer than max_period is never reported.
        let long: Vec<u32> = (0..65).cycle().take(65 * 5).collect();
        assert_eq!(guard.period(&long), None);
        // Near-repeats are not loops.
        let mut near: Vec<u32> = block.iter().copied().cycle().take(64).collect();
        near[10] = 99;
        assert_eq!(guard.period(&near), None);
    }

    #[test]
    fn argmax_prefers_lowest_id_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
