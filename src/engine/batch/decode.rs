//! The two forward steps a batching scheduler needs: one decoding step for many sequences at once,
//! and one prefill chunk of one sequence.
//!
//! Batch invariance: a row of [`Model::decode_batch`] goes through exactly the arithmetic that
//! [`Model::forward`] gives the same token alone. Projections share one pass over the weights only
//! where the kernel keeps rows apart ([`Linear::forward_rows`]); RMSNorm, the activation and the
//! residual additions are row-wise in candle's CPU ops; rotary embedding, the cache append and
//! attention run per sequence over that sequence's own cache, exactly as alone. On one CUDA device
//! the rows share fixed-shape gemms ([`crate::engine::linear::CUDA_ROW_BUCKET`] rows), and CUDA's
//! RMSNorm and elementwise kernels work row by row. Elsewhere (a layer split, bf16 on the CPU) the
//! step runs the sequences one by one: still invariant, not faster.

use candle_core::{DType, Tensor};

use crate::engine::error::{EngineError, Result};
use crate::engine::kv_cache::KvCache;
use crate::engine::model::{Linear, Model};

impl Model {
    /// One decoding step: `tokens[i]` at position `caches[i].len()` of sequence `i`. Returns f32
    /// logits `[n, vocab]` whose row `i` is bit for bit what `forward(&[tokens[i]], caches[i])`
    /// returns, whatever the other rows are; every cache advances by one.
    pub fn decode_batch(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if tokens.len() != caches.len() {
            return Err(EngineError::BatchMismatch {
                tokens: tokens.len(),
                caches: caches.len(),
            });
        }
        for cache in caches.iter() {
            if cache.n_layers() != self.layers.len() {
                return Err(EngineError::CacheMismatch {
                    cache_layers: cache.n_layers(),
                    model_layers: self.layers.len(),
                });
            }
            if cache.len() + 1 > self.context_len() {
                return Err(EngineError::PromptTooLong {
                    prompt_len: cache.len() + 1,
                    context_len: self.context_len(),
                });
            }
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.vocab_size()) {
            return Err(EngineError::TokenOutOfRange {
                id,
                vocab_size: self.vocab_size(),
            });
        }
        let device = self.embed.device();
        let one_device = self.layers.iter().all(|l| l.device.same_device(device));
        // Rows share passes over the weights through our CPU kernels (f32) or CUDA's fixed-shape
        // gemms; the row loop below assumes one device, as a layer split has several.
        let rows_share_weights =
            one_device && (device.is_cuda() || (device.is_cpu() && self.dtype == DType::F32));
        if tokens.len() == 1 || !rows_share_weights {
            let rows = tokens
                .iter()
                .zip(caches.iter_mut())
                .map(|(&token, cache)| Ok(self.forward(&[token], cache)?.unsqueeze(0)?))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Tensor::cat(&rows, 0)?);
        }
        self.decode_rows(tokens, caches)
    }

    fn decode_rows(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        let cfg = &self.cfg;
        let n = tokens.len();
        let (n_head, n_kv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let device = self.embed.device();
        let ids = Tensor::new(tokens, device)?;
        // `[n, 1, hidden]`: each sequence is a batch of one of one position, as alone.
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .reshape((n, 1, cfg.hidden_size))?;
        let inputs = caches
            .iter()
            .map(|cache| self.chunk_inputs(cache.len(), 1, &[], device))
            .collect::<Result<Vec<_>>>()?;
        let project = |linear: &Linear, h: &Tensor| linear.forward_rows(h);
        for (idx, l) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &l.attn_norm, cfg.rms_norm_eps as f32)?;
            let q = project(&l.q, &h)?;
            let k = project(&l.k, &h)?;
            let v = project(&l.v, &h)?;
            let mut attn = Vec::with_capacity(n);
            for (i, (cache, inp)) in caches.iter_mut().zip(&inputs).enumerate() {
                let row = |t: &Tensor, heads: usize| t.narrow(0, i, 1)?.reshape((1, 1, heads, hd));
                attn.push(self.attend(
                    l,
                    idx,
                    row(&q, n_head)?,
                    row(&k, n_kv)?,
                    row(&v, n_kv)?,
                    inp,
                    cache,
                )?);
            }
            let attn = Tensor::cat(&attn, 0)?;
            let x_attn = (&x + project(&l.o, &attn)?)?;
            x = self.feed_forward(l, &x_attn, project)?;
        }
        for cache in caches.iter_mut() {
            cache.advance(1);
        }
        let normed = candle_nn::ops::rms_norm(
            &x.reshape((n, cfg.hidden_size))?,
            &self.norm,
            cfg.rms_norm_eps as f32,
        )?;
        Ok(self.lm_head.forward_rows(&normed)?.to_dtype(DType::F32)?)
    }

    /// Runs one prefill piece of a prompt at positions `cache.len()..`, ending at or before the
    /// next chunk boundary (see [`Model::prefill_chunk`]), and returns the f32 logits of its last
    /// position when `logits` is set. A prompt fed chunk by chunk this way computes exactly what
    /// [`Model::forward`] computes for it in one call.
    pub fn prefill_piece(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        logits: bool,
    ) -> Result<Option<Tensor>> {
        let chunk = self.prefill_chunk();
        let boundary = (cache.len() / chunk + 1) * chunk;
        if cache.len() + tokens.len() > boundary {
            return Err(EngineError::PieceCrossesChunk {
                start: cache.len(),
                len: tokens.len(),
                chunk,
            });
        }
        if logits {
            return Ok(Some(self.forward(tokens, cache)?));
        }
        self.forward_last_hidden(tokens, cache)?;
        Ok(None)
    }
}
