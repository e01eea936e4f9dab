//! Keeps the KV of recent prompts so that a prompt sharing a long prefix with an earlier one
//! (the agent's growing conversation, a fixed system prompt) only prefills the new part.
//!
//! Reuse is rounded down to a prefill-chunk boundary. Prefill runs in chunks aligned to absolute
//! positions, so the reused KV was computed by exactly the chunks a from-scratch run would use,
//! and the remaining chunks see the same inputs: logits are bitwise equal to a cold run. KV of
//! positions computed in a partial chunk or by single-token decoding is never stored, because
//! different matmul shapes may round differently.

use candle_core::Tensor;

use super::error::Result;
use super::kv_cache::KvCache;

struct Entry {
    tokens: Vec<u32>,
    kv: Vec<(Tensor, Tensor)>,
    bytes: usize,
    last_used: u64,
}

/// LRU store of prompt KV snapshots, bounded in bytes.
pub struct PrefixCache {
    entries: Vec<Entry>,
    budget_bytes: usize,
    clock: u64,
}

impl PrefixCache {
    /// A cache holding at most `budget_bytes` of KV (0 disables it).
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            budget_bytes,
            clock: 0,
        }
    }

    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// Number of stored prompts.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The longest reusable prefix of `prompt`: a restored cache and its length, a multiple of
    /// `chunk` and shorter than the prompt (the last prompt position must be computed to get its
    /// logits). `None` when nothing is reusable.
    pub fn lookup(&mut self, prompt: &[u32], chunk: usize) -> Result<Option<KvCache>> {
        let limit = prompt.len().saturating_sub(1);
        let mut best: Option<(usize, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let common = e
                .tokens
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            let reuse = common.min(limit) / chunk * chunk;
            // Ties go to the earliest entry, so the choice never depends on anything but order.
            if reuse > 0 && best.is_none_or(|(_, r)| reuse > r) {
                best = Some((i, reuse));
            }
        }
        let Some((i, reuse)) = best else {
            return Ok(None);
        };
        self.clock += 1;
        self.entries[i].last_used = self.clock;
        Ok(Some(KvCache::from_snapshot(&self.entries[i].kv, reuse)?))
    }

    /// Stores the KV of `tokens[..len]` from `cache`, where `len` is a chunk boundary the caller
    /// computed in full chunks. Entries that are prefixes of the new one are dropped, then the
    /// least recently used ones until the budget holds.
    pub fn insert(&mut self, tokens: &[u32], cache: &KvCache, len: usize) -> Result<()> {
        let len = len.min(cache.len()).min(tokens.len());
        if len == 0 || self.budget_bytes == 0 {
            return Ok(());
        }
        let tokens = &tokens[..len];
        self.clock += 1;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.tokens.starts_with(tokens))
        {
            e.last_used = self.clock;
            return Ok(());
        }
        let kv = cache.snapshot(len)?;
        let bytes: usize = kv
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum();
        if bytes > self.budget_bytes {
            tracing::debug!(
                bytes,
                budget = self.budget_bytes,
                "prompt KV larger than the prefix-cache budget; not stored"
            );
            return Ok(());
        }
        self.entries.retain(|e| !tokens.starts_with(&e.tokens));
        while self.bytes() + bytes > self.budget_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.entries.remove(oldest);
        }
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            kv,
            bytes,
            last_used: self.clock,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A one-layer cache holding `len` positions whose values encode the token ids.
    fn cache_for(tokens: &[u32]) -> KvCache {
        let mut cache = KvCache::new(1);
        let data: Vec<f32> = tokens.iter().map(|&t| t as f32).collect();
        let kv = Tensor::from_vec(data, (1, 1, tokens.len(), 1), &Device::Cpu).unwrap();
        cache.append(0, &kv, &kv).unwrap();
        cache.advance(tokens.len());
        cache
    }

    const BYTES_PER_POSITION: usize = 2 * 4; // K and V, one f32 each

    #[test]
    fn reuse_is_rounded_down_and_never_covers_the_last_token() {
        let mut pc = PrefixCache::new(1 << 20);
        let a: Vec<u32> = (0..40).collect();
        pc.insert(&a, &cache_for(&a), 32).unwrap();
        assert_eq!(pc.bytes(), 32 * BYTES_PER_POSITION);
        // Shares 37 tokens: reuse 32 with chunk 16, 36 with chunk 4.
        let mut b: Vec<u32> = (0..37).collect();
        b.extend([999, 998]);
        assert_eq!(pc.lookup(&b, 16).unwrap().unwrap().len(), 32);
        assert_eq!(
            pc.lookup(&b, 4).unwrap().unwrap().len(),
            32,
            "only 32 were stored"
        );
        // The same prompt again: its last position must still be computed.
        assert_eq!(pc.lookup(&a[..32], 16).unwrap().unwrap().len(), 16);
        assert!(pc.lookup(&[7, 8, 9], 1).unwrap().is_none());
        let restored = pc.lookup(&b, 16).unwrap().unwrap();
        let snap = restored.snapshot(32).unwrap();
        let values: Vec<f32> = snap[0].0.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(values, (0..32).map(|x| x as f32).collect::<Vec<_>>());
    }

    #[test]
    fn budget_evicts_least_recently_used_and_drops_dominated_prefixes() {
        let mut pc = PrefixCache::new(40 * BYTES_PER_POSITION);
        let a: Vec<u32> = (0..16).collect();
        let b: Vec<u32> = (100..116).collect();
        pc.insert(&a, &cache_for(&a), 16).unwrap();
        pc.insert(&b, &cache_for(&b), 16).unwrap();
        assert_eq!(pc.len(), 2);
        // Touch `a`, so `b` is the least recently used when `c` needs room.
        assert!(pc.lookup(&[&a[..], &[5]].concat(), 8).unwrap().is_some());
        let c: Vec<u32> = (200..216).collect();
        pc.insert(&c, &cache_for(&c), 16).unwrap();
        assert_eq!(pc.len(), 2);
        assert!(pc.lookup(&[&b[..], &[5]].concat(), 8).unwrap().is_none());
        assert!(pc.bytes() <= pc.budget_bytes());
        // A longer prompt extending `a` replaces it rather than storing both.
        let a_long: Vec<u32> = (0..24).collect();
        pc.insert(&a_long, &cache_for(&a_long), 24).unwrap();
        assert_eq!(pc.len(), 2);
        assert_eq!(pc.bytes(), (16 + 24) * BYTES_PER_POSITION);
        // Larger than the whole budget: not stored, so only `a_long`'s 24 positions are found.
        let huge: Vec<u32> = (0..64).collect();
        pc.insert(&huge, &cache_for(&huge), 64).unwrap();
        let found = pc.lookup(&[&huge[..], &[1]].concat(), 8).unwrap();
        assert_eq!(found.map(|c| c.len()), Some(24));
        assert_eq!(pc.len(), 2);
    }
}
