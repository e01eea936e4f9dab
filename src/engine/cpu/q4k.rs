//! Products with Q4_K weights as stored in GGUF, with AVX-512 VNNI (layout and driver in
//! `cpu::matmul`).
//!
//! Why our own: candle has no AVX-512 VNNI kernel for the k-quants, so `dense-q8` decoded these
//! tensors through a Q8_0 copy of the dequantized weights (8.5 bits per weight streamed per token
//! where the file holds 4.5, and logits that differ from llama.cpp's), and prefill multiplied a
//! dense f32 copy. This file multiplies the stored blocks with llama.cpp's arithmetic:
//! activations quantized to Q8_K, per 32-value sub-block `j` the exact integer `Σ q4 · q8` times
//! `d · scale_j · d_x`, minus `dmin · min_j · d_x · Σ q8`.
//!
//! The kernel's lanes are sub-blocks (a unit is two super-blocks). Bytes are reordered at load,
//! never re-quantized: byte `4j + i` of packed vector `p` holds value `4p + i` of sub-block `j`
//! (low nibble) and value `16 + 4p + i` (high nibble); the 6-bit scales and mins of a unit
//! become 16 bytes of low nibbles and 64 bits of top bits, as many bytes as the file's.

use super::matmul::{interleave, Activations, AlignedBytes, RowMut, StoredRows, Units};
use super::qk::{quantize_row_q8k, QK_K};

/// Bytes of one GGUF `block_q4_K`: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit scales and
/// mins, 128 bytes of nibbles.
const GGUF_BLOCK_BYTES: usize = 144;
/// Values per sub-block (lane).
const SUB: usize = 32;
/// Nibble bytes per lane.
const LANE_BYTES: usize = SUB / 2;
/// Bytes of a unit's scales and mins: 16 bytes of low nibbles, 8 of top bits.
const SCALE_BYTES: usize = 24;
/// Software prefetch distance in the pair stream: 4 KB of nibbles ahead.
const PF: usize = 4096;

/// A Q4_K weight matrix `[rows, cols]` in the [`Units`] layout: per unit 4 packed vectors of
/// nibbles, [`SCALE_BYTES`] of scales and mins, and the f16 `d`, `dmin` of its two super-blocks
/// (zero past the row's end).
#[derive(Debug, Clone)]
pub(crate) struct Q4KRows {
    rows: usize,
    cols: usize,
    units: Units,
    nibbles: AlignedBytes,
    scales: Vec<u8>,
    dmin: Vec<[u16; 4]>,
}

/// The 6-bit scale and min of each of the 8 sub-blocks of a Q4_K super-block (ggml's
/// `get_scale_min_k4`): 0..4 in the low 6 bits of bytes 0..8, 4..8 in the nibbles of bytes
/// 8..12 with their top two bits in the top bits of bytes 0..8.
fn q4k_scales_mins(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut scales, mut mins) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        if j < 4 {
            scales[j] = packed[j] & 63;
            mins[j] = packed[j + 4] & 63;
        } else {
            scales[j] = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
            mins[j] = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
        }
    }
    (scales, mins)
}

/// Nibble `v` (0..256) of GGUF Q4_K `qs`: each 32 bytes hold 64 values, the first 32 in the low
/// nibbles, the next 32 in the high nibbles.
fn q4k_nibble(qs: &[u8], v: usize) -> u8 {
    let (chunk, r) = (v / 64, v % 64);
    if r < 32 {
        qs[32 * chunk + r] & 0x0F
    } else {
        qs[32 * chunk + r - 32] >> 4
    }
}

