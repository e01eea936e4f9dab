//! Products with Q5_0 weights as stored in GGUF, with AVX-512 VNNI (layout and driver in
//! `cpu::matmul`).
//!
//! Why our own: candle has no AVX-512 VNNI kernel for Q5_0 (which Q4_K_M files use for tensors
//! whose rows are not whole 256-value super-blocks, e.g. Qwen2.5-0.5B's 896 columns). This file
//! multiplies the stored blocks with llama.cpp's arithmetic: activations quantized to Q8_0
//! (per-32 block, f16 scale), per block the exact integer `Σ (q5 - 16) · q8` times `d_w · d_x`.
//!
//! At load the nibbles are reordered, not re-quantized: byte `4j + i` of packed vector `p` of a
//! unit holds value `4p + i` of block `j` (low nibble) and value `16 + 4p + i` (high nibble),
//! as GGUF's byte `4p + i` of the block does; the fifth bits become one 64-bit mask per kernel
//! vector, added with a masked move. Memory stays 5.5 bits per weight.

use super::matmul::{f16x16, Activations, AlignedBytes, StoredRows, Units, LANES};
use super::q8::{fill_q8_0, BLOCK};

/// Bytes of one GGUF `block_q5_0`: f16 `d`, the 32 fifth bits (`qh`, little-endian u32), 16
/// bytes of nibbles (byte `j`: value `j` low, value `j + 16` high).
const GGUF_BLOCK_BYTES: usize = 22;
/// Nibble bytes per block (lane).
const LANE_BYTES: usize = BLOCK / 2;
/// Software prefetch distance in the pair stream: 4 KB of nibbles ahead.
const PF: usize = 4096;

/// A Q5_0 weight matrix `[rows, cols]` in the [`Units`] layout: per unit 4 packed vectors of
/// nibbles (16 bytes per block), 8 masks of fifth bits (one per kernel vector), and the 16 f16
/// `d` (zero past the row's end).
#[derive(Debug, Clone)]
pub(crate) struct Q50Rows {
    rows: usize,
    cols: usize,
    units: Units,
    nibbles: AlignedBytes,
    high_bits: Vec<u64>,
    d: Vec<u16>,
}

impl Q50Rows {
    /// Reorders GGUF Q5_0 blocks (`rows · cols / 32` blocks of 22 bytes); `None` unless `cols` is
    /// a multiple of 32 and `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if !cols.is_multiple_of(BLOCK) {
            return None;
        }
        let per_row = cols / BLOCK;
        let units = Units::new(rows, per_row)?;
        if bytes.len() != rows * per_row * GGUF_BLOCK_BYTES {
            return None;
        }
        let mut nibbles = AlignedBytes::zeroed(units.packed_len(LANE_BYTES));
        let mut high_bits = vec![0u64; 8 * units.count()];
        let mut d = vec![0u16; LANES * units.count()];
        let dst = nibbles.bytes_mut();
        for (i, block) in bytes.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
            let (r, b) = (i / per_row, i % per_row);
            let (u, j) = (b / LANES, b % LANES);
            let at = units.offset(r, u, LANE_BYTES);
            let lanes = units.lanes(u);
            let unit = units.index(r, u);
            d[LANES * unit + j] = u16::from_le_bytes([block[0], block[1]]);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            for p in 0..4 {
                dst[at + 4 * (p * lanes + j)..][..4].copy_from_slice(&block[6 + 4 * p..][..4]);
            }
            for k in 0..8 {
                let bits = (qh >> (4 * k)) as u64 & 0xF;
                high_bits[8 * unit + k] |= bits << (4 * j);
            }
        }
        Some(Self {
            rows,
            cols,
            units,
            nibbles,
            high_bits,
            d,
        })
    }
}

