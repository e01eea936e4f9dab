//! Single-row products (decoding) against Q4_K and Q6_K weights as stored in GGUF, with AVX-512
//! VNNI, and the pieces the stored-block kernels share (aligned storage, row pairs).
//!
//! Why our own: candle has no AVX-512 VNNI kernel for the k-quants, so `dense-q8` decoded these
//! tensors through a Q8_0 copy of the dequantized weights: 8.5 bits per weight streamed per token
//! where the file holds 4.5 (Q4_K) or 6.56 (Q6_K), and logits that differ from llama.cpp's.
//! Decoding is bound by how fast the weights stream, so this file multiplies the stored blocks
//! with llama.cpp's arithmetic: activations quantized to Q8_K (`quantize_row_q8_K`: per 256
//! values an f32 scale, int8 values and per-16 sums), per super-block an exact integer sum
//! `Σ_j scale_j · Σ q_w q_x` times `d_w · d_x`, and for Q4_K minus `dmin · d_x · Σ_j min_j · bsum_j`.
//!
//! Bits and bytes are reordered at load (never re-quantized) so that one 512-bit load serves
//! two 64-value steps, and the packed 6-bit Q4_K scales unpack with four vector instructions;
//! memory per weight stays that of the file.

use super::cpu_kernels::{parallel_ranges, SharedOut};

/// Values per k-quant super-block (ggml's `QK_K`).
pub(crate) const QK_K: usize = 256;
/// Bytes of one GGUF `block_q4_K`: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit scales and
/// mins, 128 bytes of nibbles.
const Q4K_BLOCK_BYTES: usize = 144;
/// Software prefetch distance, in units of the interleaved pair stream (32 super-blocks: 4 KB of
/// nibbles ahead). The hardware prefetcher alone left the k-quant kernels below the bandwidth
/// the Q8_0 rows reach; A/B from memory, 1 thread: 896x4864 Q4_K 165 -> 156 us, Q6_K 227 ->
/// 196 us.
const PF: usize = 32;
/// Bytes of one GGUF `block_q6_K`: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8
/// scales, f16 `d`.
const Q6K_BLOCK_BYTES: usize = 210;

