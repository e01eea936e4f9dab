//! Products with Q8_0 weights (as stored in GGUF, or re-quantized from dense ones) with AVX-512
//! VNNI (layout and driver in `cpu::matmul`), and the 8-bit activation quantization the 32-value
//! block types share.
//!
//! Why our own: candle's Q8_0 kernel is AVX2 only and converts each block's f16 scale on every
//! use (`perf` of SmolLM2 decoding: that dot product 43%, quantizing activations 7%, f16 → f32
//! conversion 6%). This file does ggml's Q8_0 arithmetic (per-32 block f16 scales, activations
//! quantized per block as ggml does) with `vpdpbusd`. That instruction multiplies unsigned by
//! signed bytes, so the weights are stored as `w + 128` and each activation block starts its sums
//! at `-128 ·` its sum: every lane still ends with the exact `Σ w · x`.

use super::matmul::{
    f16x16, interleave, Activations, AlignedBytes, RowMut, StoredRows, Units, LANES,
};

/// Values per quantization block (ggml's Q8_0, Q8_1, Q4_1).
pub(crate) const BLOCK: usize = 32;
/// Bytes of one GGUF `block_q8_0`: f16 `d`, 32 int8 values.
const GGUF_BLOCK_BYTES: usize = 34;

/// Software prefetch distance in the pair stream: 4 KB ahead.
const PF: usize = 4096;

/// A Q8_0 weight matrix `[rows, cols]` in the [`Units`] layout: per block 32 bytes `w + 128`
/// (vector `k` of a unit: values `4k..4k + 4` of each block), and per unit the 16 f16 `d` (zero
/// past the row's end).
#[derive(Debug, Clone)]
pub(crate) struct Q8Rows {
    rows: usize,
    cols: usize,
    units: Units,
    quants: AlignedBytes,
    d: Vec<u16>,
}

/// Whether this CPU runs the VNNI kernels (here and in `cpu::q4`).
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

impl Q8Rows {
    /// Quantizes a row-major f32 matrix as ggml's `quantize_row_q8_0` does; `None` unless `cols`
    /// is a multiple of 32.
    pub(crate) fn quantize(values: &[f32], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) || values.len() != rows.checked_mul(cols)? {
            return None;
        }
        let mut bytes = Vec::with_capacity(values.len() / BLOCK * GGUF_BLOCK_BYTES);
        let mut quants = [0i8; BLOCK];
        for xs in values.chunks_exact(BLOCK) {
            let d = half::f16::from_f32(quantize_block_q8(xs, &mut quants));
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend(quants.iter().map(|&q| q as u8));
        }
        Self::from_gguf_blocks(&bytes, rows, cols)
    }

    /// GGUF Q8_0 blocks as stored (`rows · cols / 32` blocks of 34 bytes), reordered; `None`
    /// unless `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if !cols.is_multiple_of(BLOCK) {
            return None;
        }
        let per_row = cols / BLOCK;
        let units = Units::new(rows, per_row)?;
        if bytes.len() != rows * per_row * GGUF_BLOCK_BYTES {
            return None;
        }
        let mut quants = AlignedBytes::zeroed(units.packed_len(BLOCK));
        let mut d = vec![0u16; LANES * units.count()];
        let dst = quants.bytes_mut();
        for (i, block) in bytes.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
            let (r, b) = (i / per_row, i % per_row);
            let (u, j) = (b / LANES, b % LANES);
            let (at, lanes) = (units.offset(r, u, BLOCK), units.lanes(u));
            d[LANES * units.index(r, u) + j] = u16::from_le_bytes([block[0], block[1]]);
            for (k, four) in block[2..].chunks_exact(4).enumerate() {
                for (o, &q) in dst[at + 4 * (k * lanes + j)..][..4].iter_mut().zip(four) {
                    *o = q ^ 0x80;
                }
            }
        }
        Some(Self {
            rows,
            cols,
            units,
            quants,
            d,
        })
    }
}

/// Q8_0 activations as llama.cpp's `quantize_row_q8_0` makes them: int8 values, per block the
/// f16-rounded scale, and as starting sum `-offset ·` the block's sum, for weights stored
/// `offset` above their signed value (128 for Q8_0, 16 for Q5_0).
pub(crate) fn fill_q8_0(x: &[f32], row: RowMut<'_>, offset: i32) {
    let blocks = x.len() / BLOCK;
    let mut quants = vec![0i8; x.len()];
    let mut sums = vec![0i32; blocks];
    quantize_row_q8(x, &mut quants, &mut row.scale[..blocks], Some(&mut sums));
    interleave(&quants, BLOCK, row.quants);
    for ((start, scale), sum) in row.start.iter_mut().zip(row.scale.iter_mut()).zip(sums) {
        *start = -offset * sum;
        *scale = half::f16::from_f32(*scale).to_f32();
    }
}

impl StoredRows for Q8Rows {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn quantize(&self, x: &[f32], rows: usize) -> Activations {
        Activations::new(x, rows, self.units.units(), 8, |x, row| {
            fill_q8_0(x, row, 128)
        })
    }

    unsafe fn tile<const N: usize>(
        &self,
        rows: [usize; 2],
        x: &Activations,
        first: usize,
    ) -> [[f32; 2]; N] {
        // SAFETY: as the caller promises.
        unsafe { tile(self, rows, x, first) }
    }
}

