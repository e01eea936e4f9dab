//! The decoder forward pass shared by Qwen3, Qwen2 and Llama, written here rather than taken from
//! candle-transformers because those models keep their KV cache private and cannot truncate,
//! snapshot, or restore it, which the prefix cache and the agent's rollbacks need.
//!
//! Prefill runs in chunks whose boundaries sit at absolute positions that are multiples of the
//! chunk size, so a long prompt never materializes a full `len × len` score matrix, and the same
//! position is always computed by the same chunk whatever was cached before (see
//! `prefix_cache`). Grouped-query attention folds the query heads of one KV head into the row
//! dimension instead of repeating K and V, so the cache is read in place.

use candle_core::{DType, Device, Tensor};

use super::config::{Architecture, Config};
use super::error::{EngineError, Result};
use super::ffn::FeedForward;
use super::kv_cache::KvCache;
pub(crate) use super::linear::{DecodeRows, Linear};
use super::rope::Rope;

/// Default prefill chunk, in positions. It is also the prefix cache's reuse granularity, so it
/// trades prefill efficiency against reuse: on SmolLM2 (CPU, 1 thread, 2×512 tokens) 128 costs 3%
/// more CPU time than 256 and 64 costs 15% more, while ten prompts sharing a 1,500-token prefix
/// recompute 2,528 tokens at 128 against 3,679 at 256 (`examples/prefix_reuse.rs`).
pub const DEFAULT_PREFILL_CHUNK: usize = 128;

/// One decoder block's weights, all on `device`.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub attn_norm: Tensor,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// Qwen3's per-head RMSNorm on queries and keys (`None` for Qwen2 and Llama).
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub ffn: FeedForward,
    pub device: Device,
}

/// A loaded model: weights placed on their devices plus the settings of the forward pass.
#[derive(Debug, Clone)]
pub struct Model {
    pub(crate) cfg: Config,
    /// `[vocab, hidden]` on the first device.
    pub(crate) embed: Tensor,
    pub(crate) layers: Vec<Layer>,
    /// Final norm and head, on the last device.
    pub(crate) norm: Tensor,
    pub(crate) lm_head: Linear,
    pub(crate) rope: Rope,
    pub(crate) dtype: DType,
    pub(crate) prefill_chunk: usize,
}

/// Per-device inputs shared by the layers of one chunk.
pub(crate) struct ChunkInputs {
    device: Device,
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    /// The chunk's first position and length.
    pos: usize,
    t: usize,
    /// Left padding per sequence (empty when none).
    pub(crate) pads: Vec<usize>,
    /// The additive mask for candle's attention ops, built the first time a layer needs it: the
    /// CPU kernel masks by position and never does (for a 6k-token prompt the mask is 768k
    /// values per chunk).
    mask: std::cell::OnceCell<Option<Tensor>>,
}

impl ChunkInputs {
    pub(crate) fn mask(&self) -> Result<Option<&Tensor>> {
        if let Some(mask) = self.mask.get() {
            return Ok(mask.as_ref());
        }
        let built = self.build_mask()?;
        Ok(self.mask.get_or_init(|| built).as_ref())
    }

