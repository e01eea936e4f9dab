//! Single-row products (decoding) against 8-bit weights with AVX-512 VNNI.
//!
//! Why our own: with `dense-q8` weights, decoding multiplies one activation row by Q8_0 weights
//! through candle's kernel, which is AVX2 only and converts each block's f16 scale on every use.
//! `perf` of SmolLM2 decoding: that dot product 43%, quantizing activations 7%, f16 → f32 scale
//! conversion 6%. On CPUs with AVX-512 VNNI (`vpdpbusd`: 64 int8 products per instruction) this
//! file does the same Q8_0 arithmetic (per-32 block f16 scales, activations quantized per block
//! as ggml does) with the scales widened to f32 once, at load. Elsewhere the caller keeps candle's kernel.

use super::cpu_kernels::{parallel_ranges, SharedOut};

/// Values per quantization block (ggml's Q8_0, Q8_1, Q4_1).
pub(crate) const BLOCK: usize = 32;
/// Bytes of one GGUF `block_q8_0`: f16 `d`, 32 int8 values.
const GGUF_BLOCK_BYTES: usize = 34;

/// A weight matrix `[rows, cols]` quantized to Q8_0: per row, `cols / 32` blocks of 32 int8 values
/// with one f32 scale each.
#[derive(Debug, Clone)]
pub(crate) struct Q8Rows {
    rows: usize,
    cols: usize,
    scales: Vec<f32>,
    quants: Vec<i8>,
}

/// Whether this CPU runs the VNNI kernels (here and in `cpu_q4`).
pub(crate) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// ggml's 8-bit rounding of one block (Q8_0 and Q8_1): scale `d = max|x| / 127`, values
/// `x / d` rounded to nearest, ties to even (as ggml's x86 code rounds). Returns `d` unrounded;
/// ggml stores it as f16.
pub(crate) fn quantize_block_q8(xs: &[f32], quants: &mut [i8]) -> f32 {
    let max = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    for (q, &x) in quants.iter_mut().zip(xs) {
        *q = (x * inverse).round_ties_even() as i8;
    }
    scale
}

/// [`quantize_block_q8`] over a row of whole blocks: `scales` (unrounded) and, when asked (Q8_1),
/// the sum of each block's quantized values; vectorized where the VNNI kernels run.
pub(crate) fn quantize_row_q8(
    x: &[f32],
    quants: &mut [i8],
    scales: &mut [f32],
    mut sums: Option<&mut [i32]>,
) {
    let blocks = x.len() / BLOCK;
    assert!(
        x.len() == blocks * BLOCK
            && quants.len() == x.len()
            && scales.len() == blocks
            && sums.as_ref().is_none_or(|s| s.len() == blocks),
        "quantize_row_q8: mismatched lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if supported() {
        // SAFETY: `supported()` checked the features; the lengths were checked above.
        unsafe { quantize_row_avx512(x, quants, scales, sums) };
        return;
    }
    for (b, (xs, qs)) in x
        .chunks_exact(BLOCK)
        .zip(quants.chunks_exact_mut(BLOCK))
        .enumerate()
    {
        scales[b] = quantize_block_q8(xs, qs);
        if let Some(sums) = sums.as_deref_mut() {
            sums[b] = qs.iter().map(|&q| q as i32).sum();
        }
    }
}

/// # Safety
/// The CPU must have the features [`supported`] checks; lengths as [`quantize_row_q8`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn quantize_row_avx512(
    x: &[f32],
    quants: &mut [i8],
    scales: &mut [f32],
    mut sums: Option<&mut [i32]>,
) {
    use std::arch::x86_64::*;
    for b in 0..scales.len() {
        // SAFETY: block b (32 values) lies inside `x` and `quants`.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_ps(x.as_ptr().add(b * BLOCK)),
                _mm512_loadu_ps(x.as_ptr().add(b * BLOCK + 16)),
            )
        };
        let max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        let scale = max / 127.0;
        let inverse = _mm512_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
        // The default rounding mode: nearest, ties to even.
        let q_lo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));
        let q_hi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
        // SAFETY: as above.
        unsafe {
            _mm_storeu_si128(
                quants.as_mut_ptr().add(b * BLOCK) as *mut _,
                _mm512_cvtsepi32_epi8(q_lo),
            );
            _mm_storeu_si128(
                quants.as_mut_ptr().add(b * BLOCK + 16) as *mut _,
                _mm512_cvtsepi32_epi8(q_hi),
            );
        }
        scales[b] = scale;
        if let Some(sums) = sums.as_deref_mut() {
            sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q_lo, q_hi));
        }
    }
}

