//! Products with Q4_1 weights as stored in GGUF, with AVX-512 VNNI (layout and driver in
//! `cpu::matmul`).
//!
//! Why our own: candle has no SIMD kernel for Q4_1, so `dense-q8` decoded through a Q8_0 copy of
//! the weights (8.5 bits per weight), while llama.cpp reads the 5-bit blocks as stored. Decoding
//! a small model is bound by how fast the weights stream from cache and memory (SmolLM2-135M:
//! 143 MB per token as Q8_0, 96 MB as stored), so this file multiplies the stored blocks directly,
//! with llama.cpp's arithmetic: activations quantized to Q8_1 (per-32 block scale `d` and
//! `s = d·Σq`), `Σ_blocks d_w·d_x·Σ q_w q_x + m_w·s_x`, block scales kept as stored (f16).
//!
//! At load the nibbles are reordered, not re-quantized: byte `4j + i` of packed vector `p` of a
//! unit holds value `4p + i` of block `j` (low nibble) and value `16 + 4p + i` (high nibble),
//! as GGUF's byte `4p + i` of the block does.

use super::matmul::{
    f16x16, interleave, Activations, AlignedBytes, RowMut, StoredRows, Units, LANES,
};
use super::q8::{quantize_row_q8, BLOCK};

/// Bytes of one GGUF `block_q4_1`: f16 `d`, f16 `m`, 16 bytes of nibbles.
const GGUF_BLOCK_BYTES: usize = 20;
/// Nibble bytes per block (lane).
const LANE_BYTES: usize = BLOCK / 2;
/// Software prefetch distance in the pair stream: 4 KB of nibbles ahead.
const PF: usize = 4096;

/// A Q4_1 weight matrix `[rows, cols]` in the [`Units`] layout: per unit 4 packed vectors of
/// nibbles (16 bytes per block), and the 16 f16 `d` and 16 f16 `m` (zero past the row's end).
#[derive(Debug, Clone)]
pub(crate) struct Q41Rows {
    rows: usize,
    cols: usize,
    units: Units,
    nibbles: AlignedBytes,
    d: Vec<u16>,
    m: Vec<u16>,
}

impl Q41Rows {
    /// Reorders GGUF Q4_1 blocks (`rows · cols / 32` blocks of 20 bytes); `None` unless `cols` is
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
        let mut d = vec![0u16; LANES * units.count()];
        let mut m = vec![0u16; LANES * units.count()];
        let dst = nibbles.bytes_mut();
        for (i, block) in bytes.chunks_exact(GGUF_BLOCK_BYTES).enumerate() {
            let (r, b) = (i / per_row, i % per_row);
            let (u, j) = (b / LANES, b % LANES);
            let (at, lanes) = (units.offset(r, u, LANE_BYTES), units.lanes(u));
            let lane = LANES * units.index(r, u) + j;
            d[lane] = u16::from_le_bytes([block[0], block[1]]);
            m[lane] = u16::from_le_bytes([block[2], block[3]]);
            for p in 0..4 {
                dst[at + 4 * (p * lanes + j)..][..4].copy_from_slice(&block[4 + 4 * p..][..4]);
            }
        }
        Some(Self {
            rows,
            cols,
            units,
            nibbles,
            d,
            m,
        })
    }
}

/// Q8_1 activations as llama.cpp's `quantize_row_q8_1` makes them: int8 values, per block `d`
/// and `s = d · Σ quants` rounded to f16 (`s` from the unrounded `d`).
fn fill_q8_1(x: &[f32], row: RowMut<'_>) {
    let blocks = x.len() / BLOCK;
    let mut quants = vec![0i8; x.len()];
    let mut sums = vec![0i32; blocks];
    quantize_row_q8(x, &mut quants, &mut row.scale[..blocks], Some(&mut sums));
    interleave(&quants, BLOCK, row.quants);
    for ((d, s), sum) in row.scale.iter_mut().zip(row.extra.iter_mut()).zip(sums) {
        *s = half::f16::from_f32(*d * sum as f32).to_f32();
        *d = half::f16::from_f32(*d).to_f32();
    }
}

impl StoredRows for Q41Rows {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn quantize(&self, x: &[f32], rows: usize) -> Activations {
        Activations::new(x, rows, self.units.units(), 8, fill_q8_1)
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
    w: &Q41Rows,
    rows: [usize; 2],
    x: &Activations,
    first: usize,
) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let low4 = _mm512_set1_epi8(0x0F);
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
            let (mut d, mut m) = ([_mm512_setzero_ps(); 2], [_mm512_setzero_ps(); 2]);
            for s in 0..2 {
                d[s] = f16x16(w.d.as_ptr().add(LANES * unit[s]));
                m[s] = f16x16(w.m.as_ptr().add(LANES * unit[s]));
            }
            for (n, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let dx = _mm512_loadu_ps(x.scale(first + n, u));
                let sx = _mm512_loadu_ps(x.extra(first + n, u));
                for s in 0..2 {
                    let scale = _mm512_mul_ps(d[s], dx);
                    acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[s]), scale, acc[s]);
                    acc[s] = _mm512_fmadd_ps(m[s], sx, acc[s]);
                }
            }
        }
    }
    super::matmul::reduce(acc)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const N: usize>(
    _: &Q41Rows,
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
    use crate::engine::cpu::q8::quantize_block_q8;

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
    fn matmul_matches_llama_cpp_q4_1_q8_1_arithmetic_row_by_row() {
        // 5 rows: pairs and a lone last row; 18 blocks (SmolLM2's 576 columns): a full unit and
        // a short one; 13 activation rows: whole tiles and a lone row.
        let (rows, cols, t) = (5, 576, 13);
        let bytes = gguf_blocks(rows, cols);
        let q = Q41Rows::from_gguf_blocks(&bytes, rows, cols).unwrap();
        let x: Vec<f32> = (0..t * cols)
            .map(|i| (i as f32 * 0.37).sin() * 2.0)
            .collect();
        let Some(got) = independent_rows(&q, &x, t) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let weights = dequantize(&bytes);
        let mut xq = [0i8; BLOCK];
        for (i, x) in x.chunks_exact(cols).enumerate() {
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
                let got = got[i * rows + r] as f64;
                assert!(
                    (got - expected).abs() < 1e-4,
                    "row {i}, {r}: {got} vs {expected}"
                );
                // And close to the product with the dequantized weights.
                let exact: f64 = weights[r * cols..][..cols]
                    .iter()
                    .zip(x)
                    .map(|(a, b)| (a * b) as f64)
                    .sum();
                assert!((got - exact).abs() < 0.05, "row {i}, {r}: {exact}");
            }
        }
    }

    #[test]
    fn only_whole_blocks_and_exact_byte_counts_are_accepted() {
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(1, 32), 1, 32).is_some());
        // 2 rows of 48 columns: the size of 3 blocks, but not whole blocks per row.
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(3, 32), 2, 48).is_none());
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(2, 64), 2, 64).is_some());
        assert!(Q41Rows::from_gguf_blocks(&gguf_blocks(2, 64), 3, 64).is_none());
    }
}