    fn build_mask(&self) -> Result<Option<Tensor>> {
        let (pos, t) = (self.pos, self.t);
        let len = pos + t;
        // Row i of a chunk (position pos + i) sees keys 0..=pos + i, minus its row's padding.
        // A padding query still sees itself, so no softmax row is all -inf (NaN would leak
        // into real rows through 0 * NaN in the value product).
        let visible = |pad: usize, i: usize, j: usize| j <= pos + i && (j >= pad || j == pos + i);
        let rows = |pad: usize| {
            (0..t).flat_map(move |i| {
                (0..len).map(move |j| {
                    if visible(pad, i, j) {
                        0.0f32
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
        };
        if self.pads.is_empty() {
            if t == 1 {
                return Ok(None);
            }
            let data: Vec<f32> = rows(0).collect();
            return Ok(Some(Tensor::from_vec(data, (t, len), &self.device)?));
        }
        let data: Vec<f32> = self.pads.iter().flat_map(|&pad| rows(pad)).collect();
        Ok(Some(Tensor::from_vec(
            data,
            (self.pads.len(), 1, 1, t, len),
            &self.device,
        )?))
    }
}

enum Want {
    Last,
    All,
}

impl Model {
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    /// Longest sequence (prompt plus generated tokens) the model accepts.
    pub fn context_len(&self) -> usize {
        self.cfg.max_position_embeddings
    }

    /// Activation and KV dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn prefill_chunk(&self) -> usize {
        self.prefill_chunk
    }

    /// Sets the prefill chunk (positions per forward step; at least 1). Smaller chunks bound the
    /// attention score memory; prefix-cache reuse is rounded to this size.
    pub fn set_prefill_chunk(&mut self, chunk: usize) {
        self.prefill_chunk = chunk.max(1);
    }

    /// Devices of each decoder layer, in order.
    pub fn layer_devices(&self) -> Vec<Device> {
        self.layers.iter().map(|l| l.device.clone()).collect()
    }

    /// A fresh cache sized for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.layers.len())
    }

    /// Runs `tokens` at positions `cache.len()..` and returns the f32 logits `[vocab]` of the
    /// last one.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.run(tokens, cache, Want::Last)?;
        Ok(self
            .lm_head
            .forward(&hidden)?
            .to_dtype(DType::F32)?
            .flatten_all()?)
    }

    /// Like [`Model::forward`] but returns the f32 logits of every position, `[len, vocab]`.
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.run(tokens, cache, Want::All)?;
        Ok(self.lm_head.forward(&hidden)?.to_dtype(DType::F32)?)
    }

    /// Final hidden states (after the final norm) of every position, f32 `[len, hidden]`; the
    /// input of embedding and reranker heads.
    pub fn forward_hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        Ok(self.run(tokens, cache, Want::All)?.to_dtype(DType::F32)?)
    }