/// One cache line, so the byte arrays the kernels stream start on a line and their 64-byte loads
/// never straddle two.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// Zero-initialized bytes starting on a 64-byte boundary.
#[derive(Clone)]
pub(crate) struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBytes {
    pub(crate) fn zeroed(len: usize) -> Self {
        Self {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `Line` is 64 plain bytes without padding; `len` ≤ 64 · lines.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and the borrow is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

/// `out[r]` for every row, two rows per call of `dot2(first, second)` so that the rows share the
/// activation loads (`second == first` for a lone last row), spread over candle's pool.
pub(crate) fn for_row_pairs(out: &mut [f32], dot2: impl Fn(usize, usize) -> (f32, f32) + Sync) {
    let rows = out.len();
    let shared = SharedOut(out.as_mut_ptr());
    parallel_ranges(rows.div_ceil(2), |pairs| {
        for pair in pairs {
            let first = 2 * pair;
            let second = (first + 1).min(rows - 1);
            let (a, b) = dot2(first, second);
            // SAFETY: both indices are below `rows`; each pair is handled by one task only.
            unsafe {
                *shared.ptr().add(first) = a;
                if second != first {
                    *shared.ptr().add(second) = b;
                }
            }
        }
    });
}

/// Where unit `u` (a super-block, a group of blocks) of row `r` is stored, `per_row` units a
/// row: the two rows of each pair are interleaved unit by unit, so the rows a kernel step reads
/// form one sequential stream per array (a lone last row is stored alone). Two streams a row
/// apart (2.4 KB for 4864 Q4_K columns) left the hardware prefetcher idle: from memory, Q4_K
/// decoding ran at half the bandwidth Q8_0 rows reached.
pub(crate) fn interleaved(rows: usize, per_row: usize, r: usize, u: usize) -> usize {
    let base = (r & !1) * per_row;
    if (r | 1) < rows {
        base + 2 * u + (r & 1)
    } else {
        base + u
    }
}

/// The unit index of [`interleaved`] for the rows of a kernel step: `base + stride · u + slot`.
#[derive(Clone, Copy)]
pub(crate) struct PairUnits {
    base: usize,
    stride: usize,
}

impl PairUnits {
    /// Rows `rows[0]` and `rows[1]` of a `for_row_pairs` step (equal for a lone last row).
    pub(crate) fn new(rows: [usize; 2], per_row: usize) -> Self {
        Self {
            base: rows[0] * per_row,
            stride: if rows[1] != rows[0] { 2 } else { 1 },
        }
    }

    /// Unit `u` of the step's row `slot` (0 or 1).
    #[inline(always)]
    pub(crate) fn unit(self, slot: usize, u: usize) -> usize {
        self.base + self.stride * u + slot * (self.stride - 1)
    }
}

/// `rows · per_row` when it fits in memory arithmetic.
fn checked_len(rows: usize, per_row: usize) -> Option<usize> {
    rows.checked_mul(per_row)
}

/// One activation row quantized to Q8_K as llama.cpp's `quantize_row_q8_K` does.
pub(crate) struct Q8KActivations {
    quants: Vec<i8>,
    d: Vec<f32>,
    /// Sums of each 16 quantized values (ggml's `bsums`).
    bsums: Vec<i16>,
    /// `-32 · (q[2i] + q[2i + 1])`: Q6_K's offset of 32, added to each 16-bit pair product so
    /// that every lane holds its own values' exact `Σ (q6 - 32) · q8`, as ggml's lanes do (one
    /// correction per super-block instead left a few lanes large, and their f32 rounding with it).
    neg32_pairs: Vec<i16>,
}

impl Q8KActivations {
    /// `x.len()` must be a multiple of [`QK_K`].
    pub(crate) fn new(x: &[f32]) -> Self {
        let blocks = x.len() / QK_K;
        let mut quants = vec![0i8; x.len()];
        let mut d = vec![0f32; blocks];
        let mut bsums = vec![0i16; blocks * QK_K / 16];
        quantize_row_q8k(x, &mut quants, &mut d, &mut bsums);
        let neg32_pairs = neg32_pairs(&quants);
        Self {
            quants,
            d,
            bsums,
            neg32_pairs,
        }
    }
}

/// `-32 · (q[2i] + q[2i + 1])` for each pair (vectorized: the scalar loop took twice as long as
/// quantizing the row).
fn neg32_pairs(quants: &[i8]) -> Vec<i16> {
    let mut out = vec![0i16; quants.len() / 2];
    #[cfg(target_arch = "x86_64")]
    if super::cpu_q8::supported() {
        // SAFETY: `supported()` checked the features; `out` holds half as many values.
        unsafe { neg32_pairs_avx512(quants, &mut out) };
        return out;
    }
    for (o, p) in out.iter_mut().zip(quants.chunks_exact(2)) {
        *o = -32 * (p[0] as i16 + p[1] as i16);
    }
    out
}

/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks;
/// `out.len() == quants.len() / 2`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn neg32_pairs_avx512(quants: &[i8], out: &mut [i16]) {
    use std::arch::x86_64::*;
    let mut chunks = quants.chunks_exact(64);
    let mut o = 0;
    for chunk in &mut chunks {
        // SAFETY: 64 bytes in, 32 words out, both in bounds.
        unsafe {
            let pairs = _mm512_maddubs_epi16(
                _mm512_set1_epi8(32),
                _mm512_loadu_si512(chunk.as_ptr().cast()),
            );
            _mm512_storeu_si512(
                out.as_mut_ptr().add(o).cast(),
                _mm512_sub_epi16(_mm512_setzero_si512(), pairs),
            );
        }
        o += 32;
    }
    for (o, p) in out[o..].iter_mut().zip(chunks.remainder().chunks_exact(2)) {
        *o = -32 * (p[0] as i16 + p[1] as i16);
    }
}

/// ggml's `quantize_row_q8_K_ref` on one super-block: the value of largest magnitude (the first
/// one on ties) maps to -127, so `d = -max / 127` takes the opposite sign of that value; values
/// round to nearest with ties to even (ggml's `nearest_int`) and are clamped above at 127.
fn quantize_block_q8k(xs: &[f32], quants: &mut [i8], bsums: &mut [i16]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &x in xs {
        if x.abs() > amax {
            amax = x.abs();
            max = x;
        }
    }
    if amax == 0.0 {
        quants.fill(0);
        bsums.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &x) in quants.iter_mut().zip(xs) {
        *q = ((iscale * x).round_ties_even() as i32).min(127) as i8;
    }
    for (sum, qs) in bsums.iter_mut().zip(quants.chunks_exact(16)) {
        *sum = qs.iter().map(|&q| q as i16).sum();
    }
    1.0 / iscale
}

/// [`quantize_block_q8k`] over a row of whole super-blocks; vectorized where the VNNI kernels run.
pub(crate) fn quantize_row_q8k(x: &[f32], quants: &mut [i8], d: &mut [f32], bsums: &mut [i16]) {
    let blocks = x.len() / QK_K;
    assert!(
        x.len() == blocks * QK_K
            && quants.len() == x.len()
            && d.len() == blocks
            && bsums.len() == blocks * QK_K / 16,
        "quantize_row_q8k: mismatched lengths"
    );
    for (b, ((xs, qs), sums)) in x
        .chunks_exact(QK_K)
        .zip(quants.chunks_exact_mut(QK_K))
        .zip(bsums.chunks_exact_mut(QK_K / 16))
        .enumerate()
    {
        #[cfg(target_arch = "x86_64")]
        if super::cpu_q8::supported() {
            // SAFETY: `supported()` checked the features; the chunks hold one super-block.
            if let Some(scale) = unsafe { quantize_block_q8k_avx512(xs, qs, sums) } {
                d[b] = scale;
                continue;
            }
        }
        d[b] = quantize_block_q8k(xs, qs, sums);
    }
}

/// [`quantize_block_q8k`] with AVX-512; `None` when no value matches the maximum magnitude
/// (NaNs), left to the scalar code.
///
/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; `xs` and `quants`
/// hold [`QK_K`] values, `bsums` 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn quantize_block_q8k_avx512(
    xs: &[f32],
    quants: &mut [i8],
    bsums: &mut [i16],
) -> Option<f32> {
    use std::arch::x86_64::*;
    let load = |i: usize| {
        // SAFETY: chunk i (16 values) lies inside the super-block.
        unsafe { _mm512_loadu_ps(xs.as_ptr().add(16 * i)) }
    };
    let mut amax = _mm512_setzero_ps();
    for i in 0..16 {
        amax = _mm512_max_ps(amax, _mm512_abs_ps(load(i)));
    }
    let amax = _mm512_reduce_max_ps(amax);
    if amax == 0.0 {
        quants.fill(0);
        bsums.fill(0);
        return Some(0.0);
    }
    // The signed value of the first element of largest magnitude, as the scalar scan finds it.
    let mut max = None;
    for i in 0..16 {
        let hits = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(load(i)), _mm512_set1_ps(amax));
        if hits != 0 {
            max = Some(xs[16 * i + hits.trailing_zeros() as usize]);
            break;
        }
    }
    let iscale = -127.0 / max?;
    let scale = _mm512_set1_ps(iscale);
    let top = _mm512_set1_epi32(127);
    // Sums of 8 bytes each need unsigned bytes: bias by 128 (xor the sign bit), remove it after.
    let bias = _mm512_set1_epi8(i8::MIN);
    let mut pair_sums = [_mm_setzero_si128(); 4];
    for (quarter, sums) in pair_sums.iter_mut().enumerate() {
        let mut bytes = [_mm_setzero_si128(); 4];
        for (j, b) in bytes.iter_mut().enumerate() {
            // The default rounding mode: nearest, ties to even, as `nearest_int`.
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(load(4 * quarter + j), scale));
            *b = _mm512_cvtsepi32_epi8(_mm512_min_epi32(q, top));
        }
        let q64 = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set_m128i(bytes[1], bytes[0])),
            _mm256_set_m128i(bytes[3], bytes[2]),
        );
        // SAFETY: quarter `quarter` (64 bytes) lies inside `quants`.
        unsafe { _mm512_storeu_si512(quants.as_mut_ptr().add(64 * quarter).cast(), q64) };
        // Eight sums of 8 biased bytes: two per 16 values.
        *sums = _mm512_cvtepi64_epi16(_mm512_sad_epu8(
            _mm512_xor_si512(q64, bias),
            _mm512_setzero_si512(),
        ));
    }
    let unbias = _mm_set1_epi16(16 * 128);
    let low = _mm_sub_epi16(_mm_hadd_epi16(pair_sums[0], pair_sums[1]), unbias);
    let high = _mm_sub_epi16(_mm_hadd_epi16(pair_sums[2], pair_sums[3]), unbias);
    // SAFETY: `bsums` holds 16 values.
    unsafe {
        _mm_storeu_si128(bsums.as_mut_ptr().cast(), low);
        _mm_storeu_si128(bsums.as_mut_ptr().add(8).cast(), high);
    }
    Some(1.0 / iscale)
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

