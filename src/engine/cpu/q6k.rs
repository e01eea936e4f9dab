//! Products with Q6_K weights as stored in GGUF, with AVX-512 VNNI (layout and driver in
//! `cpu::matmul`).
//!
//! Why our own: candle has no AVX-512 VNNI kernel for the k-quants, so `dense-q8` decoded these
//! tensors through a Q8_0 copy of the dequantized weights (8.5 bits per weight streamed per token
//! where the file holds 6.56, and logits that differ from llama.cpp's), and prefill multiplied a
//! dense f32 copy. This file multiplies the stored blocks with llama.cpp's arithmetic:
//! activations quantized to Q8_K, per 16-value sub-block `j` the exact integer
//! `Σ (q6 - 32) · q8` times `d · scale_j · d_x`.
//!
//! The kernel's lanes are the 16 sub-blocks of a super-block (a unit). Bytes are reordered at
//! load, never re-quantized: byte `4j + i` of packed vector `p` (0, 1) holds the low 4 bits of
//! value `4p + i` of sub-block `j` (low nibble) and of value `8 + 4p + i` (high nibble); byte
//! `4j + i` of the top-bit vector holds at bits `2k..2k + 2` the top bits of value `4k + i`.

use super::matmul::{interleave, Activations, AlignedBytes, RowMut, StoredRows, Units, LANES};
use super::qk::{quantize_row_q8k, QK_K};

/// Bytes of one GGUF `block_q6_K`: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8
/// scales, f16 `d`.
const GGUF_BLOCK_BYTES: usize = 210;
/// Values per sub-block (lane).
const SUB: usize = 16;
/// Software prefetch distance in the pair stream: 4 KB of low nibbles ahead.
const PF: usize = 4096;

/// A Q6_K weight matrix `[rows, cols]` in the [`Units`] layout: per unit (super-block) 2 packed
/// vectors of low nibbles, one of top bits, the 16 int8 scales and the f16 `d`.
#[derive(Debug, Clone)]
pub(crate) struct Q6KRows {
    rows: usize,
    cols: usize,
    units: Units,
    low: AlignedBytes,
    high: AlignedBytes,
    scales: Vec<[i8; LANES]>,
    d: Vec<u16>,
}

/// Value `v` (0..256) of a GGUF Q6_K block as stored (0..64, ggml subtracts 32).
fn q6k_value(block: &[u8], v: usize) -> u8 {
    let (half, g, l) = (v / 128, (v % 128) / 32, v % 32);
    let ql = block[64 * half + l + 32 * (g % 2)];
    let low = if g < 2 { ql & 0x0F } else { ql >> 4 };
    let top = (block[128 + 32 * half + l] >> (2 * g)) & 3;
    low | (top << 4)
}

impl Q6KRows {
    /// Reorders GGUF Q6_K blocks (`rows · cols / 256` blocks of 210 bytes); `None` unless `cols`
    /// is a multiple of 256 and `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if !cols.is_multiple_of(QK_K) {
            return None;
        }
        let per_row = cols / QK_K;
        let units = Units::new(rows, cols / SUB)?;
        if bytes.len() != rows * per_row * GGUF_BLOCK_BYTES {
            return None;
        }
        let mut low = AlignedBytes::zeroed(units.packed_len(SUB / 2));
        let mut high = AlignedBytes::zeroed(units.packed_len(SUB / 4));
        let mut scales = vec![[0i8; LANES]; units.count()];
        let mut d = vec![0u16; units.count()];
        let (low_dst, high_dst) = (low.bytes_mut(), high.bytes_mut());
        for (i, block) in bytes.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
            let (r, u) = (i / per_row, i % per_row);
            let unit = units.index(r, u);
            let (at_low, at_high) = (units.offset(r, u, SUB / 2), units.offset(r, u, SUB / 4));
            for (s, &byte) in scales[unit].iter_mut().zip(&block[192..208]) {
                *s = byte as i8;
            }
            d[unit] = u16::from_le_bytes([block[208], block[209]]);
            for j in 0..LANES {
                for e in 0..4 {
                    let value = |k: usize| q6k_value(block, SUB * j + 4 * k + e);
                    let at = 4 * j + e;
                    low_dst[at_low + at] = (value(0) & 0x0F) | (value(2) << 4);
                    low_dst[at_low + 64 + at] = (value(1) & 0x0F) | (value(3) << 4);
                    high_dst[at_high + at] =
                        (0..4).fold(0, |bits, k| bits | (value(k) >> 4) << (2 * k));
                }
            }
        }
        Some(Self {
            rows,
            cols,
            units,
            low,
            high,
            scales,
            d,
        })
    }
}

/// Q8_K activations for 16-value lanes: the super-block's scale `d_x`, and as starting sum
/// `-32 ·` the lane's sum, so that the kernel, which multiplies the unsigned q6 (0..63), ends
/// with ggml's `Σ (q6 - 32) · q8` in every lane.
fn fill_q8k_16(x: &[f32], row: RowMut<'_>) {
    let blocks = x.len() / QK_K;
    let mut quants = vec![0i8; x.len()];
    let mut d = vec![0f32; blocks];
    let mut bsums = vec![0i16; x.len() / SUB];
    quantize_row_q8k(x, &mut quants, &mut d, &mut bsums);
    interleave(&quants, SUB, row.quants);
    for (j, &sum) in bsums.iter().enumerate() {
        row.start[j] = -32 * sum as i32;
        row.scale[j] = d[j / LANES];
    }
}