impl Q4KRows {
    /// Reorders GGUF Q4_K blocks (`rows · cols / 256` blocks of 144 bytes); `None` unless `cols`
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
        let mut nibbles = AlignedBytes::zeroed(units.packed_len(LANE_BYTES));
        let mut scales = vec![0u8; SCALE_BYTES * units.count()];
        let mut dmin = vec![[0u16; 4]; units.count()];
        let dst = nibbles.bytes_mut();
        for (i, block) in bytes.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
            let (r, sb) = (i / per_row, i % per_row);
            let u = sb / 2;
            let (at, lanes, unit) = (
                units.offset(r, u, LANE_BYTES),
                units.lanes(u),
                units.index(r, u),
            );
            let half = 2 * (sb % 2);
            dmin[unit][half] = u16::from_le_bytes([block[0], block[1]]);
            dmin[unit][half + 1] = u16::from_le_bytes([block[2], block[3]]);
            let (sc, mins) = q4k_scales_mins(&block[4..16]);
            let packed = &mut scales[SCALE_BYTES * unit..][..SCALE_BYTES];
            let mut top = u64::from_le_bytes(packed[16..].try_into().ok()?);
            for sub in 0..8 {
                let j = 8 * (sb % 2) + sub;
                packed[j] = (sc[sub] & 0x0F) | (mins[sub] << 4);
                top |=
                    ((sc[sub] >> 4) as u64) << (2 * j) | ((mins[sub] >> 4) as u64) << (32 + 2 * j);
                for p in 0..4 {
                    for e in 0..4 {
                        let low = q4k_nibble(&block[16..], SUB * sub + 4 * p + e);
                        let high = q4k_nibble(&block[16..], SUB * sub + 16 + 4 * p + e);
                        dst[at + 4 * (p * lanes + j) + e] = low | (high << 4);
                    }
                }
            }
            packed[16..].copy_from_slice(&top.to_le_bytes());
        }
        Some(Self {
            rows,
            cols,
            units,
            nibbles,
            scales,
            dmin,
        })
    }
}

/// Q8_K activations for 32-value lanes: the super-block's scale `d_x`, and `d_x ·` the sum of the
/// lane's 32 values (for the mins).
fn fill_q8k_32(x: &[f32], row: RowMut<'_>) {
    let blocks = x.len() / QK_K;
    let mut quants = vec![0i8; x.len()];
    let mut d = vec![0f32; blocks];
    let mut bsums = vec![0i16; x.len() / 16];
    quantize_row_q8k(x, &mut quants, &mut d, &mut bsums);
    interleave(&quants, SUB, row.quants);
    for (j, pair) in bsums.chunks_exact(2).enumerate() {
        let d = d[j / (QK_K / SUB)];
        row.scale[j] = d;
        row.extra[j] = (pair[0] as i32 + pair[1] as i32) as f32 * d;
    }
}