/// The 16 six-bit values `t` = scales then mins, repacked into 12 bytes that unpack with a few
/// vector instructions: byte `j < 8` holds the low 4 bits of `t[j]` (low nibble) and `t[8 + j]`
/// (high nibble); bytes 8..12, read as a little-endian u32, hold the top two bits of `t[4d + k]`
/// at bit `8k + 2d`, so rotating dword `d` left by `4 - 2d` lands them at bits 4..6 of byte `k`.
fn q4k_repack_scales(scales: [u8; 8], mins: [u8; 8]) -> [u8; 12] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&scales);
    t[8..].copy_from_slice(&mins);
    let mut out = [0u8; 12];
    for j in 0..8 {
        out[j] = (t[j] & 0x0F) | ((t[8 + j] & 0x0F) << 4);
    }
    let mut high = 0u32;
    for (i, &v) in t.iter().enumerate() {
        let (d, k) = (i / 4, i % 4);
        high |= ((v >> 4) as u32 & 3) << (8 * k + 2 * d);
    }
    out[8..].copy_from_slice(&high.to_le_bytes());
    out
}

/// A Q4_K weight matrix `[rows, cols]`, super-blocks stored in [`interleaved`] order. Per
/// super-block: 128 nibble bytes where, in each half of
/// 128 values, byte `i` holds value `i` (low nibble) and value `64 + i` (high nibble); 12 bytes of
/// scales and mins ([`q4k_repack_scales`]); `d` and `dmin` (f16) as one u32.
#[derive(Debug, Clone)]
pub(crate) struct Q4KRows {
    rows: usize,
    cols: usize,
    nibbles: AlignedBytes,
    scales: Vec<u8>,
    dmin: Vec<u32>,
}