/// # Safety
/// As [`StoredRows::tile`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn tile<const N: usize>(
    w: &Q8Rows,
    rows: [usize; 2],
    x: &Activations,
    first: usize,
) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let quants = w.quants.as_ptr();
    let mut acc = [[_mm512_setzero_ps(); 2]; N];
    let pair = w.units.pair(rows);
    for u in 0..pair.count() {
        let lanes = pair.lanes(u);
        let at = pair.offsets(u, BLOCK);
        let unit = pair.indices(u);
        let mut sums = [[_mm512_setzero_si512(); 2]; N];
        // SAFETY (all loads): unit u of both rows and of the activation rows lies inside the
        // arrays; a full vector read at a short last unit stays in the allocation's slack, and
        // its extra lanes meet zero activations.
        unsafe {
            for (n, sums) in sums.iter_mut().enumerate() {
                *sums = [_mm512_loadu_si512(x.start(first + n, u).cast()); 2];
            }
            if N == 1 {
                for &at in &at {
                    for line in 0..8 {
                        _mm_prefetch::<_MM_HINT_T0>(
                            quants.wrapping_add(at + PF + 64 * line).cast(),
                        );
                    }
                }
            }
            for k in 0..8 {
                let mut q = [_mm512_setzero_si512(); 2];
                for (q, &at) in q.iter_mut().zip(&at) {
                    *q = _mm512_loadu_si512(quants.add(at + 4 * k * lanes).cast());
                }
                for (n, sums) in sums.iter_mut().enumerate() {
                    let xk = _mm512_load_si512(x.quants(first + n, u).add(64 * k).cast());
                    for s in 0..2 {
                        sums[s] = _mm512_dpbusd_epi32(sums[s], q[s], xk);
                    }
                }
            }
            let mut d = [_mm512_setzero_ps(); 2];
            for (d, &i) in d.iter_mut().zip(&unit) {
                *d = f16x16(w.d.as_ptr().add(LANES * i));
            }
            for (n, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let dx = _mm512_loadu_ps(x.scale(first + n, u));
                for s in 0..2 {
                    let scale = _mm512_mul_ps(d[s], dx);
                    acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s]), scale, acc[s]);
                }
            }
        }
    }
    super::matmul::reduce(acc)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const N: usize>(
    _: &Q8Rows,
    _: [usize; 2],
    _: &Activations,
    _: usize,
) -> [[f32; 2]; N] {
    unreachable!("supported() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::matmul::tests::independent_rows;

    /// The reference Q8_0 quantization of a row: per block the f16-rounded scale and the values.
    fn reference(xs: &[f32]) -> (Vec<f64>, Vec<i8>) {
        let mut quants = vec![0i8; xs.len()];
        let scales = xs
            .chunks_exact(BLOCK)
            .zip(quants.chunks_exact_mut(BLOCK))
            .map(|(v, q)| half::f16::from_f32(quantize_block_q8(v, q)).to_f32() as f64)
            .collect();
        (scales, quants)
    }

    #[test]
    fn matmul_matches_the_q8_0_arithmetic_row_by_row() {
        // 7 rows: pairs and a lone last row; 28 blocks: a full unit and a short one; 13
        // activation rows: whole tiles and a lone row.
        let (rows, cols, t) = (7, 896, 13);
        let weights: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0)
            .collect();
        let x: Vec<f32> = (0..t * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let q = Q8Rows::quantize(&weights, rows, cols).unwrap();
        let Some(got) = independent_rows(&q, &x, t) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        for (i, x) in x.chunks_exact(cols).enumerate() {
            let (xs, xq) = reference(x);
            for r in 0..rows {
                let w_row = &weights[r * cols..][..cols];
                let (ws, wq) = reference(w_row);
                let expected: f64 = (0..cols / BLOCK)
                    .map(|b| {
                        let s: i32 = (b * BLOCK..(b + 1) * BLOCK)
                            .map(|i| wq[i] as i32 * xq[i] as i32)
                            .sum();
                        ws[b] * xs[b] * s as f64
                    })
                    .sum();
                let got = got[i * rows + r] as f64;
                assert!((got - expected).abs() < 1e-4, "row {i}, {r}");
                // And within the rounding bound of the unquantized product: each value is off
                // by at most half its block's scale.
                let exact: f64 = w_row.iter().zip(x).map(|(a, b)| (a * b) as f64).sum();
                let bound: f64 = (0..cols)
                    .map(|k| {
                        let (dw, dx) = (ws[k / BLOCK] / 2.0, xs[k / BLOCK] / 2.0);
                        w_row[k].abs() as f64 * dx + x[k].abs() as f64 * dw + dw * dx
                    })
                    .sum();
                assert!((got - exact).abs() <= bound + 1e-5, "row {i}, {r}");
            }
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
        let weights: Vec<f32> = (0..3 * 64)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let direct = Q8Rows::quantize(&weights, 3, 64).unwrap();
        let mut bytes = Vec::new();
        for xs in weights.chunks_exact(BLOCK) {
            let (d, q) = reference(xs);
            bytes.extend_from_slice(&half::f16::from_f64(d[0]).to_le_bytes());
            bytes.extend(q.iter().map(|&q| q as u8));
        }
        let stored = Q8Rows::from_gguf_blocks(&bytes, 3, 64).unwrap();
        let len = direct.units.packed_len(BLOCK);
        assert_eq!(stored.d, direct.d);
        assert_eq!(stored.quants.bytes()[..len], direct.quants.bytes()[..len]);
        // Stored as w + 128: block 0's first value.
        assert_eq!(
            stored.quants.bytes()[0],
            (bytes[2] as i8 as i32 + 128) as u8
        );
        assert!(Q8Rows::from_gguf_blocks(&bytes[1..], 3, 64).is_none());
    }

    #[test]
    fn only_whole_blocks_are_accepted() {
        assert!(Q8Rows::quantize(&[0.0; 40], 1, 40).is_none());
        assert!(Q8Rows::quantize(&[0.0; 64], 2, 32).is_some());
        assert!(Q8Rows::quantize(&[0.0; 64], 3, 32).is_none());
    }
}
