//! Single-row products (decoding) against Q5_0 weights as stored in GGUF, with AVX-512 VNNI.
//!
//! Why our own: candle has no AVX-512 VNNI kernel for Q5_0 (which Q4_K_M files use for tensors
//! whose rows are not whole 256-value super-blocks, e.g. Qwen2.5-0.5B's 896 columns), so
//! `dense-q8` decoded them through a Q8_0 copy of the dequantized weights: 8.5 bits per weight
//! streamed per token where the file holds 5.5, and logits that differ from llama.cpp's.
//! This file multiplies the stored blocks with llama.cpp's arithmetic: activations quantized to
//! Q8_0 (per-32 block, f16 scale), per block the exact integer `Σ (q5 - 16) · q8` times
//! `d_w · d_x` in f32.
//!
//! At load the nibbles of each group of four blocks are reordered (not re-quantized) so that one
//! 64-byte load unpacks into the 128 values in order (byte `i` holds value `i` in its low nibble
//! and value `64 + i` in its high nibble), and the fifth bits become one 64-bit mask per 64
//! values, added with a masked byte add: memory stays 5.5 bits per weight.

use super::cpu_q8::{quantize_row_q8, BLOCK};
use super::cpu_qk::{for_row_pairs, interleaved, AlignedBytes, PairUnits};

/// Values in a group of four blocks: one step of the kernel.
const GROUP: usize = 4 * BLOCK;
/// Software prefetch distance, in units of the interleaved pair stream (32 groups: 2 KB of
/// nibbles ahead); A/B from memory, 1 thread: 4864x896 211 -> 163 us.
const PF: usize = 32;
/// Bytes of one GGUF `block_q5_0`: f16 `d`, the 32 fifth bits (`qh`, little-endian u32), 16
/// bytes of nibbles (byte `j`: value `j` low, value `j + 16` high).
const GGUF_BLOCK_BYTES: usize = 22;

/// A Q5_0 weight matrix `[rows, cols]`, groups stored in [`interleaved`] order: per group of 128 values, 64 nibble bytes (kernel order),
/// two 64-bit masks of fifth bits (values 0..64, 64..128), and the f16 `d` of its four blocks.
#[derive(Debug, Clone)]
pub(crate) struct Q50Rows {
    rows: usize,
    cols: usize,
    nibbles: AlignedBytes,
    high_bits: Vec<u64>,
    d: Vec<u16>,
}

/// Value `e` (0..32) of a GGUF Q5_0 block without its fifth bit.
fn gguf_nibble(block: &[u8], e: usize) -> u8 {
    let qs = &block[6..];
    if e < 16 {
        qs[e] & 0x0F
    } else {
        qs[e - 16] >> 4
    }
}

fn gguf_high_bits(block: &[u8]) -> u64 {
    u32::from_le_bytes([block[2], block[3], block[4], block[5]]) as u64
}

impl Q50Rows {
    /// Reorders GGUF Q5_0 blocks (`rows · cols / 32` blocks of 22 bytes); `None` unless `cols` is
    /// a multiple of 128 and `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(GROUP) {
            return None;
        }
        let blocks = rows.checked_mul(cols / BLOCK)?;
        if bytes.len() != blocks.checked_mul(GGUF_BLOCK_BYTES)? {
            return None;
        }
        let mut nibbles = AlignedBytes::zeroed(blocks * BLOCK / 2);
        let mut high_bits = vec![0u64; blocks / 2];
        let mut d = vec![0u16; blocks];
        let dst = nibbles.bytes_mut();
        let per_row = cols / GROUP;
        for (i, group) in bytes.chunks_exact(4 * GGUF_BLOCK_BYTES).enumerate() {
            let g = interleaved(rows, per_row, i / per_row, i % per_row);
            let block = |b: usize| &group[b * GGUF_BLOCK_BYTES..][..GGUF_BLOCK_BYTES];
            let out = &mut dst[g * GROUP / 2..][..GROUP / 2];
            for (i, byte) in out.iter_mut().enumerate() {
                let low = gguf_nibble(block(i / BLOCK), i % BLOCK);
                let high = gguf_nibble(block(2 + i / BLOCK), i % BLOCK);
                *byte = low | (high << 4);
            }
            high_bits[2 * g] = gguf_high_bits(block(0)) | gguf_high_bits(block(1)) << 32;
            high_bits[2 * g + 1] = gguf_high_bits(block(2)) | gguf_high_bits(block(3)) << 32;
            for b in 0..4 {
                d[4 * g + b] = u16::from_le_bytes([block(b)[0], block(b)[1]]);
            }
        }
        Some(Self {
            rows,
            cols,
            nibbles,
            high_bits,
            d,
        })
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// `weights · x` for one activation row `x` (`cols` values), or `None` when the CPU lacks
    /// AVX-512 VNNI or `x` has the wrong length.
    pub(crate) fn matvec(&self, x: &[f32]) -> Option<Vec<f32>> {
        if !super::cpu_q8::supported() || x.len() != self.cols {
            return None;
        }
        let activations = Q80Activations::new(x);
        let mut out = vec![0f32; self.rows];
        // SAFETY: `supported()` checked the features; rows are below `self.rows`.
        for_row_pairs(&mut out, |a, b| unsafe { dot2(self, [a, b], &activations) });
        Some(out)
    }
}