/// Nibble `u` (0..256) of GGUF Q4_K `qs`: each 32 bytes hold 64 values, the first 32 in the low
/// nibbles, the next 32 in the high nibbles.
fn q4k_nibble(qs: &[u8], u: usize) -> u8 {
    let (chunk, r) = (u / 64, u % 64);
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
        if cols == 0 || !cols.is_multiple_of(QK_K) {
            return None;
        }
        let blocks = checked_len(rows, cols / QK_K)?;
        if bytes.len() != checked_len(blocks, Q4K_BLOCK_BYTES)? {
            return None;
        }
        let mut nibbles = AlignedBytes::zeroed(blocks * QK_K / 2);
        let mut scales = vec![0u8; blocks * 12];
        let mut dmin = vec![0u32; blocks];
        let dst = nibbles.bytes_mut();
        for (i, block) in bytes.chunks_exact(Q4K_BLOCK_BYTES).enumerate() {
            let b = interleaved(rows, cols / QK_K, i / (cols / QK_K), i % (cols / QK_K));
            dmin[b] = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
            let (sc, m) = q4k_scales_mins(&block[4..16]);
            scales[12 * b..12 * b + 12].copy_from_slice(&q4k_repack_scales(sc, m));
            let qs = &block[16..];
            let out = &mut dst[b * QK_K / 2..][..QK_K / 2];
            for half in 0..2 {
                for i in 0..64 {
                    let low = q4k_nibble(qs, 128 * half + i);
                    let high = q4k_nibble(qs, 128 * half + 64 + i);
                    out[64 * half + i] = low | (high << 4);
                }
            }
        }
        Some(Self {
            rows,
            cols,
            nibbles,
            scales,
            dmin,
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
        let activations = Q8KActivations::new(x);
        let mut out = vec![0f32; self.rows];
        // SAFETY: `supported()` checked the features; rows are below `self.rows`.
        for_row_pairs(&mut out, |a, b| unsafe {
            dot2_q4k(self, [a, b], &activations)
        });
        Some(out)
    }
}

/// A Q6_K weight matrix `[rows, cols]`, super-blocks stored in [`interleaved`] order. Per
/// super-block: the 128 low-nibble bytes as stored
/// (in each half of 128 values byte `i` holds value `i` and value `64 + i`); 64 bytes of high
/// bit pairs reordered so that bits `2s..2s + 2` of byte `i` belong to value `64s + i`; the 16
/// int8 scales; `d` (f16).
#[derive(Debug, Clone)]
pub(crate) struct Q6KRows {
    rows: usize,
    cols: usize,
    low: AlignedBytes,
    high: AlignedBytes,
    scales: Vec<i8>,
    d: Vec<u16>,
}

impl Q6KRows {
    /// Reorders GGUF Q6_K blocks (`rows · cols / 256` blocks of 210 bytes); `None` unless `cols`
    /// is a multiple of 256 and `bytes` holds exactly the matrix.
    pub(crate) fn from_gguf_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(QK_K) {
            return None;
        }
        let blocks = checked_len(rows, cols / QK_K)?;
        if bytes.len() != checked_len(blocks, Q6K_BLOCK_BYTES)? {
            return None;
        }
        let mut low = AlignedBytes::zeroed(blocks * QK_K / 2);
        let mut high = AlignedBytes::zeroed(blocks * QK_K / 4);
        let mut scales = vec![0i8; blocks * 16];
        let mut d = vec![0u16; blocks];
        let (low_dst, high_dst) = (low.bytes_mut(), high.bytes_mut());
        for (i, block) in bytes.chunks_exact(Q6K_BLOCK_BYTES).enumerate() {
            let b = interleaved(rows, cols / QK_K, i / (cols / QK_K), i % (cols / QK_K));
            low_dst[b * 128..][..128].copy_from_slice(&block[..128]);
            let qh = &block[128..192];
            let out = &mut high_dst[b * 64..][..64];
            // GGUF: value 128h + 32g + l has its top bits at bits 2g..2g+2 of qh[32h + l].
            for u in 0..QK_K {
                let (h, g, l) = (u / 128, (u % 128) / 32, u % 32);
                let bits = (qh[32 * h + l] >> (2 * g)) & 3;
                out[u % 64] |= bits << (2 * (u / 64));
            }
            for (s, &byte) in scales[16 * b..16 * b + 16].iter_mut().zip(&block[192..208]) {
                *s = byte as i8;
            }
            d[b] = u16::from_le_bytes([block[208], block[209]]);
        }
        Some(Self {
            rows,
            cols,
            low,
            high,
            scales,
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
        let activations = Q8KActivations::new(x);
        let mut out = vec![0f32; self.rows];
        // SAFETY: `supported()` checked the features; rows are below `self.rows`.
        for_row_pairs(&mut out, |a, b| unsafe {
            dot2_q6k(self, [a, b], &activations)
        });
        Some(out)
    }
}

/// `ternarylogic` immediates, from the truth tables of its operands a = 0xF0, b = 0xCC, c = 0xAA.
#[cfg(target_arch = "x86_64")]
const A_AND_C_OR_B: i32 = (0xF0 & 0xAA) | 0xCC;
#[cfg(target_arch = "x86_64")]
const A_OR_B_AND_C: i32 = 0xF0 | (0xCC & 0xAA);

/// `vpdpwssd` (acc + pairwise 16-bit products) as one instruction: LLVM splits the intrinsic
/// into `vpmaddwd` + `vpaddd` unless tuning for a CPU it marks fast at it, which generic x86-64
/// is not.
#[cfg(target_arch = "x86_64")]
macro_rules! dpwssd {
    ($acc:expr, $a:expr, $b:expr $(,)?) => {{
        let mut acc = $acc;
        // Used inside the kernels' unsafe blocks. SAFETY: a register-only AVX-512 VNNI
        // instruction; the kernels enable the feature and run only where `supported()` holds.
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) $a,
            b = in(zmm_reg) $b,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    }};
}

/// Byte indices for `pshufb` that widen byte `src[lane]` of each 128-bit lane into all 8 words of
/// that lane (zero high bytes).
#[cfg(target_arch = "x86_64")]
const fn word_spread(src: [u8; 4]) -> [u8; 64] {
    let mut out = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        out[i] = if i % 2 == 0 { src[i / 16] } else { 0x80 };
        i += 1;
    }
    out
}

