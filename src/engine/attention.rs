//! Attention of one forward step: per-head norms, rotary embedding, the KV-cache append, and the
//! choice of kernel — our CPU pass over the cache view (`cpu::attention`, f32) or candle's ops
//! (any device, any dtype).

use candle_core::{DType, Tensor};

use super::cpu::attention as cpu_attention;
use super::error::Result;
use super::kv_cache::KvCache;
use super::model::{ChunkInputs, Layer, Model};

impl Model {
    /// Attention of projected `q`, `k`, `v` (`[b, t, heads, head_dim]`): per-head norms, rotary
    /// embedding, the cache append and the attention itself; `[b, t, heads · head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend(
        &self,
        l: &Layer,
        idx: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        inp: &ChunkInputs,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let eps = cfg.rms_norm_eps as f32;
        let (b, t, n_head, hd) = q.dims4()?;
        let n_kv = cfg.num_key_value_heads;
        let (q, k) = match (&l.q_norm, &l.k_norm) {
            (Some(qn), Some(kn)) => (
                candle_nn::ops::rms_norm(&q.contiguous()?, qn, eps)?,
                candle_nn::ops::rms_norm(&k.contiguous()?, kn, eps)?,
            ),
            _ => (q, k),
        };
        let q = self
            .rope
            .apply(&q.transpose(1, 2)?.contiguous()?, &inp.cos, &inp.sin)?;
        let k = self
            .rope
            .apply(&k.transpose(1, 2)?.contiguous()?, &inp.cos, &inp.sin)?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let (k_all, v_all) = cache.append(idx, &k, &v)?;
        let len = k_all.dim(2)?;
        let groups = n_head / n_kv;
        // Query head h uses KV head h / groups: heads of one group become extra rows.
        let q = q.reshape((b, n_kv, groups * t, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        Ok(
            match cpu_attention::attention(&q, &k_all, &v_all, t, &inp.pads, scale as f32)? {
                Some(attn) => attn,
                None => {
                    // Scale, mask and softmax in f32 even for bf16 activations: bf16 scores lose
                    // ~0.4% per logit, which the exponential turns into visible attention errors.
                    let mut scores = (q.matmul(&k_all.t()?)?.to_dtype(DType::F32)? * scale)?;
                    if let Some(mask) = inp.mask()? {
                        scores = scores
                            .reshape((b, n_kv, groups, t, len))?
                            .broadcast_add(mask)?
                            .reshape((b, n_kv, groups * t, len))?;
                    }
                    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(self.dtype)?;
                    probs
                        .matmul(&v_all)?
                        .reshape((b, n_head, t, hd))?
                        .transpose(1, 2)?
                        .reshape((b, t, n_head * hd))?
                }
            },
        )
    }
}