impl StoredRows for Q6KRows {
    const ROWS: usize = 4;

    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn quantize(&self, x: &[f32], rows: usize) -> Activations {
        Activations::new(x, rows, self.units.units(), 4, fill_q8k_16)
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

/// `ternarylogic` immediate for `(a & c) | b`, from the truth tables a = 0xF0, b = 0xCC, c = 0xAA.
#[cfg(target_arch = "x86_64")]
const A_AND_C_OR_B: i32 = (0xF0 & 0xAA) | 0xCC;

/// # Safety
/// As [`StoredRows::tile`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn tile<const N: usize>(
    w: &Q6KRows,
    rows: [usize; 2],
    x: &Activations,
    first: usize,
) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let low4 = _mm512_set1_epi8(0x0F);
    let bits45 = _mm512_set1_epi8(0x30);
    let (low, high) = (w.low.as_ptr(), w.high.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 2]; N];
    let pair = w.units.pair(rows);
    for u in 0..pair.count() {
        let at = pair.offsets(u, SUB / 2);
        let at_high = pair.offsets(u, SUB / 4);
        let unit = pair.indices(u);
        let mut sums = [[_mm512_setzero_si512(); 2]; N];
        // SAFETY (all loads): unit u of both rows and of the activation rows lies inside the
        // arrays (units are always whole: rows are whole super-blocks).
        unsafe {
            for (n, sums) in sums.iter_mut().enumerate() {
                *sums = [_mm512_loadu_si512(x.start(first + n, u).cast()); 2];
            }
            if N == 1 {
                for s in 0..2 {
                    _mm_prefetch::<_MM_HINT_T0>(low.wrapping_add(at[s] + PF).cast());
                    _mm_prefetch::<_MM_HINT_T0>(low.wrapping_add(at[s] + PF + 64).cast());
                    _mm_prefetch::<_MM_HINT_T0>(high.wrapping_add(at_high[s] + PF / 2).cast());
                }
            }
            let (mut v, mut top) = (
                [[_mm512_setzero_si512(); 2]; 2],
                [_mm512_setzero_si512(); 2],
            );
            for s in 0..2 {
                v[s][0] = _mm512_load_si512(low.add(at[s]).cast());
                v[s][1] = _mm512_load_si512(low.add(at[s] + 64).cast());
                top[s] = _mm512_load_si512(high.add(at_high[s]).cast());
            }
            for k in 0..4 {
                let mut q = [_mm512_setzero_si512(); 2];
                for s in 0..2 {
                    let nibbles = match k {
                        0 | 1 => v[s][k],
                        _ => _mm512_srli_epi16::<4>(v[s][k - 2]),
                    };
                    // Vector k takes bits 2k..2k + 2 of the top-bit bytes, moved to bits 4..6.
                    let bits = match k {
                        0 => _mm512_slli_epi16::<4>(top[s]),
                        1 => _mm512_slli_epi16::<2>(top[s]),
                        2 => top[s],
                        _ => _mm512_srli_epi16::<2>(top[s]),
                    };
                    q[s] = _mm512_ternarylogic_epi32::<A_AND_C_OR_B>(
                        nibbles,
                        _mm512_and_si512(bits, bits45),
                        low4,
                    );
                }
                for (n, sums) in sums.iter_mut().enumerate() {
                    let xk = _mm512_load_si512(x.quants(first + n, u).add(64 * k).cast());
                    for s in 0..2 {
                        sums[s] = _mm512_dpbusd_epi32(sums[s], q[s], xk);
                    }
                }
            }
            // Per lane d · scale, exact in f32 (11 by 8 bits).
            let mut scale = [_mm512_setzero_ps(); 2];
            for (scale, &i) in scale.iter_mut().zip(&unit) {
                let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(w.scales.as_ptr().add(i).cast()));
                let d = _mm512_cvtph_ps(_mm256_set1_epi16(*w.d.as_ptr().add(i) as i16));
                *scale = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), d);
            }
            for (n, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let dx = _mm512_loadu_ps(x.scale(first + n, u));
                for s in 0..2 {
                    let scale = _mm512_mul_ps(scale[s], dx);
                    acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s]), scale, acc[s]);
                }
            }
        }
    }
    super::matmul::reduce(acc)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const N: usize>(
    _: &Q6KRows,
    _: [usize; 2],
    _: &Activations,
    _: usize,
) -> [[f32; 2]; N] {
    unreachable!("supported() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::matmul::{matmul, tests::independent_rows};
    use crate::engine::cpu::qk::tests::{
        activations, check_rows, f16_at, f16_bytes, ggml_quantize_q8k, q8k_steps, Q8K,
    };
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// GGUF Q6_K blocks: random nibbles, top bits and int8 scales, a sane f16 `d`.
    fn q6k_blocks(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / QK_K {
            bytes.extend((0..208).map(|_| rng.random::<u8>()));
            bytes.extend(f16_bytes(rng.random_range(0.00005..0.0004)));
        }
        bytes
    }

    /// `ggml_vec_dot_q6_K_q8_K` (the generic C), written out, with Σ |d · lane| as above.
    fn ggml_dot_q6k(row: &[u8], y: &[Q8K]) -> (f32, f64) {
        let (mut sums, mut norm) = ([0f32; 8], 0f64);
        for (x, y) in row.chunks_exact(GGUF_BLOCK_BYTES).zip(y) {
            let (ql, qh, sc) = (&x[..128], &x[128..192], &x[192..208]);
            let mut a = [0i32; QK_K];
            for h in 0..2 {
                let (q4, qh, a) = (&ql[64 * h..], &qh[32 * h..], &mut a[128 * h..]);
                for l in 0..32 {
                    a[l] = ((q4[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    a[l + 32] = ((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    a[l + 64] = ((q4[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    a[l + 96] = ((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                }
            }
            let mut aux32 = [0i32; 8];
            for j in 0..16 {
                for l in 0..16 {
                    aux32[l % 8] += sc[j] as i8 as i32 * (y.qs[16 * j + l] as i32 * a[16 * j + l]);
                }
            }
            let d = f16_at(x, 208) * y.d;
            for l in 0..8 {
                sums[l] += d * aux32[l] as f32;
            }
            norm += d.abs() as f64 * aux32.iter().map(|&v| (v as f64).abs()).sum::<f64>();
        }
        (sums.iter().sum(), norm)
    }

    /// ggml's `dequantize_row_q6_K`, written out.
    fn dequantize_q6k(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for x in bytes.chunks_exact(GGUF_BLOCK_BYTES) {
            let d = f16_at(x, 208);
            let mut y = [0f32; QK_K];
            for n in 0..2 {
                let (ql, qh, sc) = (&x[64 * n..], &x[128 + 32 * n..], &x[192 + 8 * n..]);
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[128 * n + l] = d * sc[is] as i8 as f32 * q1 as f32;
                    y[128 * n + l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
                    y[128 * n + l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
                    y[128 * n + l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
                }
            }
            out.extend(y);
        }
        out
    }

    /// `t` activation rows through the kernel: each row bitwise independent of the others
    /// (`independent_rows`), and each within rounding of ggml's arithmetic.
    fn check(rows: usize, cols: usize, bytes: &[u8], x: &[f32], t: usize) {
        let q = Q6KRows::from_gguf_blocks(bytes, rows, cols).unwrap();
        let Some(got) = independent_rows(&q, x, t) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let row_bytes = cols / QK_K * GGUF_BLOCK_BYTES;
        for (x, got) in x.chunks_exact(cols).zip(got.chunks_exact(rows)) {
            let y = ggml_quantize_q8k(x);
            let ggml = |r: usize| ggml_dot_q6k(&bytes[r * row_bytes..][..row_bytes], &y);
            check_rows(got, x, &dequantize_q6k(bytes), ggml, &q8k_steps(&y));
        }
    }

    #[test]
    fn matmul_matches_llama_cpp_q6_k_q8_k_arithmetic_row_by_row() {
        let mut rng = ChaCha8Rng::seed_from_u64(61);
        // 7 rows: pairs and a lone last row; 13 activation rows: whole tiles and a lone row.
        let (rows, cols, t) = (7, 768, 13);
        let bytes = q6k_blocks(rows, cols, &mut rng);
        let x: Vec<f32> = (0..t).flat_map(|_| activations(cols, &mut rng)).collect();
        check(rows, cols, &bytes, &x, t);
    }

    #[test]
    fn extreme_values_stay_exact() {
        // All values 63 and scales at their extremes, activations at ±127: the 32-bit sums at
        // their largest.
        let cols = 512;
        let mut bytes = Vec::new();
        for _ in 0..2 * cols / QK_K {
            bytes.extend([0xFF; 192]);
            bytes.extend([0x80, 0x7F].repeat(8));
            bytes.extend(f16_bytes(0.0001));
        }
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        check(2, cols, &bytes, &x, 2);
    }

    #[test]
    fn only_whole_super_blocks_and_exact_byte_counts_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let bytes = q6k_blocks(2, 512, &mut rng);
        assert!(Q6KRows::from_gguf_blocks(&bytes, 2, 512).is_some());
        // 128 columns: not a whole super-block.
        assert!(Q6KRows::from_gguf_blocks(&bytes[..GGUF_BLOCK_BYTES], 2, 128).is_none());
        assert!(Q6KRows::from_gguf_blocks(&bytes[1..], 2, 512).is_none());
        assert!(Q6KRows::from_gguf_blocks(&bytes, usize::MAX, 512).is_none());
        let q = Q6KRows::from_gguf_blocks(&bytes, 2, 512).unwrap();
        assert!(matmul(&q, &[0.0; 256], 1).is_none());
    }
}
