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
//! The element-wise loops are plain Rust, compiled three times (AVX-512, AVX2+FMA, baseline) and
//! picked at run time, so a portable binary still gets wide vectors where the CPU has them.

use candle_nn::VarBuilder;
use gemm::Parallelism;
use rayon::prelude::*;

use super::bert::{BertConfig, Result};

/// Runs `$body` (an expression using only `#[inline(always)]` helpers) compiled for the widest
/// vector extension the CPU supports.
macro_rules! multiversion {
    (fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn portable($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) { portable($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) { portable($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            portable($($arg),*)
        }
    };
}

/// Lanes of the independent accumulators in reductions: wide enough for one AVX-512 register, and
/// a fixed summation order whatever the vector width, so results do not depend on the CPU.
const LANES: usize = 16;

/// e^x for x in f32's range, to within a few ulp (Cephes' `expf` polynomial after reducing by
/// ln 2), written without branches so loops over it vectorize. Below -87 it returns ~1e-38
/// instead of a denormal or 0: softmax and GELU only add it to numbers near 1.
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds x·log2(e) to an integer n and leaves n in the low mantissa bits, so
    // 2ⁿ is built with integer ops (`n as i32` is a saturating cast that does not vectorize).
    const ROUNDER: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    e * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// erf(x) as a rational function of x on [-4, 4] (beyond it erf is ±1 in f32): the minimax
/// fit Eigen and XLA use for f32, a few ulp from the exact value, with no exp and no branch.
#[inline(always)]
fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329e-3;
    q = q * x2 - 1.426_474e-2;
    x * p / q
}

multiversion! {
    fn gelu_erf_in_place(xs: &mut [f32]) {
        for x in xs.iter_mut() {
            *x = 0.5 * *x * (1.0 + erf_approx(*x * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

multiversion! {
    fn softmax_rows_in_place(scores: &mut [f32], row_len: usize, scale: f32) {
        for row in scores.chunks_exact_mut(row_len) {
            let mut max = [f32::NEG_INFINITY; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (m, &x) in max.iter_mut().zip(chunk) {
                    *m = m.max(x);
                }
            }
            let max = chunks.remainder().iter().fold(
                max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
                |a, &b| a.max(b),
            );
            for x in row.iter_mut() {
                *x = exp_approx((*x - max) * scale);
            }
            let sum = sum_lanes(row);
            let inverse = 1.0 / sum;
            for x in row.iter_mut() {
                *x *= inverse;
            }
        }
    }
}

multiversion! {
    fn layer_norm_rows_in_place(xs: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len();
        for row in xs.chunks_exact_mut(width) {
            let mean = sum_lanes(row) / width as f32;
            for x in row.iter_mut() {
                *x -= mean;
            }
            let mut squares = [0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (s, &x) in squares.iter_mut().zip(chunk) {
                    *s += x * x;
                }
            }
            let variance = (squares.iter().sum::<f32>()
                + chunks.remainder().iter().map(|x| x * x).sum::<f32>())
                / width as f32;
            let inverse = 1.0 / (variance + eps).sqrt();
            for ((x, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
                *x = *x * inverse * w + b;
            }
        }
    }
}

/// Sum with [`LANES`] independent accumulators (vectorizable, fixed order).
#[inline(always)]
fn sum_lanes(xs: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// A row-major matrix view: element (i, j) sits at `ptr + i * row_stride + j * col_stride`.
#[derive(Clone, Copy)]
struct View {
    ptr: *const f32,
    row_stride: usize,
    col_stride: usize,
}

/// `dst (m × n, rows dst_row_stride apart) (+)= lhs (m × k) · rhs (k × n)`; with `accumulate` the
/// product is added to what `dst` holds.
///
/// # Safety
/// Every element the views and `dst` address must lie inside live allocations, and `dst` must not
/// overlap the inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_row_stride: usize,
    accumulate: bool,
    lhs: View,
    rhs: View,
    parallelism: Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_row_stride as isize,
        accumulate,
        lhs.ptr,
        lhs.col_stride as isize,
        lhs.row_stride as isize,
        rhs.ptr,
        rhs.col_stride as isize,
        rhs.row_stride as isize,
        1.0,
        1.0,
        false,
        false,
        false,
        parallelism,
    )
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_approx_is_within_a_few_ulp_of_libm() {
        let mut worst = 0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let relative = ((exp_approx(x) - x.exp()) / x.exp()).abs();
            worst = worst.max(relative);
            x += 0.013;
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp_approx(0.0), 1.0);
        assert!(exp_approx(-1e4) < 1e-37 && exp_approx(-1e4) >= 0.0);
    }

    #[test]
    fn erf_approx_is_within_a_few_ulp() {
        let mut worst = 0f64;
        let mut x = -6.0f32;
        while x < 6.0 {
            let exact = candle_core::cpu::erf::erf_f64(x as f64);
            worst = worst.max((erf_approx(x) as f64 - exact).abs());
            x += 0.001;
        }
        assert!(worst < 5e-7, "worst absolute error {worst}");
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_the_direct_formula() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 23) as f32 * 0.37 - 4.0)
            .collect();
        let mut scores: Vec<f32> = row.iter().chain(row.iter().rev()).copied().collect();
        softmax_rows_in_place(&mut scores, row.len(), 0.5);
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let denominator: f64 = row.iter().map(|&x| (((x - max) * 0.5) as f64).exp()).sum();
        for (j, &x) in row.iter().enumerate() {
            let expected = (((x - max) * 0.5) as f64).exp() / denominator;
            assert!((scores[j] as f64 - expected).abs() < 1e-6);
            assert!((scores[2 * row.len() - 1 - j] as f64 - expected).abs() < 1e-6);
        }
    }
}
