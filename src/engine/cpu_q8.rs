//! Single-row products (decoding) against 8-bit weights with AVX-512 VNNI.
//!
//! Why our own: with `dense-q8` weights, decoding multiplies one activation row by Q8_0 weights
//! through candle's kernel, which is AVX2 only and converts each block's f16 scale on every use.
//! `perf` of SmolLM2 decoding: that dot product 43%, quantizing activations 7%, f16 → f32 scale
//! conversion 6%. On CPUs with AVX-512 VNNI (`vpdpbusd`: 64 int8 products per instruction) this
//! file does the same Q8_0 arithmetic (per-32 block f16 scales, activations quantized per block
//! as ggml does) with the scales widened to f32 once, at load. Elsewhere the caller keeps candle's kernel.

use super::cpu_kernels::{parallel_ranges, SharedOut};

/// Values per quantization block (ggml's Q8_0).
const BLOCK: usize = 32;

/// A weight matrix `[rows, cols]` quantized to Q8_0: per row, `cols / 32` blocks of 32 int8 values
/// with one f32 scale each.
#[derive(Debug, Clone)]
pub(crate) struct Q8Rows {
    rows: usize,
    cols: usize,
    scales: Vec<f32>,
    quants: Vec<i8>,
}

/// Whether this CPU runs the VNNI kernel.
pub(crate) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// ggml's Q8_0 rounding of one block: scale `max|x| / 127`, values `round(x / scale)`, and the
/// scale kept as f16 (widened once here, not on every use), so the products are exactly those of
/// candle's and ggml's Q8_0 kernels up to the order of the float additions.
fn quantize_block(xs: &[f32], quants: &mut [i8]) -> f32 {
    let max = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    for (q, &x) in quants.iter_mut().zip(xs) {
        *q = (x * inverse).round() as i8;
    }
    half::f16::from_f32(scale).to_f32()
}

impl Q8Rows {
    /// Quantizes a row-major f32 matrix; `None` unless `cols` is a multiple of 32.
    pub(crate) fn quantize(values: &[f32], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) || values.len() != rows * cols {
            return None;
        }
        let mut quants = vec![0i8; rows * cols];
        let scales = values
            .chunks_exact(BLOCK)
            .zip(quants.chunks_exact_mut(BLOCK))
            .map(|(xs, qs)| quantize_block(xs, qs))
            .collect();
        Some(Self {
            rows,
            cols,
            scales,
            quants,
        })
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// `weights · x` for one activation row `x` (`cols` values), or `None` when the CPU lacks
    /// AVX-512 VNNI.
    pub(crate) fn matvec(&self, x: &[f32]) -> Option<Vec<f32>> {
        if !supported() || x.len() != self.cols {
            return None;
        }
        let blocks = self.cols / BLOCK;
        let mut x_quants = vec![0i8; self.cols];
        let x_scales: Vec<f32> = x
            .chunks_exact(BLOCK)
            .zip(x_quants.chunks_exact_mut(BLOCK))
            .map(|(xs, qs)| quantize_block(xs, qs))
            .collect();
        let mut out = vec![0f32; self.rows];
        let shared = SharedOut(out.as_mut_ptr());
        parallel_ranges(self.rows, |rows| {
            for r in rows {
                let quants = &self.quants[r * self.cols..][..self.cols];
                let scales = &self.scales[r * blocks..][..blocks];
                // SAFETY: `supported()` checked the features; all slices hold `blocks` blocks;
                // each row index is written by one task only.
                unsafe { *shared.ptr().add(r) = dot_vnni(quants, scales, &x_quants, &x_scales) };
            }
        });
        Some(out)
    }
}

/// Σ over blocks of `w_scale · x_scale · Σ w_i x_i`, two blocks per 512-bit step.
///
/// # Safety
/// The CPU must support avx512f, avx512bw, avx512dq and avx512vnni; `w` and `x` hold `scales.len()` blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vnni")]
unsafe fn dot_vnni(w: &[i8], w_scales: &[f32], x: &[i8], x_scales: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let blocks = w_scales.len();
    let mut acc = _mm512_setzero_ps();
    let mut b = 0;
    while b + 2 <= blocks {
        // SAFETY: blocks b and b + 1 (64 bytes) lie inside both slices.
        let (wv, xv) = unsafe {
            (
                _mm512_loadu_si512(w.as_ptr().add(b * BLOCK) as *const _),
                _mm512_loadu_si512(x.as_ptr().add(b * BLOCK) as *const _),
            )
        };
        // vpdpbusd multiplies unsigned by signed bytes: |w| times x with w's sign moved onto x.
        let negative = _mm512_movepi8_mask(wv);
        let x_signed = _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv);
        let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wv), x_signed);
        // Lanes 0-7 hold block b's partial sums, lanes 8-15 block b + 1's.
        let scale = _mm512_insertf32x8::<1>(
            _mm512_set1_ps(w_scales[b] * x_scales[b]),
            _mm256_set1_ps(w_scales[b + 1] * x_scales[b + 1]),
        );
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc);
        b += 2;
    }
    let mut total = _mm512_reduce_add_ps(acc);
    for b in b..blocks {
        let sum: i32 = w[b * BLOCK..][..BLOCK]
            .iter()
            .zip(&x[b * BLOCK..][..BLOCK])
            .map(|(&a, &c)| a as i32 * c as i32)
            .sum();
        total += w_scales[b] * x_scales[b] * sum as f32;
    }
    total
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot_vnni(_: &[i8], _: &[f32], _: &[i8], _: &[f32]) -> f32 {
    unreachable!("supported() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_matches_the_quantized_arithmetic_done_directly() {
        let (rows, cols) = (200, 96); // 3 blocks per row: exercises the odd-block tail
        let weights: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0)
            .collect();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let q = Q8Rows::quantize(&weights, rows, cols).unwrap();
        let Some(got) = q.matvec(&x) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let mut xq = vec![0i8; cols];
        let xs: Vec<f32> = x
            .chunks_exact(BLOCK)
            .zip(xq.chunks_exact_mut(BLOCK))
            .map(|(v, qs)| quantize_block(v, qs))
            .collect();
        for r in 0..rows {
            let expected: f64 = (0..cols / BLOCK)
                .map(|b| {
                    let s: i32 = (0..BLOCK)
                        .map(|i| {
                            q.quants[r * cols + b * BLOCK + i] as i32 * xq[b * BLOCK + i] as i32
                        })
                        .sum();
                    q.scales[r * cols / BLOCK + b] as f64 * xs[b] as f64 * s as f64
                })
                .sum();
            assert!((got[r] as f64 - expected).abs() < 1e-4, "row {r}");
            // And within the rounding bound of the unquantized product: each value is off by at
            // most half its block's scale.
            let w_row = &weights[r * cols..][..cols];
            let exact: f64 = w_row.iter().zip(&x).map(|(a, b)| (a * b) as f64).sum();
            let bound: f64 = (0..cols)
                .map(|i| {
                    let (dw, dx) = (
                        q.scales[r * cols / BLOCK + i / BLOCK] as f64 / 2.0,
                        xs[i / BLOCK] as f64 / 2.0,
                    );
                    w_row[i].abs() as f64 * dx + x[i].abs() as f64 * dw + dw * dx
                })
                .sum();
            assert!((got[r] as f64 - exact).abs() <= bound + 1e-5, "row {r}");
        }
    }

    #[test]
    fn only_whole_blocks_are_accepted() {
        assert!(Q8Rows::quantize(&[0.0; 40], 1, 40).is_none());
        assert!(Q8Rows::quantize(&[0.0; 64], 2, 32).is_some());
    }
}
