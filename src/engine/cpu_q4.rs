//! Single-row products (decoding) against Q4_1 weights as stored in GGUF, with AVX-512 VNNI.
//!
//! Why our own: candle has no SIMD kernel for Q4_1, so `dense-q8` decoded through a Q8_0 copy of
//! the weights (8.5 bits per weight), while llama.cpp reads the 5-bit blocks as stored. Decoding
//! a small model is bound by how fast the weights stream from cache and memory (SmolLM2-135M:
//! 143 MB per token as Q8_0, 96 MB as stored), so this file multiplies the stored blocks directly,
//! with llama.cpp's arithmetic: activations quantized to Q8_1 (per-32 block scale `d` and
//! `s = d·Σq`), `Σ_blocks d_w·d_x·Σ q_w q_x + m_w·s_x`, block scales kept as stored (f16).
//!
//! At load the nibbles of each pair of blocks are reordered (not re-quantized) so that one 32-byte
//! load unpacks into the 64 values of the pair in order: byte `j` holds value `j` of the first
//! block (low nibble) and value `j` of the second (high nibble).

use super::cpu_kernels::{parallel_ranges, SharedOut};
use super::cpu_q8::{quantize_row_q8, BLOCK};

/// Values in a pair of blocks: one 512-bit step.
const PAIR: usize = 2 * BLOCK;
/// Bytes of one GGUF `block_q4_1`: f16 `d`, f16 `m`, 16 bytes of nibbles.
const GGUF_BLOCK_BYTES: usize = 20;

/// A Q4_1 weight matrix `[rows, cols]`, each row laid out as `cols / 64` groups of 32 nibble
/// bytes (kernel order), then the f16 `d` of every block, then the f16 `m` of every block.
#[derive(Debug, Clone)]
pub(crate) struct Q41Rows {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Q41Rows {
    /// Reorders GGUF Q4_1 blocks (`rows · cols / 32` blocks of 20 bytes); `None` unless `cols` is
    /// a multiple of 64 and `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(PAIR) {
            return None;
        }
        let blocks = cols / BLOCK;
        if bytes.len() != rows * blocks * GGUF_BLOCK_BYTES {
            return None;
        }
        let row_bytes = Self::row_bytes(cols);
        let mut data = vec![0u8; rows * row_bytes];
        for (src, dst) in bytes
            .chunks_exact(blocks * GGUF_BLOCK_BYTES)
            .zip(data.chunks_exact_mut(row_bytes))
        {
            let (nibbles, scales) = dst.split_at_mut(cols / 2);
            let (ds, ms) = scales.split_at_mut(2 * blocks);
            for (b, block) in src.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
                ds[2 * b..2 * b + 2].copy_from_slice(&block[0..2]);
                ms[2 * b..2 * b + 2].copy_from_slice(&block[2..4]);
                let group = &mut nibbles[(b / 2) * BLOCK..][..BLOCK];
                let shift = 4 * (b % 2);
                // GGUF: byte j holds value j (low nibble) and value j + 16 (high nibble).
                for j in 0..BLOCK / 2 {
                    let byte = block[4 + j];
                    group[j] |= (byte & 0x0F) << shift;
                    group[j + 16] |= (byte >> 4) << shift;
                }
            }
        }
        Some(Self { rows, cols, data })
    }

    fn row_bytes(cols: usize) -> usize {
        cols / 2 + 4 * (cols / BLOCK)
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
        if !super::cpu_q8::supported() || x.len() != self.cols {
            return None;
        }
        let activations = Q81Activations::new(x);
        let mut out = vec![0f32; self.rows];
        let shared = SharedOut(out.as_mut_ptr());
        let row_bytes = Self::row_bytes(self.cols);
        let groups = self.cols / PAIR;
        parallel_ranges(self.rows.div_ceil(2), |pairs| {
            for pair in pairs {
                let first = 2 * pair;
                let rows = &self.data[first * row_bytes..];
                // SAFETY: `supported()` checked the features; each row holds `groups` groups and
                // its scales, the activations `groups` groups; each output index is written by
                // one task only.
                unsafe {
                    if first + 1 < self.rows {
                        let (a, b) = dot2(&rows[..2 * row_bytes], row_bytes, groups, &activations);
                        *shared.ptr().add(first) = a;
                        *shared.ptr().add(first + 1) = b;
                    } else {
                        let (a, _) = dot2(&rows[..row_bytes], 0, groups, &activations);
                        *shared.ptr().add(first) = a;
                    }
                }
            }
        });
        Some(out)
    }
}

