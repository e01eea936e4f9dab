//! The BERT layer forward pass on CPU, fused where candle runs separate ops.
//!
//! Why our own: candle's CPU backend allocates a fresh tensor per op and has no fused attention.
//! `perf` of MiniLM encoding on candle ops showed under 40% of the time in matrix products; the
//! rest went to libm's scalar `erff` (GELU), scalar `expf` (softmax), the bias, scale, mask and
//! residual passes, zeroing fresh buffers, and the head-split transposes. sentence-transformers'
//! PyTorch runs vectorized, fused kernels for those, so a like-for-like baseline needs them too.
//!
//! What changes, against the candle layers in `bert.rs` (which remain the path on other devices):
//! - the matrix products still run on the `gemm` crate that candle uses, but each output buffer
//!   starts as the bias (plus the residual where one follows), so no separate pass adds them;
//! - query, key and value come from one product against the stacked weights, and attention reads
//!   them in place through strides: per text and head, scores over that text's real keys only
//!   (a padded key's weight is exactly 0 in the masked reference too), then a softmax with a
//!   vectorized exp, then the weighted sum written straight into the output rows;
//! - GELU uses a rational erf approximation (Eigen's and XLA's for f32, a few ulp), layer norm
//!   runs in place.
//!
//! The vectorized pieces live in `engine::cpu::kernels`, shared with the decoder's attention.

use candle_nn::VarBuilder;
use gemm::Parallelism;
use rayon::prelude::*;

use super::bert::{BertConfig, Result};
use crate::engine::cpu::kernels::{
    gelu_erf_in_place, layer_norm_rows_in_place, matmul, softmax_rows_in_place, View,
};

/// Rows per task when a linear layer's output buffer is filled with its bias.
const INIT_ROWS: usize = 64;

/// A linear layer in Hugging Face layout: `weight` is (outputs × inputs), row-major.
struct Dense {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
}

impl Dense {
    fn load(vb: &VarBuilder, inputs: usize, outputs: usize) -> Result<Self> {
        Ok(Self {
            weight: vb
                .get((outputs, inputs), "weight")?
                .flatten_all()?
                .to_vec1()?,
            bias: vb.get(outputs, "bias")?.to_vec1()?,
            inputs,
        })
    }

    /// Stacks layers that read the same input into one (their outputs side by side).
    fn stack(parts: Vec<Dense>) -> Self {
        let inputs = parts.first().map_or(0, |d| d.inputs);
        let mut weight = Vec::new();
        let mut bias = Vec::new();
        for part in parts {
            weight.extend(part.weight);
            bias.extend(part.bias);
        }
        Self {
            weight,
            bias,
            inputs,
        }
    }

    fn outputs(&self) -> usize {
        self.bias.len()
    }

    /// `xs · weightᵀ + bias (+ residual)` for `xs` of `rows × inputs`.
    fn forward(&self, xs: &[f32], residual: Option<&[f32]>, threads: usize) -> Vec<f32> {
        let outputs = self.outputs();
        let rows = xs.len() / self.inputs;
        let mut out = Vec::with_capacity(rows * outputs);
        let init = |(i, row): (usize, &mut [std::mem::MaybeUninit<f32>])| {
            let first = i * INIT_ROWS;
            for (r, row) in row.chunks_exact_mut(outputs).enumerate() {
                match residual {
                    Some(xs) => {
                        let xs = &xs[(first + r) * outputs..][..outputs];
                        for ((slot, b), x) in row.iter_mut().zip(&self.bias).zip(xs) {
                            slot.write(b + x);
                        }
                    }
                    None => {
                        for (slot, b) in row.iter_mut().zip(&self.bias) {
                            slot.write(*b);
                        }
                    }
                }
            }
        };
        let spare = &mut out.spare_capacity_mut()[..rows * outputs];
        // The main thread is not a pool worker: done serially, this pass left both pool threads
        // idle for ~10% of a 2-thread run.
        if threads > 1 {
            spare
                .par_chunks_mut(INIT_ROWS * outputs)
                .enumerate()
                .for_each(init);
        } else {
            spare
                .chunks_mut(INIT_ROWS * outputs)
                .enumerate()
                .for_each(init);
        }
        // SAFETY: every one of the first rows × outputs slots was written above.
        unsafe { out.set_len(rows * outputs) };
        let parallelism = if threads > 1 {
            Parallelism::Rayon(threads)
        } else {
            Parallelism::None
        };
        // SAFETY: `xs` holds rows × inputs values, the weight outputs × inputs, `out` rows ×
        // outputs; `out` is a fresh allocation.
        unsafe {
            matmul(
                rows,
                outputs,
                self.inputs,
                out.as_mut_ptr(),
                outputs,
                true,
                View {
                    ptr: xs.as_ptr(),
                    row_stride: self.inputs,
                    col_stride: 1,
                },
                // weightᵀ: element (input i, output j) is weight[j * inputs + i].
                View {
                    ptr: self.weight.as_ptr(),
                    row_stride: 1,
                    col_stride: self.inputs,
                },
                parallelism,
            );
        }
        out
    }
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn load(vb: &VarBuilder, width: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: vb.get(width, "weight")?.to_vec1()?,
            bias: vb.get(width, "bias")?.to_vec1()?,
            eps: eps as f32,
        })
    }

    fn apply(&self, xs: &mut [f32], threads: usize) {
        let width = self.weight.len();
        if threads > 1 {
            let rows_per_task = (xs.len() / width).div_ceil(threads).max(1);
            xs.par_chunks_mut(rows_per_task * width).for_each(|part| {
                layer_norm_rows_in_place(part, &self.weight, &self.bias, self.eps)
            });
        } else {
            layer_norm_rows_in_place(xs, &self.weight, &self.bias, self.eps);
        }
    }
}