/// Rows `rows[0]` and `rows[1]` of a Q4_K matrix times the activations.
///
/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; both rows are
/// below `w.rows`, and `x` holds `w.cols` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn dot2_q4k(w: &Q4KRows, rows: [usize; 2], x: &Q8KActivations) -> (f32, f32) {
    use std::arch::x86_64::*;
    const SPREAD: [[u8; 64]; 4] = [
        word_spread([0, 0, 1, 1]),
        word_spread([2, 2, 3, 3]),
        word_spread([4, 4, 5, 5]),
        word_spread([6, 6, 7, 7]),
    ];
    // Words j = 0..16 take min j / 2 (bytes 8..16 of each lane), the pairing of ggml's bsums.
    const MIN_WORDS: [u8; 32] = {
        let mut out = [0x80u8; 32];
        let mut j = 0;
        while j < 16 {
            out[2 * j] = 8 + (j / 2) as u8;
            j += 1;
        }
        out
    };
    let blocks = w.cols / QK_K;
    let low4 = _mm512_set1_epi8(0x0F);
    let bits45 = _mm512_set1_epi8(0x30);
    // Per 128-bit lane: qword 0 keeps the low nibbles (scales), qword 1 the high (mins).
    let nibble_shift = _mm512_set_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    let top_rotate = _mm512_set_epi32(30, 0, 2, 4, 30, 0, 2, 4, 30, 0, 2, 4, 30, 0, 2, 4);
    // SAFETY (loads of constants): each array holds the bytes read.
    let spread = SPREAD.map(|s| unsafe { _mm512_loadu_si512(s.as_ptr().cast()) });
    let min_words = unsafe { _mm256_loadu_si256(MIN_WORDS.as_ptr().cast()) };
    let nibbles = w.nibbles.bytes().as_ptr();
    let units = PairUnits::new(rows, blocks);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut acc_min = [_mm256_setzero_ps(); 2];
    for b in 0..blocks {
        // SAFETY: super-block b of the activations and of both rows lies inside the arrays.
        unsafe {
            let xq = x.quants.as_ptr().add(b * QK_K);
            let xs = [0, 1, 2, 3].map(|i| _mm512_loadu_si512(xq.add(64 * i).cast()));
            let bsums = _mm256_loadu_si256(x.bsums.as_ptr().add(16 * b).cast());
            // d and dmin of both rows times the activation scale: [d0, m0, d1, m1].
            let dm = _mm_cvtph_ps(_mm_set_epi32(
                0,
                0,
                w.dmin[units.unit(1, b)] as i32,
                w.dmin[units.unit(0, b)] as i32,
            ));
            let dm = _mm_mul_ps(dm, _mm_set1_ps(x.d[b]));
            for r in 0..2 {
                let block = units.unit(r, b);
                let ahead = nibbles.wrapping_add((block + PF) * QK_K / 2);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                let packed = w.scales.as_ptr().add(12 * block);
                let low = _mm512_set1_epi64(packed.cast::<i64>().read_unaligned());
                let high = _mm512_set1_epi32(packed.add(8).cast::<i32>().read_unaligned());
                // Each 128-bit lane: bytes 0..8 the scales, 8..16 the mins.
                let scale_min = _mm512_ternarylogic_epi32::<A_AND_C_OR_B>(
                    _mm512_srlv_epi64(low, nibble_shift),
                    _mm512_and_si512(_mm512_rolv_epi32(high, top_rotate), bits45),
                    low4,
                );
                let mut sums = _mm512_setzero_si512();
                for half in 0..2 {
                    let v = _mm512_load_si512(nibbles.add(block * QK_K / 2 + 64 * half).cast());
                    let lo = _mm512_and_si512(v, low4);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4);
                    // Unsigned nibbles times signed int8 in 16-bit pairs (|·| ≤ 2·15·127), then
                    // times each sub-block's scale in 32 bits: exact.
                    sums = dpwssd!(
                        sums,
                        _mm512_maddubs_epi16(lo, xs[2 * half]),
                        _mm512_shuffle_epi8(scale_min, spread[2 * half]),
                    );
                    sums = dpwssd!(
                        sums,
                        _mm512_maddubs_epi16(hi, xs[2 * half + 1]),
                        _mm512_shuffle_epi8(scale_min, spread[2 * half + 1]),
                    );
                }
                let mins = _mm256_madd_epi16(
                    _mm256_shuffle_epi8(_mm512_castsi512_si256(scale_min), min_words),
                    bsums,
                );
                let d = _mm512_permutexvar_ps(
                    _mm512_set1_epi32(2 * r as i32),
                    _mm512_castps128_ps512(dm),
                );
                let m = _mm256_permutexvar_ps(
                    _mm256_set1_epi32(2 * r as i32 + 1),
                    _mm256_castps128_ps256(dm),
                );
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), d, acc[r]);
                acc_min[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), m, acc_min[r]);
            }
        }
    }
    (
        _mm512_reduce_add_ps(acc[0]) - reduce256(acc_min[0]),
        _mm512_reduce_add_ps(acc[1]) - reduce256(acc_min[1]),
    )
}