/// [`quantize_block_q8`] with the scale rounded to f16 (widened once here, not on every use), so
/// the products are exactly those of ggml's Q8_0 kernels up to the order of the float additions.
fn quantize_block(xs: &[f32], quants: &mut [i8]) -> f32 {
    half::f16::from_f32(quantize_block_q8(xs, quants)).to_f32()
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

    /// GGUF Q8_0 blocks as stored (`rows · cols / 32` blocks of 34 bytes), without the round
    /// trip through f32; `None` unless `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0
            || !cols.is_multiple_of(BLOCK)
            || bytes.len() != rows * cols / BLOCK * GGUF_BLOCK_BYTES
        {
            return None;
        }
        let mut scales = Vec::with_capacity(rows * cols / BLOCK);
        let mut quants = Vec::with_capacity(rows * cols);
        for block in bytes.chunks_exact(GGUF_BLOCK_BYTES) {
            scales.push(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
            quants.extend(block[2..].iter().map(|&b| b as i8));
        }
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
        let mut x_scales = vec![0f32; blocks];
        quantize_row_q8(x, &mut x_quants, &mut x_scales, None);
        for scale in &mut x_scales {
            *scale = half::f16::from_f32(*scale).to_f32();
        }
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
/// The CPU must have the features [`supported`] checks; `w` and `x` hold `scales.len()` blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
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
    fn row_quantization_matches_the_scalar_rounding_including_ties() {
        // Ties: with max 127 the scale is 1, so x.5 values round to even.
        let mut x: Vec<f32> = (0..96)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.731)
            .collect();
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.5;
        x[64..96].fill(0.0); // an all-zero block: scale 0, no division by zero
        let (mut quants, mut scales, mut sums) = (vec![0i8; 96], vec![0f32; 3], vec![0i32; 3]);
        quantize_row_q8(&x, &mut quants, &mut scales, Some(&mut sums));
        let mut expected = [0i8; BLOCK];
        for b in 0..3 {
            let scale = quantize_block_q8(&x[b * BLOCK..][..BLOCK], &mut expected);
            assert_eq!(scales[b].to_bits(), scale.to_bits(), "block {b}");
            assert_eq!(&quants[b * BLOCK..][..BLOCK], &expected, "block {b}");
            assert_eq!(sums[b], expected.iter().map(|&q| q as i32).sum::<i32>());
        }
        assert_eq!(&quants[..4], &[127, 2, -4, 0]);
    }

    #[test]
    fn gguf_q8_0_blocks_are_taken_as_stored() {
        let weights: Vec<f32> = (0..2 * 64)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let direct = Q8Rows::quantize(&weights, 2, 64).unwrap();
        let mut bytes = Vec::new();
        for (b, scale) in direct.scales.iter().enumerate() {
            bytes.extend_from_slice(&half::f16::from_f32(*scale).to_le_bytes());
            bytes.extend(direct.quants[b * BLOCK..][..BLOCK].iter().map(|&q| q as u8));
        }
        let stored = Q8Rows::from_gguf_blocks(&bytes, 2, 64).unwrap();
        assert_eq!(stored.scales, direct.scales);
        assert_eq!(stored.quants, direct.quants);
        assert!(Q8Rows::from_gguf_blocks(&bytes[1..], 2, 64).is_none());
    }

    #[test]
    fn only_whole_blocks_are_accepted() {
        assert!(Q8Rows::quantize(&[0.0; 40], 1, 40).is_none());
        assert!(Q8Rows::quantize(&[0.0; 64], 2, 32).is_some());
    }
}