/// One activation row quantized to Q8_1 as llama.cpp's `quantize_row_q8_1` does: `d` and
/// `s = d · Σ quants` rounded to f16 (`s` from the unrounded `d`).
struct Q81Activations {
    quants: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl Q81Activations {
    fn new(x: &[f32]) -> Self {
        let blocks = x.len() / BLOCK;
        let mut quants = vec![0i8; x.len()];
        let mut d = vec![0f32; blocks];
        let mut sums = vec![0i32; blocks];
        quantize_row_q8(x, &mut quants, &mut d, Some(&mut sums));
        let s = d
            .iter()
            .zip(&sums)
            .map(|(&d, &sum)| half::f16::from_f32(d * sum as f32).to_f32())
            .collect();
        for d in &mut d {
            *d = half::f16::from_f32(*d).to_f32();
        }
        Self { quants, d, s }
    }
}

/// Rows `rows[..row_bytes]` and `rows[row_bytes..]` (the same row twice when `row_bytes` is 0)
/// times the activations.
///
/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; each row holds `groups`
/// nibble groups and `4 · groups` scales.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn dot2(rows: &[u8], row_bytes: usize, groups: usize, x: &Q81Activations) -> (f32, f32) {
    use std::arch::x86_64::*;
    let blocks = 2 * groups;
    let row_ptrs = [rows.as_ptr(), rows.as_ptr().wrapping_add(row_bytes)];
    // Broadcast the 32 nibble bytes to both halves; shift the upper half's 64-bit lanes by 4 so
    // that, after masking, bytes 0..32 hold the first block and bytes 32..64 the second.
    let shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let low_nibble = _mm512_set1_epi8(0x0F);
    // Lanes 0..8 hold the first block's partial sums, 8..16 the second's.
    let pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    let mut acc = [_mm512_setzero_ps(); 2];
    for g in 0..groups {
        // SAFETY: group g (64 values, 2 scales) lies inside the activations.
        let (xv, dx) = unsafe {
            (
                _mm512_loadu_si512(x.quants.as_ptr().add(g * PAIR) as *const _),
                _mm_castpd_ps(_mm_load_sd(x.d.as_ptr().add(2 * g) as *const f64)),
            )
        };
        for (acc, &row) in acc.iter_mut().zip(&row_ptrs) {
            // SAFETY: group g's 32 bytes and its pair of f16 scales lie inside the row.
            let (packed, dw) = unsafe {
                (
                    _mm256_loadu_si256(row.add(g * BLOCK) as *const _),
                    (row.add(blocks * BLOCK / 2 + 4 * g) as *const i32).read_unaligned(),
                )
            };
            let w = _mm512_and_si512(
                _mm512_srlv_epi64(_mm512_broadcast_i64x4(packed), shifts),
                low_nibble,
            );
            let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv);
            let scale = _mm512_permutexvar_ps(
                pair_lanes,
                _mm512_castps128_ps512(_mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dw)), dx)),
            );
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, *acc);
        }
    }
    // The minimum terms: Σ m_w · s_x, 16 blocks per step.
    let mut b = 0;
    while b < blocks {
        let mask: u16 = if blocks - b >= 16 {
            u16::MAX
        } else {
            (1u16 << (blocks - b)) - 1
        };
        // SAFETY: the masked lanes lie inside the activation sums.
        let s = unsafe { _mm512_maskz_loadu_ps(mask, x.s.as_ptr().add(b)) };
        for (acc, &row) in acc.iter_mut().zip(&row_ptrs) {
            // SAFETY: the masked f16 minimums lie inside the row.
            let m = unsafe {
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                    mask,
                    row.add(blocks * BLOCK / 2 + 2 * blocks + 2 * b) as *const _,
                ))
            };
            *acc = _mm512_fmadd_ps(m, s, *acc);
        }
        b += 16;
    }
    (_mm512_reduce_add_ps(acc[0]), _mm512_reduce_add_ps(acc[1]))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot2(_: &[u8], _: usize, _: usize, _: &Q81Activations) -> (f32, f32) {
    unreachable!("supported() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu_q8::quantize_block_q8;

    /// GGUF Q4_1 blocks with varied scales, minimums and nibbles.
    fn gguf_blocks(rows: usize, cols: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for b in 0..rows * cols / BLOCK {
            let d = half::f16::from_f32(0.01 + (b % 7) as f32 * 0.003);
            let m = half::f16::from_f32(-0.05 - (b % 5) as f32 * 0.01);
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend_from_slice(&m.to_le_bytes());
            bytes.extend((0..16).map(|j| ((b * 31 + j * 17) % 256) as u8));
        }
        bytes
    }

    /// GGUF's own decoding of a Q4_1 block: `d · q + m`.
    fn dequantize(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for block in bytes.chunks_exact(GGUF_BLOCK_BYTES) {
            let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            let m = half::f16::from_le_bytes([block[2], block[3]]).to_f32();
            let mut values = [0f32; BLOCK];
            for j in 0..16 {
                values[j] = d * (block[4 + j] & 0x0F) as f32 + m;
                values[j + 16] = d * (block[4 + j] >> 4) as f32 + m;
            }
            out.extend(values);
        }
        out
    }

    #[test]
    fn matvec_matches_llama_cpp_q4_1_q8_1_arithmetic() {
        // 5 rows: pairs and a lone last row; 192 columns: 3 groups, 6 blocks.
        let (rows, cols) = (5, 192);
        let bytes = gguf_blocks(rows, cols);
        let q = Q41Rows::from_gguf_blocks(&bytes, rows, cols).unwrap();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let Some(got) = q.matvec(&x) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let weights = dequantize(&bytes);
        let mut xq = [0i8; BLOCK];
        for r in 0..rows {
            // ggml_vec_dot_q4_1_q8_1, written out: d_w·d_x·Σ q_w q_x + m_w·s_x per block.
            let mut expected = 0f64;
            for (b, xs) in x.chunks_exact(BLOCK).enumerate() {
                let scale = quantize_block_q8(xs, &mut xq);
                let block = &bytes[(r * cols / BLOCK + b) * GGUF_BLOCK_BYTES..][..20];
                let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32() as f64;
                let m = half::f16::from_le_bytes([block[2], block[3]]).to_f32() as f64;
                let mut dot = 0i32;
                for j in 0..16 {
                    dot += (block[4 + j] & 0x0F) as i32 * xq[j] as i32;
                    dot += (block[4 + j] >> 4) as i32 * xq[j + 16] as i32;
                }
                let sum: i32 = xq.iter().map(|&v| v as i32).sum();
                let dx = half::f16::from_f32(scale).to_f32() as f64;
                let s = half::f16::from_f32(scale * sum as f32).to_f32() as f64;
                expected += d * dx * dot as f64 + m * s;
            }
            assert!(
                (got[r] as f64 - expected).abs() < 1e-4,
                "row {r}: {} vs {expected}",
                got[r]
            );
            // And close to the product with the dequantized weights.
            let exact: f64 = weights[r * cols..][..cols]
                .iter()
                .zip(&x)
                .map(|(a, b)| (a * b) as f64)
                .sum();
            assert!((got[r] as f64 - exact).abs() < 0.05, "row {r}: {exact}");
        }
    }

    #[test]
    fn only_whole_pairs_of_blocks_are_accepted() {
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(1, 32), 1, 32).is_none());
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(2, 64), 2, 64).is_some());
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(2, 64), 3, 64).is_none());
    }
}