impl StoredRows for Q4KRows {
    const ROWS: usize = 4;

    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn quantize(&self, x: &[f32], rows: usize) -> Activations {
        Activations::new(x, rows, self.units.units(), 8, fill_q8k_32)
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
    w: &Q4KRows,
    rows: [usize; 2],
    x: &Activations,
    first: usize,
) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let low4 = _mm512_set1_epi8(0x0F);
    let (fifteen, top2) = (_mm512_set1_epi32(15), _mm512_set1_epi32(0x30));
    // Lane j's two top bits sit at bits 2j..2j + 2 of a 32-bit word.
    let top_shift = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    // Lanes 0..8 take super-block 0's d (or dmin), lanes 8..16 super-block 1's.
    let d_lanes = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    let dmin_lanes = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
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
            if N == 1 {
                for &at in &at {
                    for line in 0..4 {
                        _mm_prefetch::<_MM_HINT_T0>(
                            nibbles.wrapping_add(at + PF + 64 * line).cast(),
                        );
                    }
                }
            }
            for p in 0..4 {
                let mut q = [[_mm512_setzero_si512(); 2]; 2];
                for (q, &at) in q.iter_mut().zip(&at) {
                    let v = _mm512_loadu_si512(nibbles.add(at + 4 * p * lanes).cast());
                    q[0] = _mm512_and_si512(v, low4);
                    q[1] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4);
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
            // Per lane d · scale and dmin · min, both exact in f32 (11 by 6 bits).
            let mut scaled = [[_mm512_setzero_ps(); 2]; 2];
            for (scaled, &i) in scaled.iter_mut().zip(&unit) {
                let packed = w.scales.as_ptr().add(SCALE_BYTES * i);
                let low = _mm512_cvtepu8_epi32(_mm_loadu_si128(packed.cast()));
                let top = packed.add(16).cast::<u64>().read_unaligned();
                let mut top_bits = [_mm512_setzero_si512(); 2];
                for (bits, word) in top_bits.iter_mut().zip([top, top >> 32]) {
                    let t = _mm512_srlv_epi32(_mm512_set1_epi32(word as u32 as i32), top_shift);
                    *bits = _mm512_and_si512(_mm512_slli_epi32::<4>(t), top2);
                }
                let scale = _mm512_or_si512(_mm512_and_si512(low, fifteen), top_bits[0]);
                let min = _mm512_or_si512(_mm512_srli_epi32::<4>(low), top_bits[1]);
                let dm = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(
                    w.dmin.as_ptr().add(i).cast(),
                )));
                scaled[0] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(scale),
                    _mm512_permutexvar_ps(d_lanes, dm),
                );
                scaled[1] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(min),
                    _mm512_permutexvar_ps(dmin_lanes, dm),
                );
            }
            for (n, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let dx = _mm512_loadu_ps(x.scale(first + n, u));
                let bx = _mm512_loadu_ps(x.extra(first + n, u));
                for s in 0..2 {
                    let [scale, min] = scaled[s];
                    let scale = _mm512_mul_ps(scale, dx);
                    acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s]), scale, acc[s]);
                    acc[s] = _mm512_fnmadd_ps(min, bx, acc[s]);
                }
            }
        }
    }
    super::matmul::reduce(acc)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const N: usize>(
    _: &Q4KRows,
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

    /// GGUF Q4_K blocks: random packed scales and nibbles, sane positive f16 `d` and `dmin`.
    fn q4k_blocks(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / QK_K {
            bytes.extend(f16_bytes(rng.random_range(0.0005..0.004)));
            bytes.extend(f16_bytes(rng.random_range(0.0005..0.004)));
            bytes.extend((0..140).map(|_| rng.random::<u8>()));
        }
        bytes
    }

    /// `ggml_vec_dot_q4_K_q8_K` (the generic C), written out: the scales unpacked with the
    /// kmask dance on u32 words, integer sums per sub-block in 8 lanes, f32 sums in 8 lanes.
    /// Also returns Σ |d · lane|, the scale of its f32 rounding.
    fn ggml_dot_q4k(row: &[u8], y: &[Q8K]) -> (f32, f64) {
        let (mut sumf, mut sums, mut norm) = (0f32, [0f32; 8], 0f64);
        for (x, y) in row.chunks_exact(GGUF_BLOCK_BYTES).zip(y) {
            let mut aux8 = [0i32; QK_K];
            for j in 0..4 {
                for l in 0..32 {
                    aux8[64 * j + l] = (x[16 + 32 * j + l] & 0x0F) as i32;
                    aux8[64 * j + 32 + l] = (x[16 + 32 * j + l] >> 4) as i32;
                }
            }
            let word = |i: usize| {
                u32::from_le_bytes([x[4 + 4 * i], x[5 + 4 * i], x[6 + 4 * i], x[7 + 4 * i]])
            };
            let mut utmp = [word(0), word(1), word(2), 0];
            utmp[3] = ((utmp[2] >> 4) & 0x0f0f_0f0f) | (((utmp[1] >> 6) & 0x0303_0303) << 4);
            let uaux = utmp[1] & 0x3f3f_3f3f;
            utmp[1] = (utmp[2] & 0x0f0f_0f0f) | (((utmp[0] >> 6) & 0x0303_0303) << 4);
            utmp[2] = uaux;
            utmp[0] &= 0x3f3f_3f3f;
            let bytes: Vec<u8> = utmp.iter().flat_map(|w| w.to_le_bytes()).collect();
            let (scales, mins) = (&bytes[..8], &bytes[8..]);
            let sumi: i32 = (0..16)
                .map(|j| y.bsums[j] as i32 * mins[j / 2] as i32)
                .sum();
            let mut aux32 = [0i32; 8];
            for j in 0..8 {
                for l in 0..32 {
                    aux32[l % 8] += scales[j] as i32 * (y.qs[32 * j + l] as i32 * aux8[32 * j + l]);
                }
            }
            let d = f16_at(x, 0) * y.d;
            for l in 0..8 {
                sums[l] += d * aux32[l] as f32;
            }
            let dmin = f16_at(x, 2) * y.d;
            sumf -= dmin * sumi as f32;
            norm += d.abs() as f64 * aux32.iter().map(|&v| (v as f64).abs()).sum::<f64>()
                + (dmin as f64 * sumi as f64).abs();
        }
        (sumf + sums.iter().sum::<f32>(), norm)
    }

    /// ggml's `dequantize_row_q4_K`, written out.
    fn dequantize_q4k(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for x in bytes.chunks_exact(GGUF_BLOCK_BYTES) {
            let (d, min) = (f16_at(x, 0), f16_at(x, 2));
            let (scales, mins) = q4k_scales_mins(&x[4..16]);
            for j in 0..4 {
                let q = &x[16 + 32 * j..][..32];
                let (d1, m1) = (d * scales[2 * j] as f32, min * mins[2 * j] as f32);
                let (d2, m2) = (d * scales[2 * j + 1] as f32, min * mins[2 * j + 1] as f32);
                out.extend(q.iter().map(|&b| d1 * (b & 0xF) as f32 - m1));
                out.extend(q.iter().map(|&b| d2 * (b >> 4) as f32 - m2));
            }
        }
        out
    }

    /// `t` activation rows through the kernel: each row bitwise independent of the others
    /// (`independent_rows`), and each within rounding of ggml's arithmetic.
    fn check(rows: usize, cols: usize, bytes: &[u8], x: &[f32], t: usize) {
        let q = Q4KRows::from_gguf_blocks(bytes, rows, cols).unwrap();
        let Some(got) = independent_rows(&q, x, t) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let row_bytes = cols / QK_K * GGUF_BLOCK_BYTES;
        for (x, got) in x.chunks_exact(cols).zip(got.chunks_exact(rows)) {
            let y = ggml_quantize_q8k(x);
            let ggml = |r: usize| ggml_dot_q4k(&bytes[r * row_bytes..][..row_bytes], &y);
            check_rows(got, x, &dequantize_q4k(bytes), ggml, &q8k_steps(&y));
        }
    }

    #[test]
    fn matmul_matches_llama_cpp_q4_k_q8_k_arithmetic_row_by_row() {
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        // 7 rows: pairs and a lone last row; 3 super-blocks per row: a full unit and a half
        // one; 13 activation rows: whole tiles and a lone row.
        let (rows, cols, t) = (7, 768, 13);
        let bytes = q4k_blocks(rows, cols, &mut rng);
        let x: Vec<f32> = (0..t).flat_map(|_| activations(cols, &mut rng)).collect();
        check(rows, cols, &bytes, &x, t);
    }

    #[test]
    fn extreme_values_stay_exact() {
        // All nibbles and scale bits set, activations at ±127: the 32-bit sums at their largest.
        let cols = 512;
        let mut bytes = Vec::new();
        for _ in 0..2 * cols / QK_K {
            bytes.extend(f16_bytes(0.001));
            bytes.extend(f16_bytes(0.002));
            bytes.extend([0xFF; 140]);
        }
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        check(2, cols, &bytes, &x, 2);
    }

    #[test]
    fn only_whole_super_blocks_and_exact_byte_counts_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let bytes = q4k_blocks(2, 512, &mut rng);
        assert!(Q4KRows::from_gguf_blocks(&bytes, 2, 512).is_some());
        // 128 columns: not a whole super-block.
        assert!(Q4KRows::from_gguf_blocks(&bytes[..GGUF_BLOCK_BYTES], 2, 128).is_none());
        assert!(Q4KRows::from_gguf_blocks(&bytes, 3, 512).is_none());
        assert!(Q4KRows::from_gguf_blocks(&bytes[1..], 2, 512).is_none());
        assert!(Q4KRows::from_gguf_blocks(&[], 0, 0).is_none());
        assert!(Q4KRows::from_gguf_blocks(&bytes, usize::MAX, 512).is_none());
        let q = Q4KRows::from_gguf_blocks(&bytes, 2, 512).unwrap();
        assert!(matmul(&q, &[0.0; 256], 1).is_none());
    }
}