/// One post-LN BERT layer with its weights as plain vectors.
pub(super) struct CpuBertLayer {
    qkv: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
    heads: usize,
    head_dim: usize,
}

impl CpuBertLayer {
    /// `vb` points at `encoder.layer.N`.
    pub(super) fn load(vb: VarBuilder, cfg: &BertConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let attention = vb.pp("attention");
        let own = attention.pp("self");
        let qkv = Dense::stack(vec![
            Dense::load(&own.pp("query"), h, h)?,
            Dense::load(&own.pp("key"), h, h)?,
            Dense::load(&own.pp("value"), h, h)?,
        ]);
        Ok(Self {
            qkv,
            attention_out: Dense::load(&attention.pp("output").pp("dense"), h, h)?,
            attention_norm: Norm::load(
                &attention.pp("output").pp("LayerNorm"),
                h,
                cfg.layer_norm_eps,
            )?,
            intermediate: Dense::load(
                &vb.pp("intermediate").pp("dense"),
                h,
                cfg.intermediate_size,
            )?,
            output: Dense::load(&vb.pp("output").pp("dense"), cfg.intermediate_size, h)?,
            output_norm: Norm::load(&vb.pp("output").pp("LayerNorm"), h, cfg.layer_norm_eps)?,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
        })
    }

    /// `xs`: (texts × width × hidden) row-major; `lengths[i]`: real tokens of text i (the rest of
    /// its `width` rows are padding, which no real token attends to).
    pub(super) fn forward(
        &self,
        xs: &[f32],
        lengths: &[usize],
        width: usize,
        threads: usize,
    ) -> Vec<f32> {
        let qkv = self.qkv.forward(xs, None, threads);
        let context = self.attention(&qkv, lengths, width, threads);
        let mut attended = self.attention_out.forward(&context, Some(xs), threads);
        self.attention_norm.apply(&mut attended, threads);
        let mut inner = self.intermediate.forward(&attended, None, threads);
        if threads > 1 {
            let per_task = inner.len().div_ceil(threads).max(1);
            inner.par_chunks_mut(per_task).for_each(gelu_erf_in_place);
        } else {
            gelu_erf_in_place(&mut inner);
        }
        let mut out = self.output.forward(&inner, Some(&attended), threads);
        self.output_norm.apply(&mut out, threads);
        out
    }

    /// Multi-head self-attention over the stacked projections `qkv` (texts × width × 3·hidden),
    /// returning the concatenated heads (texts × width × hidden).
    fn attention(&self, qkv: &[f32], lengths: &[usize], width: usize, threads: usize) -> Vec<f32> {
        let hidden = self.heads * self.head_dim;
        let qkv_row = 3 * hidden;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let mut out = vec![0f32; lengths.len() * width * hidden];
        let text = |(text_out, (i, &len)): (&mut [f32], (usize, &usize))| {
            let len = len.clamp(1, width);
            let base = i * width * qkv_row;
            let mut scores = vec![0f32; width * len];
            for head in 0..self.heads {
                let column = head * self.head_dim;
                // SAFETY: every row index is < width and every column < 3·hidden within this
                // text's block of `qkv`; `scores` is width × len; `text_out` is width × hidden.
                unsafe {
                    matmul(
                        width,
                        len,
                        self.head_dim,
                        scores.as_mut_ptr(),
                        len,
                        false,
                        View {
                            ptr: qkv.as_ptr().add(base + column),
                            row_stride: qkv_row,
                            col_stride: 1,
                        },
                        // keyᵀ: element (d, token j) is key[j][d].
                        View {
                            ptr: qkv.as_ptr().add(base + hidden + column),
                            row_stride: 1,
                            col_stride: qkv_row,
                        },
                        Parallelism::None,
                    );
                }
                softmax_rows_in_place(&mut scores, len, scale);
                // SAFETY: as above; values are the first `len` rows of this text's block.
                unsafe {
                    matmul(
                        width,
                        self.head_dim,
                        len,
                        text_out.as_mut_ptr().add(column),
                        hidden,
                        false,
                        View {
                            ptr: scores.as_ptr(),
                            row_stride: len,
                            col_stride: 1,
                        },
                        View {
                            ptr: qkv.as_ptr().add(base + 2 * hidden + column),
                            row_stride: qkv_row,
                            col_stride: 1,
                        },
                        Parallelism::None,
                    );
                }
            }
        };
        if threads > 1 {
            out.par_chunks_mut(width * hidden)
                .zip(lengths.par_iter().enumerate())
                .for_each(text);
        } else {
            out.chunks_mut(width * hidden)
                .zip(lengths.iter().enumerate())
                .for_each(text);
        }
        out
    }
}