/// One activation row quantized to Q8_0 as llama.cpp's `quantize_row_q8_0` does, plus what the
/// kernel adds to each 32-bit lane of `vpdpbusd`.
struct Q80Activations {
    quants: Vec<i8>,
    /// Block scales rounded to f16 (as stored in `block_q8_0`), widened.
    d: Vec<f32>,
    /// `-16 ·` the sum of the 4 quants each lane of `vpdpbusd` multiplies: the kernel multiplies
    /// the unsigned q5 (0..31), and starting each lane from this makes it `Σ (q5 - 16) · q8`
    /// over its own values, exact and no larger than ggml's.
    offsets: Vec<i32>,
}

impl Q80Activations {
    fn new(x: &[f32]) -> Self {
        let blocks = x.len() / BLOCK;
        let mut quants = vec![0i8; x.len()];
        let mut d = vec![0f32; blocks];
        quantize_row_q8(x, &mut quants, &mut d, None);
        for d in &mut d {
            *d = half::f16::from_f32(*d).to_f32();
        }
        let offsets = lane_offsets(&quants);
        Self { quants, d, offsets }
    }
}

/// `-16 · (q[4i] + … + q[4i + 3])` for each 4 values (vectorized where the kernel runs).
fn lane_offsets(quants: &[i8]) -> Vec<i32> {
    #[cfg(target_arch = "x86_64")]
    if super::cpu_q8::supported() && quants.len().is_multiple_of(64) {
        let mut out = vec![0i32; quants.len() / 4];
        // SAFETY: `supported()` checked the features; 64 bytes in, 16 lanes out per step.
        unsafe { lane_offsets_avx512(quants, &mut out) };
        return out;
    }
    quants
        .chunks_exact(4)
        .map(|q| -16 * q.iter().map(|&v| v as i32).sum::<i32>())
        .collect()
}

/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; `quants`
/// holds a multiple of 64 values and `out` a quarter as many.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn lane_offsets_avx512(quants: &[i8], out: &mut [i32]) {
    use std::arch::x86_64::*;
    for (i, chunk) in quants.chunks_exact(64).enumerate() {
        // SAFETY: as the contract says.
        unsafe {
            let sums = _mm512_dpbusd_epi32(
                _mm512_setzero_si512(),
                _mm512_set1_epi8(16),
                _mm512_loadu_si512(chunk.as_ptr().cast()),
            );
            _mm512_storeu_si512(
                out.as_mut_ptr().add(16 * i).cast(),
                _mm512_sub_epi32(_mm512_setzero_si512(), sums),
            );
        }
    }
}

/// `ternarylogic` immediate for `(a & c) | b`, from the truth tables a = 0xF0, b = 0xCC, c = 0xAA.
#[cfg(target_arch = "x86_64")]
const A_AND_C_OR_B: i32 = (0xF0 & 0xAA) | 0xCC;

