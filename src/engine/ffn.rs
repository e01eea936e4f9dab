//! The feed-forward half of a decoder layer: a dense SwiGLU MLP, or Qwen3-MoE's routed mixture
//! of experts.
//!
//! Experts stay separate [`Linear`]s, each as stored (a GGUF's stacked `ffn_*_exps` blocks are
//! sliced per expert, never dequantized), so a token costs the reads of its chosen experts only
//! and every expert gets the CPU kernels a dense projection gets. Tokens are grouped by expert;
//! each token's expert outputs are summed in ascending expert order, as transformers'
//! `index_add_` loop does, and every step is row-wise, so a row's result does not depend on
//! which other rows share the batch (batched decoding stays bitwise equal to decoding alone).

use candle_core::{DType, Tensor};

use super::config::MoeConfig;
use super::error::{EngineError, Result};
use super::linear::Linear;

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

impl Mlp {
    fn forward(
        &self,
        h: &Tensor,
        project: &impl Fn(&Linear, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let mlp = (candle_nn::ops::silu(&project(&self.gate, h)?)? * project(&self.up, h)?)?;
        project(&self.down, &mlp)
    }
}

/// A router over `experts`, keeping the `top_k` most probable per token.
#[derive(Debug, Clone)]
pub(crate) struct SparseMoe {
    /// `[num_experts, hidden]`.
    pub router: Linear,
    pub experts: Vec<Mlp>,
    pub top_k: usize,
    pub norm_topk_prob: bool,
}

impl SparseMoe {
    pub(crate) fn new(router: Linear, experts: Vec<Mlp>, moe: &MoeConfig) -> Self {
        Self {
            router,
            experts,
            top_k: moe.num_experts_per_tok,
            norm_topk_prob: moe.norm_topk_prob,
        }
    }

    fn forward(
        &self,
        h: &Tensor,
        project: &impl Fn(&Linear, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let dims = h.dims().to_vec();
        let hidden = *dims.last().ok_or(EngineError::EmptyPrompt)?;
        let n = h.elem_count() / hidden.max(1);
        let flat = h.reshape((n, hidden))?;
        let logits: Vec<Vec<f32>> = project(&self.router, &flat)?
            .to_dtype(DType::F32)?
            .to_vec2()?;
        let choices: Vec<Vec<(usize, f32)>> = logits.iter().map(|row| self.route(row)).collect();
        // Rows per expert, in token order, and where each (token, expert) output lands.
        let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); self.experts.len()];
        let mut weights_of: Vec<Vec<f32>> = vec![Vec::new(); self.experts.len()];
        for (token, picked) in choices.iter().enumerate() {
            for &(expert, weight) in picked {
                rows_of[expert].push(token as u32);
                weights_of[expert].push(weight);
            }
        }
        let mut outputs = Vec::new();
        let mut first_row = vec![0u32; self.experts.len()];
        let mut produced = 0u32;
        for (expert, rows) in rows_of.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            first_row[expert] = produced;
            produced += rows.len() as u32;
            let index = Tensor::new(rows.as_slice(), h.device())?;
            let x = flat.index_select(&index, 0)?;
            let y = self.experts[expert].forward(&x, project)?;
            let w = Tensor::from_vec(weights_of[expert].clone(), (rows.len(), 1), h.device())?
                .to_dtype(y.dtype())?;
            outputs.push(y.broadcast_mul(&w)?);
        }
        let stacked = Tensor::cat(&outputs, 0)?;
        // Slot j of token t: its j-th chosen expert in ascending expert order; the output row of
        // (t, e) is e's first row plus how many earlier tokens also chose e.
        let mut seen = vec![0u32; self.experts.len()];
        let mut slots: Vec<Vec<u32>> = vec![Vec::with_capacity(n); self.top_k];
        for picked in &choices {
            let mut experts: Vec<usize> = picked.iter().map(|&(e, _)| e).collect();
            experts.sort_unstable();
            for (slot, e) in experts.into_iter().enumerate() {
                slots[slot].push(first_row[e] + seen[e]);
                seen[e] += 1;
            }
        }
        let mut sum: Option<Tensor> = None;
        for slot in slots {
            let index = Tensor::new(slot.as_slice(), h.device())?;
            let part = stacked.index_select(&index, 0)?;
            sum = Some(match sum {
                None => part,
                Some(acc) => (acc + part)?,
            });
        }
        let sum = sum.ok_or(EngineError::EmptyPrompt)?;
        Ok(sum.reshape(dims)?)
    }

    /// The chosen experts and their weights for one token's router logits: softmax in f32, the
    /// `top_k` largest (the lower index first on a tie), renormalized when `norm_topk_prob`.
    fn route(&self, logits: &[f32]) -> Vec<(usize, f32)> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
        let total: f32 = exps.iter().sum();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| exps[b].total_cmp(&exps[a]).then(a.cmp(&b)));
        let mut picked: Vec<(usize, f32)> = order
            .into_iter()
            .take(self.top_k)
            .map(|e| (e, exps[e] / total))
            .collect();
        if self.norm_topk_prob {
            let kept: f32 = picked.iter().map(|&(_, p)| p).sum();
            picked.iter_mut().for_each(|(_, p)| *p /= kept);
        }
        picked
    }
}

/// A layer's feed-forward block.
#[derive(Debug, Clone)]
pub(crate) enum FeedForward {
    // Both boxed: a `Linear` is a few hundred bytes, and the variants differ by one or two.
    Dense(Box<Mlp>),
    Sparse(Box<SparseMoe>),
}

impl FeedForward {
    /// The block's output for the normed hidden states `h` (`[..., hidden]`), without the
    /// residual; `project` runs each projection.
    pub(crate) fn forward(
        &self,
        h: &Tensor,
        project: &impl Fn(&Linear, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        match self {
            Self::Dense(mlp) => mlp.forward(h, project),
            Self::Sparse(moe) => moe.forward(h, project),
        }
    }
}