impl StoredRows for Q50Rows {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn quantize(&self, x: &[f32], rows: usize) -> Activations {
        // The kernel multiplies the unsigned q5 (0..31): sums that start at -16 · Σ q8 end at
        // ggml's Σ (q5 - 16) · q8.
        Activations::new(x, rows, self.units.units(), 8, |x, row| {
            fill_q8_0(x, row, 16)
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

/// `ternarylogic` immediate for `(a & c) | b`, from the truth tables a = 0xF0, b = 0xCC, c = 0xAA.
#[cfg(target_arch = "x86_64")]
const A_AND_C_OR_B: i32 = (0xF0 & 0xAA) | 0xCC;

/// # Safety
/// As [`StoredRows::tile`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn tile<const N: usize>(
    w: &Q50Rows,
    rows: [usize; 2],
    x: &Activations,
    first: usize,
) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let low4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    let nibbles = w.nibbles.as_ptr();
    let mut acc = [[_mm512_setzero_ps(); 2]; N];
    let pair = w.units.pair(rows);
    for u in 0..pair.count() {
        let lanes = pair.lanes(u);
        let at = pair.offsets(u, LANE_BYTES);
        let unit = pair.indices(u);
        let mut sums = [[_mm512_setzero_si512(); 2]; N];
        // SAFETY (all loads): unit u of both rows and of the activation rows lies inside the
        // arrays; a full vector read at a short last unit stays in the allocation's slack, and
        // its extra lanes meet zero activations.
        unsafe {
            for (n, sums) in sums.iter_mut().enumerate() {
                *sums = [_mm512_loadu_si512(x.start(first + n, u).cast()); 2];
            }
            for &at in if N == 1 { &at[..] } else { &[] } {
                for line in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(nibbles.wrapping_add(at + PF + 64 * line).cast());
                }
            }
            for p in 0..4 {
                let mut q = [[_mm512_setzero_si512(); 2]; 2];
                for s in 0..2 {
                    let v = _mm512_loadu_si512(nibbles.add(at[s] + 4 * p * lanes).cast());
                    let high = w.high_bits.as_ptr().add(8 * unit[s]);
                    // (nibble & 15) | 16·bit: a zero-masked move of 16s and one ternary logic op.
                    q[s][0] = _mm512_ternarylogic_epi32::<A_AND_C_OR_B>(
                        v,
                        _mm512_maskz_mov_epi8(*high.add(p), sixteen),
                        low4,
                    );
                    q[s][1] = _mm512_ternarylogic_epi32::<A_AND_C_OR_B>(
                        _mm512_srli_epi16::<4>(v),
                        _mm512_maskz_mov_epi8(*high.add(p + 4), sixteen),
                        low4,
                    );
                }
                for (n, sums) in sums.iter_mut().enumerate() {
                    let xq = x.quants(first + n, u);
                    let x0 = _mm512_load_si512(xq.add(64 * p).cast());
                    let x1 = _mm512_load_si512(xq.add(64 * (p + 4)).cast());
                    for s in 0..2 {
                        sums[s] = _mm512_dpbusd_epi32(sums[s], q[s][0], x0);
                        sums[s] = _mm512_dpbusd_epi32(sums[s], q[s][1], x1);
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
    _: &Q50Rows,
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
    use crate::engine::cpu::q8::quantize_block_q8;
    use crate::engine::cpu::qk::tests::{activations, check_rows, f16_bytes};
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

    /// `t` activation rows through the kernel: each row bitwise independent of the others
    /// (`independent_rows`), and each within rounding of ggml's arithmetic.
    fn check(rows: usize, cols: usize, bytes: &[u8], x: &[f32], t: usize) {
        let q = Q50Rows::from_gguf_blocks(bytes, rows, cols).unwrap();
        let Some(got) = independent_rows(&q, x, t) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let row_bytes = cols / BLOCK * GGUF_BLOCK_BYTES;
        for (x, got) in x.chunks_exact(cols).zip(got.chunks_exact(rows)) {
            let y = ggml_quantize_q8_0(x);
            let ggml = |r: usize| ggml_dot(&bytes[r * row_bytes..][..row_bytes], &y);
            let steps: Vec<f32> = y.iter().flat_map(|(d, _)| [*d; BLOCK]).collect();
            check_rows(got, x, &dequantize(bytes), ggml, &steps);
        }
    }

    #[test]
    fn matmul_matches_llama_cpp_q5_0_q8_0_arithmetic_row_by_row() {
        let mut rng = ChaCha8Rng::seed_from_u64(50);
        // 5 rows: pairs and a lone last row; 896 columns (Qwen2.5-0.5B's): a full unit of 16
        // blocks and a last one of 12; 13 activation rows: whole tiles of 4 and a lone row.
        let (rows, cols, t) = (5, 896, 13);
        let bytes = gguf_blocks(rows, cols, &mut rng);
        let x: Vec<f32> = (0..t).flat_map(|_| activations(cols, &mut rng)).collect();
        check(rows, cols, &bytes, &x, t);
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
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| if i % 5 == 0 { -1.0 } else { 1.0 })
            .collect();
        check(2, cols, &bytes, &x, 2);
    }

    #[test]
    fn activations_are_ggml_q8_0_with_f16_scales_and_lane_offsets() {
        let mut rng = ChaCha8Rng::seed_from_u64(80);
        // 18 blocks: a full unit and a short one.
        let mut x = activations(18 * BLOCK, &mut rng);
        // Block 0: max 127, so the scale is exactly 1 and x.5 rounds to even as ggml's x86
        // `quantize_row_q8_0` does (`_mm256_round_ps`, nearest).
        x[..BLOCK].fill(0.0);
        x[0] = -127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        // Block 1: all zeros.
        x[BLOCK..2 * BLOCK].fill(0.0);
        let q = Q50Rows::from_gguf_blocks(&gguf_blocks(1, x.len(), &mut rng), 1, x.len()).unwrap();
        let a = q.quantize(&x, 1);
        let lane = |b: usize, at: fn(&Activations, usize, usize) -> *const f32| {
            // SAFETY: lane b of the row lies inside the activations.
            unsafe { *at(&a, 0, b / LANES).add(b % LANES) }
        };
        for (b, (d, values)) in ggml_quantize_q8_0(&x).iter().enumerate() {
            assert_eq!(
                lane(b, Activations::scale).to_bits(),
                d.to_bits(),
                "block {b}"
            );
            // SAFETY: as above.
            let start = unsafe { *a.start(0, b / LANES).add(b % LANES) };
            assert_eq!(start, -16 * values.iter().map(|&v| v as i32).sum::<i32>());
            for (i, &v) in values.iter().enumerate() {
                // SAFETY: vector i / 4 of the unit lies inside the activations.
                let got = unsafe {
                    *a.quants(0, b / LANES)
                        .add(64 * (i / 4) + 4 * (b % LANES) + i % 4)
                };
                assert_eq!(got as i8, v, "block {b} value {i}");
            }
        }
        assert_eq!(ggml_quantize_q8_0(&x)[0].1[..3], [-127, 2, -4]);
        // Lanes past the row's end are zero.
        for b in 18..32 {
            assert_eq!(lane(b, Activations::scale), 0.0);
        }
    }

    #[test]
    fn only_whole_blocks_and_exact_byte_counts_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let bytes = gguf_blocks(2, 256, &mut rng);
        assert!(Q50Rows::from_gguf_blocks(&bytes, 2, 256).is_some());
        assert!(Q50Rows::from_gguf_blocks(&bytes[..4 * GGUF_BLOCK_BYTES], 2, 64).is_some());
        assert!(Q50Rows::from_gguf_blocks(&bytes[..3 * GGUF_BLOCK_BYTES], 2, 48).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes, 3, 256).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes[1..], 2, 256).is_none());
        assert!(Q50Rows::from_gguf_blocks(&bytes, usize::MAX, 256).is_none());
        let q = Q50Rows::from_gguf_blocks(&bytes, 2, 256).unwrap();
        assert!(matmul(&q, &[0.0; 128], 1).is_none());
    }
}