/// Rows `rows[0]` and `rows[1]` times the activations.
///
/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; both rows are
/// below `w.rows`, and `x` holds `w.cols` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn dot2(w: &Q50Rows, rows: [usize; 2], x: &Q80Activations) -> (f32, f32) {
    use std::arch::x86_64::*;
    let groups = w.cols / GROUP;
    let low4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    // The 8 scales of a step ([row 0: blocks 0..4, row 1: blocks 0..4]) spread over the lanes
    // of each 64-value half: lanes 0..8 the first block of the half, 8..16 the second.
    let spread = [0, 2, 4, 6].map(|b| {
        _mm512_set_epi32(
            b + 1,
            b + 1,
            b + 1,
            b + 1,
            b + 1,
            b + 1,
            b + 1,
            b + 1,
            b,
            b,
            b,
            b,
            b,
            b,
            b,
            b,
        )
    });
    let nibbles = w.nibbles.bytes().as_ptr();
    let units = PairUnits::new(rows, groups);
    let mut acc = [_mm512_setzero_ps(); 2];
    for g in 0..groups {
        // SAFETY: group g of the activations and of both rows lies inside the arrays.
        unsafe {
            let xq = x.quants.as_ptr().add(g * GROUP);
            let xs = [
                _mm512_loadu_si512(xq.cast()),
                _mm512_loadu_si512(xq.add(64).cast()),
            ];
            let offsets = x.offsets.as_ptr().add(g * GROUP / 4);
            let offsets = [
                _mm512_loadu_si512(offsets.cast()),
                _mm512_loadu_si512(offsets.add(16).cast()),
            ];
            // Both rows' 4 block scales, times the activation scales: one conversion.
            let d = _mm256_cvtph_ps(_mm_unpacklo_epi64(
                _mm_loadl_epi64(w.d.as_ptr().add(4 * units.unit(0, g)).cast()),
                _mm_loadl_epi64(w.d.as_ptr().add(4 * units.unit(1, g)).cast()),
            ));
            let dx = _mm_loadu_ps(x.d.as_ptr().add(4 * g));
            let scales = _mm512_castps256_ps512(_mm256_mul_ps(d, _mm256_set_m128(dx, dx)));
            for r in 0..2 {
                let group = units.unit(r, g);
                _mm_prefetch::<_MM_HINT_T0>(nibbles.wrapping_add((group + PF) * GROUP / 2).cast());
                let v = _mm512_load_si512(nibbles.add(group * GROUP / 2).cast());
                let halves = [v, _mm512_srli_epi16::<4>(v)];
                for h in 0..2 {
                    // (nibble & 15) | 16·bit: a zero-masked move of 16s and one ternary logic op
                    // (a masked add of 16 compiled to and, or and a masked move).
                    let top = _mm512_maskz_mov_epi8(w.high_bits[2 * group + h], sixteen);
                    let q = _mm512_ternarylogic_epi32::<A_AND_C_OR_B>(halves[h], top, low4);
                    let sums = _mm512_dpbusd_epi32(offsets[h], q, xs[h]);
                    let scale = _mm512_permutexvar_ps(spread[2 * r + h], scales);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[r]);
                }
            }
        }
    }
    (_mm512_reduce_add_ps(acc[0]), _mm512_reduce_add_ps(acc[1]))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot2(_: &Q50Rows, _: [usize; 2], _: &Q80Activations) -> (f32, f32) {
    unreachable!("supported() is false off x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu_q8::quantize_block_q8;
    use crate::engine::cpu_qk::tests::{activations, check_rows, f16_bytes};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// GGUF Q5_0 blocks: random fifth bits and nibbles, a sane positive f16 `d`.
    fn gguf_blocks(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / BLOCK {
            bytes.extend(f16_bytes(rng.random_range(0.001..0.01)));
            bytes.extend((0..20).map(|_| rng.random::<u8>()));
        }
        bytes
    }

    /// ggml's `block_q8_0` as the reference quantizes it: f16 `d`, int8 values.
    fn ggml_quantize_q8_0(x: &[f32]) -> Vec<(f32, [i8; BLOCK])> {
        x.chunks_exact(BLOCK)
            .map(|xs| {
                let mut q = [0i8; BLOCK];
                let d = quantize_block_q8(xs, &mut q);
                (half::f16::from_f32(d).to_f32(), q)
            })
            .collect()
    }

    /// `ggml_vec_dot_q5_0_q8_0` (the generic C), written out; also returns Σ |d · block sum|,
    /// the scale of its f32 rounding.
    fn ggml_dot(row: &[u8], y: &[(f32, [i8; BLOCK])]) -> (f32, f64) {
        let (mut sumf, mut norm) = (0f32, 0f64);
        for (x, (dy, qy)) in row.chunks_exact(GGUF_BLOCK_BYTES).zip(y) {
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            let (mut sumi0, mut sumi1) = (0i32, 0i32);
            for j in 0..16 {
                let xh_0 = (((qh & (1 << j)) >> j) << 4) as u8;
                let xh_1 = ((qh & (1 << (j + 16))) >> (j + 12)) as u8;
                let x0 = ((x[6 + j] & 0x0F) | xh_0) as i32 - 16;
                let x1 = ((x[6 + j] >> 4) | xh_1) as i32 - 16;
                sumi0 += x0 * qy[j] as i32;
                sumi1 += x1 * qy[j + 16] as i32;
            }
            let d = half::f16::from_le_bytes([x[0], x[1]]).to_f32() * dy;
            sumf += d * (sumi0 + sumi1) as f32;
            norm += (d as f64 * (sumi0 + sumi1) as f64).abs();
        }
        (sumf, norm)
    }

    /// ggml's `dequantize_row_q5_0`, written out.
    fn dequantize(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for x in bytes.chunks_exact(GGUF_BLOCK_BYTES) {
            let d = half::f16::from_le_bytes([x[0], x[1]]).to_f32();
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            let mut y = [0f32; BLOCK];
            for j in 0..16 {
                let xh_0 = ((qh >> j) << 4) as u8 & 0x10;
                let xh_1 = (qh >> (j + 12)) as u8 & 0x10;
                y[j] = (((x[6 + j] & 0x0F) | xh_0) as i32 - 16) as f32 * d;
                y[j + 16] = (((x[6 + j] >> 4) | xh_1) as i32 - 16) as f32 * d;
            }
            out.extend(y);
        }
        out
    }

    fn check(rows: usize, cols: usize, bytes: &[u8], x: &[f32]) {
        let q = Q50Rows::from_gguf_blocks(bytes, rows, cols).unwrap();
        let Some(got) = q.matvec(x) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let y = ggml_quantize_q8_0(x);
        let row_bytes = cols / BLOCK * GGUF_BLOCK_BYTES;
        let ggml = |r: usize| ggml_dot(&bytes[r * row_bytes..][..row_bytes], &y);
        let steps: Vec<f32> = y.iter().flat_map(|(d, _)| [*d; BLOCK]).collect();
        check_rows(&got, x, &dequantize(bytes), ggml, &steps);
    }

    #[test]
    fn matvec_matches_llama_cpp_q5_0_q8_0_arithmetic() {
        let mut rng = ChaCha8Rng::seed_from_u64(50);
        // 5 rows: pairs and a lone last row; 384 columns: 3 groups of 4 blocks.
        let (rows, cols) = (5, 384);
        let bytes = gguf_blocks(rows, cols, &mut rng);
        check(rows, cols, &bytes, &activations(cols, &mut rng));
    }

    #[test]
    fn extreme_values_stay_exact() {
        // All values 31 (fifth bit set) or all 0, activations at ±127.
        let cols = 256;
        let mut bytes = Vec::new();
        for b in 0..2 * cols / BLOCK {
            bytes.extend(f16_bytes(0.01));
            bytes.extend(if b % 3 == 0 { [0x00; 20] } else { [0xFF; 20] });
        }
        let x: Vec<f32> = (0..cols)
            .map(|i| if i % 5 == 0 { -1.0 } else { 1.0 })
            .collect();
        check(2, cols, &bytes, &x);
    }

    #[test]
    fn activations_are_ggml_q8_0_with_f16_scales_and_lane_offsets() {
        let mut rng = ChaCha8Rng::seed_from_u64(80);
        let mut x = activations(256, &mut rng);
        // Block 0: max 127, so the scale is exactly 1 and x.5 rounds to even as ggml's x86
        // `quantize_row_q8_0` does (`_mm256_round_ps`, nearest).
        x[..BLOCK].fill(0.0);
        x[0] = -127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        // Block 1: all zeros.
        x[BLOCK..2 * BLOCK].fill(0.0);
        let a = Q80Activations::new(&x);
        for (b, (d, q)) in ggml_quantize_q8_0(&x).iter().enumerate() {
            assert_eq!(a.d[b].to_bits(), d.to_bits(), "block {b}");
            assert_eq!(&a.quants[b * BLOCK..][..BLOCK], &q[..], "block {b}");
        }
        assert_eq!(&a.quants[..3], &[-127, 2, -4]);
        assert_eq!(a.d[1], 0.0);
        for (lane, &offset) in a.offsets.iter().enumerate() {
            let q = &a.quants[4 * lane..][..4];
            assert_eq!(offset, -16 * q.iter().map(|&v| v as i32).sum::<i32>());
        }
    }

    #[test]
    fn only_whole_groups_and_exact_byte_counts_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let bytes = gguf_blocks(2, 256, &mut rng);
        assert!(Q50Rows::from_gguf_blocks(&bytes, 2, 256).is_some());
        // 64 columns: two blocks, not a whole group of four.
        assert!(Q50Rows::from_gguf_blocks(&bytes[..4 * GGUF_BLOCK_BYTES], 2, 64).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes, 3, 256).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes[1..], 2, 256).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes, usize::MAX, 256).is_none());
        let q = Q50Rows::from_gguf_blocks(&bytes, 2, 256).unwrap();
        assert!(q.matvec(&[0.0; 128]).is_none());
    }
}