/// Rows `rows[0]` and `rows[1]` of a Q6_K matrix times the activations.
///
/// # Safety
/// The CPU must have the features [`supported`](super::cpu_q8::supported) checks; both rows are
/// below `w.rows`, and `x` holds `w.cols` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
unsafe fn dot2_q6k(w: &Q6KRows, rows: [usize; 2], x: &Q8KActivations) -> (f32, f32) {
    use std::arch::x86_64::*;
    // Step s (values 64s..64s + 64): 128-bit lane t holds sub-block 4s + t, so its words take
    // scale 4s + t.
    const SCALE_WORDS: [[u16; 32]; 4] = {
        let mut out = [[0u16; 32]; 4];
        let mut s = 0;
        while s < 4 {
            let mut w = 0;
            while w < 32 {
                out[s][w] = (4 * s + w / 8) as u16;
                w += 1;
            }
            s += 1;
        }
        out
    };
    let blocks = w.cols / QK_K;
    let low4 = _mm512_set1_epi8(0x0F);
    let bits45 = _mm512_set1_epi8(0x30);
    // SAFETY (loads of constants): each array holds the bytes read.
    let scale_words = SCALE_WORDS.map(|s| unsafe { _mm512_loadu_si512(s.as_ptr().cast()) });
    let (low, high) = (w.low.bytes().as_ptr(), w.high.bytes().as_ptr());
    let units = PairUnits::new(rows, blocks);
    let mut acc = [_mm512_setzero_ps(); 2];
    for b in 0..blocks {
        // SAFETY: super-block b of the activations and of both rows lies inside the arrays.
        unsafe {
            let xq = x.quants.as_ptr().add(b * QK_K);
            let xs = [0, 1, 2, 3].map(|i| _mm512_loadu_si512(xq.add(64 * i).cast()));
            let neg32 = x.neg32_pairs.as_ptr().add(b * QK_K / 2);
            let offsets = [0, 1, 2, 3].map(|i| _mm512_loadu_si512(neg32.add(32 * i).cast()));
            // d of both rows times the activation scale.
            let d = _mm_cvtph_ps(_mm_cvtsi32_si128(
                (w.d[units.unit(0, b)] as u32 | (w.d[units.unit(1, b)] as u32) << 16) as i32,
            ));
            let d = _mm_mul_ps(d, _mm_set1_ps(x.d[b]));
            for r in 0..2 {
                let block = units.unit(r, b);
                let ahead = low.wrapping_add((block + PF) * QK_K / 2);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(high.wrapping_add((block + PF) * QK_K / 4).cast());
                let scales = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(
                    w.scales.as_ptr().add(16 * block).cast(),
                )));
                let mut sums = _mm512_setzero_si512();
                let top = _mm512_load_si512(high.add(64 * block).cast());
                let v =
                    [0, 1].map(|h| _mm512_load_si512(low.add(block * QK_K / 2 + 64 * h).cast()));
                // Step s takes bits 2s..2s + 2 of the top-bit bytes, moved to bits 4..6.
                let tops = [
                    _mm512_slli_epi64::<4>(top),
                    _mm512_slli_epi64::<2>(top),
                    top,
                    _mm512_srli_epi64::<2>(top),
                ];
                for s in 0..4 {
                    let nibbles = if s % 2 == 0 {
                        _mm512_and_si512(v[s / 2], low4)
                    } else {
                        _mm512_and_si512(_mm512_srli_epi16::<4>(v[s / 2]), low4)
                    };
                    let q = _mm512_ternarylogic_epi32::<A_OR_B_AND_C>(nibbles, tops[s], bits45);
                    // vpmaddubsw wants the unsigned q (0..63): pairs of q · q8 (|·| ≤ 2·63·127),
                    // then ggml's q - 32 by adding -32 · (pair of q8) (|·| ≤ 2·32·127), then
                    // times the sub-block's scale in 32 bits: all exact.
                    let pairs = _mm512_add_epi16(_mm512_maddubs_epi16(q, xs[s]), offsets[s]);
                    sums = dpwssd!(
                        sums,
                        pairs,
                        _mm512_permutexvar_epi16(scale_words[s], scales),
                    );
                }
                let scale =
                    _mm512_permutexvar_ps(_mm512_set1_epi32(r as i32), _mm512_castps128_ps512(d));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[r]);
            }
        }
    }
    (_mm512_reduce_add_ps(acc[0]), _mm512_reduce_add_ps(acc[1]))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot2_q4k(_: &Q4KRows, _: [usize; 2], _: &Q8KActivations) -> (f32, f32) {
    unreachable!("supported() is false off x86-64")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot2_q6k(_: &Q6KRows, _: [usize; 2], _: &Q8KActivations) -> (f32, f32) {
    unreachable!("supported() is false off x86-64")
}

/// Sum of the 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl")]
fn reduce256(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    _mm512_reduce_add_ps(_mm512_zextps256_ps512(v))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    pub(crate) fn f16_bytes(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_le_bytes()
    }

    fn f16_at(bytes: &[u8], at: usize) -> f32 {
        half::f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
    }

    /// Activations with varied magnitudes, a few outliers, and exact zeros.
    pub(crate) fn activations(cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        (0..cols)
            .map(|i| match i % 37 {
                0 => rng.random_range(-20.0..20.0),
                1 => 0.0,
                _ => rng.random_range(-1.5f32..1.5),
            })
            .collect()
    }

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

    /// GGUF Q6_K blocks: random nibbles, top bits and int8 scales, a sane f16 `d`.
    fn q6k_blocks(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / QK_K {
            bytes.extend((0..208).map(|_| rng.random::<u8>()));
            bytes.extend(f16_bytes(rng.random_range(0.00005..0.0004)));
        }
        bytes
    }

    /// ggml's `block_q8_K`, from `quantize_row_q8_K_ref` written out with ggml's `nearest_int`
    /// (the 1.5·2²³ trick).
    pub(crate) struct Q8K {
        pub(crate) d: f32,
        pub(crate) qs: [i8; QK_K],
        pub(crate) bsums: [i16; 16],
    }

    fn nearest_int(v: f32) -> i32 {
        let bits = (v + 12_582_912.0).to_bits() as i32;
        (bits & 0x007f_ffff) - 0x0040_0000
    }

    pub(crate) fn ggml_quantize_q8k(x: &[f32]) -> Vec<Q8K> {
        x.chunks_exact(QK_K)
            .map(|x| {
                let (mut max, mut amax) = (0f32, 0f32);
                for &v in x {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                let mut y = Q8K {
                    d: 0.0,
                    qs: [0; QK_K],
                    bsums: [0; 16],
                };
                if amax == 0.0 {
                    return y;
                }
                let iscale = -127.0 / max;
                for (q, &v) in y.qs.iter_mut().zip(x) {
                    *q = nearest_int(iscale * v).min(127) as i8;
                }
                for j in 0..16 {
                    y.bsums[j] = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
                }
                y.d = 1.0 / iscale;
                y
            })
            .collect()
    }

    /// `ggml_vec_dot_q4_K_q8_K` (the generic C), written out: the scales unpacked with the
    /// kmask dance on u32 words, integer sums per sub-block in 8 lanes, f32 sums in 8 lanes.
    /// Also returns Σ |d · lane|, the scale of its f32 rounding.
    fn ggml_dot_q4k(row: &[u8], y: &[Q8K]) -> (f32, f64) {
        let (mut sumf, mut sums, mut norm) = (0f32, [0f32; 8], 0f64);
        for (x, y) in row.chunks_exact(Q4K_BLOCK_BYTES).zip(y) {
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

    /// `ggml_vec_dot_q6_K_q8_K` (the generic C), written out, with Σ |d · lane| as above.
    fn ggml_dot_q6k(row: &[u8], y: &[Q8K]) -> (f32, f64) {
        let (mut sums, mut norm) = ([0f32; 8], 0f64);
        for (x, y) in row.chunks_exact(Q6K_BLOCK_BYTES).zip(y) {
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

    /// ggml's `dequantize_row_q4_K`, written out.
    fn dequantize_q4k(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for x in bytes.chunks_exact(Q4K_BLOCK_BYTES) {
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

    /// ggml's `dequantize_row_q6_K`, written out.
    fn dequantize_q6k(bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for x in bytes.chunks_exact(Q6K_BLOCK_BYTES) {
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

    /// Checks `got` against ggml's dot (up to f32 rounding) and against the dequantized weights
    /// times the unquantized activations (within the activation rounding: half a step per value).
    pub(crate) fn check_rows(
        got: &[f32],
        x: &[f32],
        weights: &[f32],
        ggml: impl Fn(usize) -> (f32, f64),
        x_steps: &[f32],
    ) {
        let cols = x.len();
        for (r, &got) in got.iter().enumerate() {
            let (expected, norm) = ggml(r);
            assert!(
                (got - expected).abs() as f64 <= 2e-6 * norm + 1e-6,
                "row {r}: kernel {got}, ggml {expected} (Σ|d · lane| {norm})"
            );
            let w = &weights[r * cols..][..cols];
            let exact: f64 = w.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
            let bound: f64 = w
                .iter()
                .enumerate()
                .map(|(i, &a)| a.abs() as f64 * x_steps[i] as f64 / 2.0)
                .sum();
            assert!(
                (got as f64 - exact).abs() <= bound * 1.001 + 1e-4,
                "row {r}: kernel {got}, dequantized product {exact}, bound {bound}"
            );
        }
    }

    /// |d| of the Q8_K block each value falls in: the activation rounding step.
    fn q8k_steps(y: &[Q8K]) -> Vec<f32> {
        y.iter().flat_map(|b| [b.d.abs(); QK_K]).collect()
    }

    #[test]
    fn q4k_matvec_matches_llama_cpp_q4_k_q8_k_arithmetic() {
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        // 7 rows: pairs and a lone last row; 3 super-blocks per row.
        let (rows, cols) = (7, 768);
        let bytes = q4k_blocks(rows, cols, &mut rng);
        let q = Q4KRows::from_gguf_blocks(&bytes, rows, cols).unwrap();
        let x = activations(cols, &mut rng);
        let Some(got) = q.matvec(&x) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let y = ggml_quantize_q8k(&x);
        let row_bytes = cols / QK_K * Q4K_BLOCK_BYTES;
        let ggml = |r: usize| ggml_dot_q4k(&bytes[r * row_bytes..][..row_bytes], &y);
        check_rows(&got, &x, &dequantize_q4k(&bytes), ggml, &q8k_steps(&y));
    }

    #[test]
    fn q6k_matvec_matches_llama_cpp_q6_k_q8_k_arithmetic() {
        let mut rng = ChaCha8Rng::seed_from_u64(61);
        let (rows, cols) = (7, 768);
        let bytes = q6k_blocks(rows, cols, &mut rng);
        let q = Q6KRows::from_gguf_blocks(&bytes, rows, cols).unwrap();
        let x = activations(cols, &mut rng);
        let Some(got) = q.matvec(&x) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let y = ggml_quantize_q8k(&x);
        let row_bytes = cols / QK_K * Q6K_BLOCK_BYTES;
        let ggml = |r: usize| ggml_dot_q6k(&bytes[r * row_bytes..][..row_bytes], &y);
        check_rows(&got, &x, &dequantize_q6k(&bytes), ggml, &q8k_steps(&y));
    }

    #[test]
    fn extreme_values_stay_exact() {
        // All nibbles and top bits set, scales at their extremes, activations at ±127: the
        // 16-bit pair products and 32-bit sums at their largest must not saturate.
        let cols = 512;
        let mut q4 = Vec::new();
        let mut q6 = Vec::new();
        for _ in 0..2 * cols / QK_K {
            q4.extend(f16_bytes(0.001));
            q4.extend(f16_bytes(0.002));
            q4.extend([0xFF; 140]);
            q6.extend([0xFF; 192]);
            q6.extend([0x80, 0x7F].repeat(8));
            q6.extend(f16_bytes(0.0001));
        }
        let x: Vec<f32> = (0..cols)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        let y = ggml_quantize_q8k(&x);
        let q4k = Q4KRows::from_gguf_blocks(&q4, 2, cols).unwrap();
        let q6k = Q6KRows::from_gguf_blocks(&q6, 2, cols).unwrap();
        let (Some(got4), Some(got6)) = (q4k.matvec(&x), q6k.matvec(&x)) else {
            eprintln!("no AVX-512 VNNI on this CPU: kernel not exercised");
            return;
        };
        let row4 = cols / QK_K * Q4K_BLOCK_BYTES;
        let row6 = cols / QK_K * Q6K_BLOCK_BYTES;
        check_rows(
            &got4,
            &x,
            &dequantize_q4k(&q4),
            |r| ggml_dot_q4k(&q4[r * row4..][..row4], &y),
            &q8k_steps(&y),
        );
        check_rows(
            &got6,
            &x,
            &dequantize_q6k(&q6),
            |r| ggml_dot_q6k(&q6[r * row6..][..row6], &y),
            &q8k_steps(&y),
        );
    }

    #[test]
    fn q8k_quantization_matches_ggml_rounding_and_sign() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let mut x = activations(5 * QK_K, &mut rng);
        // Block 0: the first value of largest magnitude is negative, so d > 0; a later +127 of
        // equal magnitude must not win; scale exactly 1, so x.5 values show ties to even.
        x[..QK_K].fill(0.25);
        x[0] = -127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.5;
        x[5] = 127.0;
        // Block 1: the largest magnitude is positive, so d < 0 and it maps to -127.
        x[QK_K + 17] = 40.0;
        // Block 2: all zeros.
        x[2 * QK_K..3 * QK_K].fill(0.0);
        let blocks = x.len() / QK_K;
        let (mut quants, mut d, mut bsums) = (
            vec![0i8; x.len()],
            vec![0f32; blocks],
            vec![0i16; 16 * blocks],
        );
        quantize_row_q8k(&x, &mut quants, &mut d, &mut bsums);
        for (b, y) in ggml_quantize_q8k(&x).iter().enumerate() {
            assert_eq!(d[b].to_bits(), y.d.to_bits(), "block {b}");
            assert_eq!(&quants[b * QK_K..][..QK_K], &y.qs[..], "block {b}");
            assert_eq!(&bsums[16 * b..][..16], &y.bsums[..], "block {b}");
        }
        assert_eq!(d[0], 1.0);
        assert_eq!(&quants[..6], &[-127, 2, -4, 0, 0, 127]);
        assert!(d[1] < 0.0 && quants[QK_K + 17] == -127);
        assert_eq!(d[2], 0.0);
        let activations = Q8KActivations::new(&x);
        for (i, &n) in activations.neg32_pairs.iter().enumerate() {
            assert_eq!(n, -32 * (quants[2 * i] as i16 + quants[2 * i + 1] as i16));
        }
        // The scalar path agrees too.
        let mut scalar = [0i8; QK_K];
        let mut scalar_sums = [0i16; 16];
        for b in 0..blocks {
            let scale = quantize_block_q8k(&x[b * QK_K..][..QK_K], &mut scalar, &mut scalar_sums);
            assert_eq!(scale.to_bits(), d[b].to_bits());
            assert_eq!(&scalar[..], &quants[b * QK_K..][..QK_K]);
            assert_eq!(&scalar_sums[..], &bsums[16 * b..][..16]);
        }
    }

    #[test]
    fn q4k_scales_repack_round_trips() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        for _ in 0..100 {
            let packed: Vec<u8> = (0..12).map(|_| rng.random()).collect();
            let (scales, mins) = q4k_scales_mins(&packed);
            let repacked = q4k_repack_scales(scales, mins);
            let high = u32::from_le_bytes([repacked[8], repacked[9], repacked[10], repacked[11]]);
            for i in 0..16 {
                let low = if i < 8 {
                    repacked[i] & 0x0F
                } else {
                    repacked[i - 8] >> 4
                };
                let top = (high >> (8 * (i % 4) + 2 * (i / 4))) as u8 & 3;
                let expected = if i < 8 { scales[i] } else { mins[i - 8] };
                assert_eq!(low | (top << 4), expected, "value {i}");
            }
        }
    }

    #[test]
    fn only_whole_super_blocks_and_exact_byte_counts_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let q4 = q4k_blocks(2, 512, &mut rng);
        let q6 = q6k_blocks(2, 512, &mut rng);
        assert!(Q4KRows::from_gguf_blocks(&q4, 2, 512).is_some());
        assert!(Q6KRows::from_gguf_blocks(&q6, 2, 512).is_some());
        // 128 columns: not a whole super-block.
        assert!(Q4KRows::from_gguf_blocks(&q4[..Q4K_BLOCK_BYTES], 2, 128).is_none());
        assert!(Q6KRows::from_gguf_blocks(&q6[..Q6K_BLOCK_BYTES], 2, 128).is_none());
        assert!(Q4KRows::from_gguf_blocks(&q4, 3, 512).is_none());
        assert!(Q6KRows::from_gguf_blocks(&q6[1..], 2, 512).is_none());
        assert!(Q4KRows::from_gguf_blocks(&[], 0, 0).is_none());
        assert!(Q6KRows::from_gguf_blocks(&q6, usize::MAX, 512).is_none());
        let q = Q4KRows::from_gguf_blocks(&q4, 2, 512).unwrap();
        assert!(q.matvec(&[0.0; 256]).is_none());
    }
}