    /// Final-norm hidden state of the last of `tokens` (run at positions `cache.len()..`), f32
    /// `[1, hidden]`; the cache advances as in [`Model::forward`].
    pub fn forward_last_hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        Ok(self.run(tokens, cache, Want::Last)?.to_dtype(DType::F32)?)
    }

    /// `sum log p(continuation[i] | context, continuation[..i])` and the tokens it ran: the
    /// model's query likelihood of `continuation` after `context`, in a fresh cache. Only the
    /// continuation's positions go through the output head.
    pub fn continuation_logprob(&self, context: &[u32], continuation: &[u32]) -> Result<f64> {
        if context.is_empty() || continuation.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let tokens: Vec<u32> = context
            .iter()
            .chain(&continuation[..continuation.len() - 1])
            .copied()
            .collect();
        let hidden = self.run(&tokens, &mut self.new_cache(), Want::All)?;
        // Position i predicts token i + 1: the last context position predicts the first
        // continuation token.
        let hidden = hidden.narrow(0, context.len() - 1, continuation.len())?;
        let logits = self.lm_head.forward(&hidden)?.to_dtype(DType::F32)?;
        let log_probs: Vec<Vec<f32>> =
            candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1)?.to_vec2()?;
        Ok(log_probs
            .iter()
            .zip(continuation)
            .map(|(row, &token)| f64::from(row[token as usize]))
            .sum())
    }

    /// Rows `ids` of the output head, f32 `[ids.len(), hidden]` on the last device:
    /// `hidden · rows^T` gives those logits only (e.g. a reranker's "no"/"yes").
    pub fn head_rows(&self, ids: &[u32]) -> Result<Tensor> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.cfg.vocab_size) {
            return Err(EngineError::TokenOutOfRange {
                id,
                vocab_size: self.cfg.vocab_size,
            });
        }
        self.lm_head
            .rows(ids)?
            .to_device(self.norm.device())
            .map_err(Into::into)
    }

    /// Last-token embedding, L2-normalized (Qwen3-Embedding style), of `tokens` run alone.
    pub fn embed_last_token(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        let mut cache = self.new_cache();
        let hidden = self
            .run(tokens, &mut cache, Want::Last)?
            .to_dtype(DType::F32)?;
        Ok(l2_normalized(hidden.flatten_all()?.to_vec1()?))
    }

    /// Final-norm hidden state of the last token of each sequence, f32 `[n, hidden]`, computed
    /// as one left-padded batch (positions 0..max_len for every row, as transformers does by
    /// default; RoPE is relative, so each row equals its single-sequence result up to rounding).
    /// The input of batched embedding and reranker heads.
    pub fn last_hidden_batch(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let max_len = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        if seqs.iter().any(|s| s.is_empty()) {
            return Err(EngineError::EmptyPrompt);
        }
        if max_len > self.context_len() {
            return Err(EngineError::PromptTooLong {
                prompt_len: max_len,
                context_len: self.context_len(),
            });
        }
        self.check_ids(seqs.iter().flat_map(|s| s.iter()))?;
        let pads: Vec<usize> = seqs.iter().map(|s| max_len - s.len()).collect();
        // Padding ids are arbitrary: the mask hides them.
        let padded: Vec<Vec<u32>> = seqs
            .iter()
            .zip(&pads)
            .map(|(s, &p)| std::iter::repeat_n(0, p).chain(s.iter().copied()).collect())
            .collect();
        let mut cache = self.new_cache();
        let chunk = self.prefill_chunk;
        let mut last = None;
        for start in (0..max_len).step_by(chunk) {
            let end = (start + chunk).min(max_len);
            let rows: Vec<&[u32]> = padded.iter().map(|r| &r[start..end]).collect();
            last = Some(self.run_batch_chunk(&rows, &pads, &mut cache)?);
        }
        let last = last.ok_or(EngineError::EmptyPrompt)?;
        let t = last.dim(1)?;
        let rows = last.narrow(1, t - 1, 1)?.squeeze(1)?.contiguous()?;
        let normed = candle_nn::ops::rms_norm(&rows, &self.norm, self.cfg.rms_norm_eps as f32)?;
        Ok(normed.to_dtype(DType::F32)?)
    }

    /// L2-normalized last-token embeddings of a batch (Qwen3-Embedding style).
    pub fn embed_batch(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let hidden = self.last_hidden_batch(seqs)?;
        let rows: Vec<Vec<f32>> = hidden.to_vec2()?;
        Ok(rows.into_iter().map(l2_normalized).collect())
    }

    /// Last-position f32 logits `[n, vocab]` of a batch (e.g. reranker yes/no scores).
    pub fn last_logits_batch(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let hidden = self.last_hidden_batch(seqs)?.to_dtype(self.dtype)?;
        Ok(self.lm_head.forward(&hidden)?.to_dtype(DType::F32)?)
    }

    fn check_ids<'a>(&self, mut ids: impl Iterator<Item = &'a u32>) -> Result<()> {
        match ids.find(|&&id| id as usize >= self.cfg.vocab_size) {
            Some(&id) => Err(EngineError::TokenOutOfRange {
                id,
                vocab_size: self.cfg.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Normalized hidden states `[rows, hidden]` on the last device.
    fn run(&self, tokens: &[u32], cache: &mut KvCache, want: Want) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if cache.n_layers() != self.layers.len() {
            return Err(EngineError::CacheMismatch {
                cache_layers: cache.n_layers(),
                model_layers: self.layers.len(),
            });
        }
        let total = cache.len() + tokens.len();
        if total > self.context_len() {
            return Err(EngineError::PromptTooLong {
                prompt_len: total,
                context_len: self.context_len(),
            });
        }
        if let Some(&id) = tokens
            .iter()
            .find(|&&id| id as usize >= self.cfg.vocab_size)
        {
            return Err(EngineError::TokenOutOfRange {
                id,
                vocab_size: self.cfg.vocab_size,
            });
        }
        let chunk = self.prefill_chunk;
        let mut outputs = Vec::new();
        let mut done = 0;
        while done < tokens.len() {
            let pos = cache.len();
            let end = ((pos / chunk + 1) * chunk).min(pos + tokens.len() - done);
            let piece = &tokens[done..done + end - pos];
            let x = self.run_chunk(piece, cache)?;
            done += piece.len();
            let rows = match want {
                Want::All => x,
                Want::Last if done == tokens.len() => x.narrow(0, piece.len() - 1, 1)?,
                Want::Last => continue,
            };
            let normed = candle_nn::ops::rms_norm(
                &rows.contiguous()?,
                &self.norm,
                self.cfg.rms_norm_eps as f32,
            )?;
            outputs.push(normed);
        }
        Ok(Tensor::cat(&outputs, 0)?)
    }

    /// One chunk through every layer; returns the un-normed hidden states `[t, hidden]` on the
    /// last device and advances the cache.
    fn run_chunk(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        Ok(self.run_batch_chunk(&[tokens], &[0], cache)?.squeeze(0)?)
    }

    /// `rows` (equal lengths) at positions `cache.len()..` for a batch whose row `r` starts with
    /// `pads[r]` padding positions; returns `[batch, t, hidden]` on the last device.
    fn run_batch_chunk(
        &self,
        rows: &[&[u32]],
        pads: &[usize],
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let pos = cache.len();
        let t = rows[0].len();
        let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let ids = Tensor::new(flat.as_slice(), self.embed.device())?;
        let mut x =
            self.embed
                .index_select(&ids, 0)?
                .reshape((rows.len(), t, self.cfg.hidden_size))?;
        let mut inputs: Option<ChunkInputs> = None;
        for (i, layer) in self.layers.iter().enumerate() {
            if !x.device().same_device(&layer.device) {
                x = x.to_device(&layer.device)?;
            }
            // Rope tables and mask are rebuilt only where the split moves to another device.
            let inp = match inputs.take() {
                Some(c) if c.device.same_device(&layer.device) => c,
                _ => self.chunk_inputs(pos, t, pads, &layer.device)?,
            };
            x = self.layer_forward(layer, i, &x, &inp, cache)?;
            inputs = Some(inp);
        }
        cache.advance(t);
        let last = self.norm.device();
        if !x.device().same_device(last) {
            x = x.to_device(last)?;
        }
        Ok(x)
    }

    pub(crate) fn chunk_inputs(
        &self,
        pos: usize,
        t: usize,
        pads: &[usize],
        device: &Device,
    ) -> Result<ChunkInputs> {
        let (cos, sin) = self.rope.tables(pos, t, self.dtype, device)?;
        Ok(ChunkInputs {
            device: device.clone(),
            cos,
            sin,
            pos,
            t,
            pads: if pads.iter().all(|&p| p == 0) {
                Vec::new()
            } else {
                pads.to_vec()
            },
            mask: std::cell::OnceCell::new(),
        })
    }

    fn layer_forward(
        &self,
        l: &Layer,
        idx: usize,
        x: &Tensor,
        inp: &ChunkInputs,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (b, t, _) = x.dims3()?;
        let (n_head, n_kv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let h = candle_nn::ops::rms_norm(x, &l.attn_norm, cfg.rms_norm_eps as f32)?;
        let q = l.q.forward(&h)?.reshape((b, t, n_head, hd))?;
        let k = l.k.forward(&h)?.reshape((b, t, n_kv, hd))?;
        let v = l.v.forward(&h)?.reshape((b, t, n_kv, hd))?;
        let attn = self.attend(l, idx, q, k, v, inp, cache)?;
        let x = (x + l.o.forward(&attn)?)?;
        self.feed_forward(l, &x, |linear, h| linear.forward(h))
    }

    /// The residual MLP block after attention; `project` runs each projection (batched decoding
    /// passes one that keeps every row's arithmetic as it is alone).
    pub(crate) fn feed_forward(
        &self,
        l: &Layer,
        x: &Tensor,
        project: impl Fn(&Linear, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let h = candle_nn::ops::rms_norm(x, &l.ffn_norm, self.cfg.rms_norm_eps as f32)?;
        Ok((x + l.ffn.forward(&h, &project)?)?)
    }

    pub fn architecture(&self) -> Architecture {
        self.cfg.architecture
    }
}

fn l2_normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}
