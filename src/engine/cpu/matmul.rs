//! Products of activation rows with weights as stored in GGUF blocks (Q8_0, Q4_1, Q5_0, Q4_K,
//! Q6_K) on CPUs with AVX-512 VNNI: the layout, activation storage and tiled driver that the
//! per-type kernels (`cpu::q8`, `cpu::q4`, `cpu::q5`, `cpu::q4k`, `cpu::q6k`) share. Decoding (one
//! row) and prefill (many rows) run the same kernels.
//!
//! Why: prefill used to multiply by dense f32 copies of the weights, and that GEMM sat at the FMA
//! ceiling (16 multiply-adds per instruction); `vpdpbusd` does 64 int8 ones, issued from the same
//! pipes. As llama.cpp does, each activation row is quantized once (Q8_0, Q8_1 or Q8_K, as ggml
//! pairs them with the weight type) and multiplied in integers, with ggml's per-block scales.
//!
//! The layout makes the float work per block small. Each scale block of a row (a 32-value block,
//! or a k-quant sub-block) is one lane of a 512-bit vector: a *unit* is 16 consecutive blocks,
//! and vector `k` of a unit holds values `4k..4k + 4` of each of them, so a chain of `vpdpbusd`
//! over a unit's vectors leaves in every lane the exact integer dot product of its block, and one
//! convert and one multiply-add per 16 blocks apply the scales. Weights are reordered at load
//! (never re-quantized) and stay the size of the file: the bytes of a row's last, partial unit are
//! packed as tightly as full ones, and its missing lanes meet zeros on the activation side.
//!
//! Rows of a pair are interleaved unit by unit, so a kernel step that reads two rows reads one
//! sequential stream (see [`Units`]); a kernel step multiplies those two weight rows by up to
//! [`TILE`] activation rows, unpacking each weight unit once for all of them.
//!
//! Row independence: every activation row goes through the same instructions whatever the tile
//! it sits in (the tile size is a const parameter, and each row has its own accumulators), and its
//! quantization depends on the row alone, so an output row is bitwise the same whichever rows
//! share the call, and equal to the one-row product. The prefix cache relies on it: a position
//! must give the same bits however the prompt was chunked.

use super::kernels::parallel_ranges;

/// Blocks (lanes) per unit: one 512-bit vector of 32-bit sums.
pub(crate) const LANES: usize = 16;
/// Activation rows per kernel step (at most). With 2 weight rows, 6 rows keep 12 integer and 12
/// float accumulators in registers; 1 thread, a step alone, Q8_0 and Q5_0 rows of 896 and 4864
/// columns ran 7% (Q5_0, 4864) to 65% (Q8_0, 896) faster than with 4; 8 rows were no faster.
pub(crate) const TILE: usize = 6;
/// Weight-row pairs that one tile of activation rows visits before the next tile: the tile stays
/// in L1 while the weights of the block (a few pairs) stream from L2.
const PAIRS_PER_BLOCK: usize = 32;

/// Zero-initialized bytes starting on a 64-byte boundary, with 64 bytes of slack after `len` so
/// that a full vector load at a row's last, partial unit stays inside the allocation.
#[derive(Clone)]
pub(crate) struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

/// One cache line, so the arrays the kernels stream start on a line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

impl AlignedBytes {
    pub(crate) fn zeroed(len: usize) -> Self {
        Self {
            lines: vec![Line([0; 64]); len.div_ceil(64) + 1],
            len,
        }
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast()
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`, shared.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `Line` is 64 plain bytes without padding; `len` ≤ 64 · lines; the borrow is
        // exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

/// Where each unit of a `[rows, lanes · LANES-ish]` weight matrix is stored. Rows of a pair are
/// interleaved unit by unit (unit 0 of row 0, unit 0 of row 1, unit 1 of row 0, …; a lone last row
/// is stored alone), so the two rows a kernel step reads form one sequential stream per array:
/// two streams a row apart left the hardware prefetcher idle (Q4_K decoding from memory ran at
/// half the bandwidth of Q8_0 rows).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Units {
    rows: usize,
    /// Units per row.
    units: usize,
    /// Lanes of a row's last unit, 1..=16.
    tail: usize,
}

impl Units {
    /// `lanes` scale blocks per row; `None` when there are none or the sizes overflow.
    pub(crate) fn new(rows: usize, lanes: usize) -> Option<Self> {
        if lanes == 0 {
            return None;
        }
        let units = lanes.div_ceil(LANES);
        // Every array the types keep is at most 32 bytes per lane and 64 per unit: check those.
        rows.checked_mul(units)?.checked_mul(64 * LANES)?;
        Some(Self {
            rows,
            units,
            tail: lanes - (units - 1) * LANES,
        })
    }

    pub(crate) fn units(&self) -> usize {
        self.units
    }

    /// Units of the whole matrix, for arrays with one entry per unit.
    pub(crate) fn count(&self) -> usize {
        self.rows * self.units
    }

    /// Lanes of unit `u` of a row.
    #[inline(always)]
    pub(crate) fn lanes(&self, u: usize) -> usize {
        if u + 1 == self.units {
            self.tail
        } else {
            LANES
        }
    }

    /// Position of unit `u` of row `r` in an array with one (padded) entry per unit.
    #[inline(always)]
    pub(crate) fn index(&self, r: usize, u: usize) -> usize {
        let base = (r & !1) * self.units;
        if (r | 1) < self.rows {
            base + 2 * u + (r & 1)
        } else {
            base + u
        }
    }

    /// Bytes of a packed array with `lane_bytes` bytes per lane (the last unit of a row as short
    /// as its lanes).
    pub(crate) fn packed_len(&self, lane_bytes: usize) -> usize {
        self.rows * self.row_lanes() * lane_bytes
    }

    fn row_lanes(&self) -> usize {
        (self.units - 1) * LANES + self.tail
    }

    /// Where the units of weight rows `rows[0]` (even) and `rows[1]` (the next, or the same for a
    /// lone last row) are, for a kernel step that walks them in order.
    #[inline(always)]
    pub(crate) fn pair(&self, rows: [usize; 2]) -> PairUnits {
        PairUnits {
            units: self.units,
            tail: self.tail,
            first_lane: rows[0] * self.row_lanes(),
            first_index: rows[0] * self.units,
            paired: rows[1] != rows[0],
        }
    }

    /// Byte offset of unit `u` of row `r` in a packed array with `lane_bytes` bytes per lane.
    #[inline(always)]
    pub(crate) fn offset(&self, r: usize, u: usize, lane_bytes: usize) -> usize {
        let full = LANES * lane_bytes;
        let base = (r & !1) * self.row_lanes() * lane_bytes;
        if (r | 1) < self.rows {
            base + 2 * u * full + (r & 1) * self.lanes(u) * lane_bytes
        } else {
            base + u * full
        }
    }
}

/// The units of a kernel step's two weight rows: [`Units::offset`] and [`Units::index`] for
/// both, with the row pair's arithmetic done once.
#[derive(Clone, Copy)]
pub(crate) struct PairUnits {
    units: usize,
    tail: usize,
    first_lane: usize,
    first_index: usize,
    paired: bool,
}

impl PairUnits {
    pub(crate) fn count(&self) -> usize {
        self.units
    }

    #[inline(always)]
    pub(crate) fn lanes(&self, u: usize) -> usize {
        if u + 1 == self.units {
            self.tail
        } else {
            LANES
        }
    }

    /// Byte offsets of unit `u` of both rows in a packed array with `lane_bytes` bytes per lane.
    #[inline(always)]
    pub(crate) fn offsets(&self, u: usize, lane_bytes: usize) -> [usize; 2] {
        let rows = 1 + self.paired as usize;
        let at = (self.first_lane + rows * LANES * u) * lane_bytes;
        [at, at + self.paired as usize * self.lanes(u) * lane_bytes]
    }

    /// Positions of unit `u` of both rows in an array with one entry per unit.
    #[inline(always)]
    pub(crate) fn indices(&self, u: usize) -> [usize; 2] {
        let at = self.first_index + (1 + self.paired as usize) * u;
        [at, at + self.paired as usize]
    }
}

/// Activation rows quantized for the kernels, each row unit by unit: per unit `vectors` 64-byte
/// vectors of int8 values in the kernel order (lanes past a row's end are zero), and per lane a
/// starting value for the integer sums, a scale, and one more float the type may need.
pub(crate) struct Activations {
    units: usize,
    unit_bytes: usize,
    quants: AlignedBytes,
    start: Vec<i32>,
    scale: Vec<f32>,
    extra: Vec<f32>,
}

/// One row of [`Activations`] being filled; the buffers arrive zeroed.
pub(crate) struct RowMut<'a> {
    pub(crate) quants: &'a mut [u8],
    pub(crate) start: &'a mut [i32],
    pub(crate) scale: &'a mut [f32],
    pub(crate) extra: &'a mut [f32],
}

/// Raw pointers for tasks that each fill their own rows.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: users touch disjoint elements only, and the buffers outlive the parallel loop.
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Through a method, so closures capture the whole (Sync) wrapper, not the raw pointer field.
    fn ptr(self) -> *mut T {
        self.0
    }
}

impl Activations {
    /// Quantizes the `rows` rows of `x` (`cols` values each) with `fill`, which sees one row and
    /// its zeroed buffers; rows are independent and spread over the pool.
    pub(crate) fn new(
        x: &[f32],
        rows: usize,
        units: usize,
        vectors: usize,
        fill: impl Fn(&[f32], RowMut<'_>) + Sync,
    ) -> Self {
        let cols = x.len() / rows.max(1);
        let unit_bytes = vectors * 64;
        let mut a = Self {
            units,
            unit_bytes,
            quants: AlignedBytes::zeroed(rows * units * unit_bytes),
            start: vec![0; rows * units * LANES],
            scale: vec![0.0; rows * units * LANES],
            extra: vec![0.0; rows * units * LANES],
        };
        let quants = Shared(a.quants.bytes_mut().as_mut_ptr());
        let (start, scale, extra) = (
            Shared(a.start.as_mut_ptr()),
            Shared(a.scale.as_mut_ptr()),
            Shared(a.extra.as_mut_ptr()),
        );
        let (row_bytes, row_lanes) = (units * unit_bytes, units * LANES);
        parallel_ranges(rows, |range| {
            for r in range {
                // SAFETY: row r's slices lie inside the buffers and only this task touches them.
                let row = unsafe {
                    RowMut {
                        quants: std::slice::from_raw_parts_mut(
                            quants.ptr().add(r * row_bytes),
                            row_bytes,
                        ),
                        start: std::slice::from_raw_parts_mut(
                            start.ptr().add(r * row_lanes),
                            row_lanes,
                        ),
                        scale: std::slice::from_raw_parts_mut(
                            scale.ptr().add(r * row_lanes),
                            row_lanes,
                        ),
                        extra: std::slice::from_raw_parts_mut(
                            extra.ptr().add(r * row_lanes),
                            row_lanes,
                        ),
                    }
                };
                fill(&x[r * cols..][..cols], row);
            }
        });
        a
    }

    /// The quantized values of unit `u` of row `r`.
    #[inline(always)]
    pub(crate) fn quants(&self, r: usize, u: usize) -> *const u8 {
        self.quants
            .as_ptr()
            .wrapping_add((r * self.units + u) * self.unit_bytes)
    }

    #[inline(always)]
    fn lane(&self, r: usize, u: usize) -> usize {
        (r * self.units + u) * LANES
    }

    /// The 16 starting sums of unit `u` of row `r`.
    #[inline(always)]
    pub(crate) fn start(&self, r: usize, u: usize) -> *const i32 {
        self.start.as_ptr().wrapping_add(self.lane(r, u))
    }

    #[inline(always)]
    pub(crate) fn scale(&self, r: usize, u: usize) -> *const f32 {
        self.scale.as_ptr().wrapping_add(self.lane(r, u))
    }

    #[inline(always)]
    pub(crate) fn extra(&self, r: usize, u: usize) -> *const f32 {
        self.extra.as_ptr().wrapping_add(self.lane(r, u))
    }
}

/// Writes int8 values quantized block by block (`block` values each, standard order) in the
/// kernel order: vector `k` of unit `u` holds, in lane `j`, values `4k..4k + 4` of block
/// `16u + j`.
pub(crate) fn interleave(quants: &[i8], block: usize, out: &mut [u8]) {
    let vectors = block / 4;
    for (b, values) in quants.chunks_exact(block).enumerate() {
        let (u, j) = (b / LANES, b % LANES);
        for (k, four) in values.chunks_exact(4).enumerate() {
            let at = (u * vectors + k) * 64 + 4 * j;
            for (o, &v) in out[at..at + 4].iter_mut().zip(four) {
                *o = v as u8;
            }
        }
    }
}

/// A weight matrix the kernels multiply.
pub(crate) trait StoredRows: Sync {
    /// Activation rows per kernel step, at most [`TILE`]: fewer where the kernel keeps more
    /// values in registers.
    const ROWS: usize = TILE;

    /// `(rows, cols)`.
    fn shape(&self) -> (usize, usize);

    /// `rows` activation rows (`cols` values each) quantized as the kernel wants them.
    fn quantize(&self, x: &[f32], rows: usize) -> Activations;

    /// Weight rows `rows[0]` and `rows[1]` (equal for a lone last row) times activation rows
    /// `first..first + N`: `[activation row][weight row]`.
    ///
    /// # Safety
    /// The CPU must have the features [`supported`](super::q8::supported) checks; both rows
    /// are below the matrix's rows, and `x` came from [`StoredRows::quantize`] of this matrix
    /// with more than `first + N - 1` rows.
    unsafe fn tile<const N: usize>(
        &self,
        rows: [usize; 2],
        x: &Activations,
        first: usize,
    ) -> [[f32; 2]; N];
}

/// `Y = X · Wᵀ` for `rows` activation rows `X` (row-major, `cols` values each): `[rows, out]`
/// row-major, or `None` when the CPU lacks AVX-512 VNNI or `x` has the wrong length.
pub(crate) fn matmul<W: StoredRows>(w: &W, x: &[f32], rows: usize) -> Option<Vec<f32>> {
    let (out_rows, cols) = w.shape();
    if !super::q8::supported() || rows == 0 || x.len() != rows.checked_mul(cols)? {
        return None;
    }
    let activations = w.quantize(x, rows);
    // Not zeroed first: every element is written below (zeroing showed in profiles: 2.5 MB for
    // a 128-row chunk through one of Qwen2.5-0.5B's 4864-row projections).
    let len = rows * out_rows;
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let shared = super::kernels::SharedOut(out.as_mut_ptr());
    parallel_ranges(out_rows.div_ceil(2), |pairs| {
        let mut block = pairs.start;
        while block < pairs.end {
            let block_end = (block + PAIRS_PER_BLOCK).min(pairs.end);
            let mut first = 0;
            while first < rows {
                let n = (rows - first).min(W::ROWS);
                for pair in block..block_end {
                    let a = 2 * pair;
                    let b = (a + 1).min(out_rows - 1);
                    let put = |results: &[[f32; 2]]| {
                        for (i, &[ya, yb]) in results.iter().enumerate() {
                            let row = (first + i) * out_rows;
                            // SAFETY: inside `out`; each (row, pair) is written by one task.
                            unsafe {
                                *shared.ptr().add(row + a) = ya;
                                if b != a {
                                    *shared.ptr().add(row + b) = yb;
                                }
                            }
                        }
                    };
                    // SAFETY: `supported()` held; `a, b < out_rows`; `first + n ≤ rows`.
                    unsafe {
                        match n {
                            1 => put(&w.tile::<1>([a, b], &activations, first)),
                            2 => put(&w.tile::<2>([a, b], &activations, first)),
                            3 => put(&w.tile::<3>([a, b], &activations, first)),
                            4 => put(&w.tile::<4>([a, b], &activations, first)),
                            5 => put(&w.tile::<5>([a, b], &activations, first)),
                            _ => put(&w.tile::<TILE>([a, b], &activations, first)),
                        }
                    }
                }
                first += n;
            }
            block = block_end;
        }
    });
    // SAFETY: the tasks covered every pair of weight rows for every activation row, so all `len`
    // elements are written; f32 has no invalid bit patterns anyway.
    unsafe { out.set_len(len) };
    Some(out)
}

/// 16 f16 values widened to f32.
///
/// # Safety
/// `at` points to 16 readable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,f16c")]
#[inline]
pub(crate) unsafe fn f16x16(at: *const u16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: as the contract says.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())) }
}

/// Sum of the 16 lanes of each accumulator, `[activation row][weight row]`, with the additions of
/// `_mm512_reduce_add_ps` (halves, quarters, lanes 0 + 2 and 1 + 3, then those two), so a row's
/// result does not depend on the other rows of its tile; eight vectors share each shuffle and add,
/// which takes a third of the instructions of reducing them one by one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn reduce<const N: usize>(acc: [[std::arch::x86_64::__m512; 2]; N]) -> [[f32; 2]; N] {
    use std::arch::x86_64::*;
    let mut out = [[0f32; 2]; N];
    for first in (0..2 * N).step_by(8) {
        let mut v = [_mm512_setzero_ps(); 8];
        for (k, v) in v.iter_mut().enumerate() {
            if let Some(pair) = acc.get((first + k) / 2) {
                *v = pair[(first + k) % 2];
            }
        }
        // [a.lo256 + a.hi256, b.lo256 + b.hi256] for the pairs (v0, v1), (v2, v3), ...
        let mut halves = [_mm512_setzero_ps(); 4];
        for (i, h) in halves.iter_mut().enumerate() {
            let (a, b) = (v[2 * i], v[2 * i + 1]);
            *h = _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            );
        }
        // 128-bit lane q: the sum of the two quarters of vector q (0..4, then 4..8).
        let mut quarters = [_mm512_setzero_ps(); 2];
        for (i, q) in quarters.iter_mut().enumerate() {
            let (a, b) = (halves[2 * i], halves[2 * i + 1]);
            *q = _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            );
        }
        // Elements 0, 1 of lane q: x0 + x2, x1 + x3 of vector q; elements 2, 3: of vector 4 + q.
        let (a, b) = (quarters[0], quarters[1]);
        let pairs = _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        );
        let sums = _mm512_add_ps(pairs, _mm512_permute_ps::<0xB1>(pairs));
        let mut lanes = [0f32; 16];
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sums) };
        for k in 0..8 {
            if let Some(pair) = out.get_mut((first + k) / 2) {
                pair[(first + k) % 2] = lanes[4 * (k % 4) + 2 * (k / 4)];
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// [`matmul`] of the `t` rows of `x`, after checking that each output row is bitwise the
    /// row's product alone and its product in a call that starts 3 rows later (other tile
    /// positions, other neighbours); `None` without AVX-512 VNNI.
    pub(crate) fn independent_rows<W: StoredRows>(w: &W, x: &[f32], t: usize) -> Option<Vec<f32>> {
        let all = matmul(w, x, t)?;
        let (out, cols) = w.shape();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for r in 0..t {
            let alone = matmul(w, &x[r * cols..][..cols], 1)?;
            assert_eq!(bits(&alone), bits(&all[r * out..][..out]), "row {r} alone");
        }
        if t > 3 {
            let later = matmul(w, &x[3 * cols..], t - 3)?;
            assert_eq!(
                bits(&later),
                bits(&all[3 * out..]),
                "rows 3.. in their own call"
            );
        }
        Some(all)
    }

    #[test]
    fn reduce_adds_as_mm512_reduce_add_ps_does() {
        #[cfg(target_arch = "x86_64")]
        if crate::engine::cpu::q8::supported() {
            use std::arch::x86_64::*;
            // Values whose sum depends on the order of the additions.
            let value =
                |i: usize| ((i * 7919 % 1013) as f32 - 500.0) * 10f32.powi((i % 9) as i32 - 4);
            let vectors: Vec<__m512> = (0..6)
                .map(|v| {
                    let lanes: Vec<f32> = (0..16).map(|l| value(16 * v + l)).collect();
                    // SAFETY: 16 floats; `supported()` checked AVX-512.
                    unsafe { _mm512_loadu_ps(lanes.as_ptr()) }
                })
                .collect();
            let acc = [0, 1, 2].map(|n| [vectors[2 * n], vectors[2 * n + 1]]);
            // SAFETY: `supported()` checked AVX-512.
            let got = unsafe { reduce(acc) };
            for n in 0..3 {
                for s in 0..2 {
                    // SAFETY: as above.
                    let expected = unsafe { _mm512_reduce_add_ps(acc[n][s]) };
                    assert_eq!(got[n][s].to_bits(), expected.to_bits(), "{n}, {s}");
                }
            }
            // SAFETY: as above.
            let one = unsafe { reduce([acc[2]]) };
            assert_eq!(one[0][1].to_bits(), got[2][1].to_bits());
        }
    }

    #[test]
    fn units_cover_a_packed_array_once_with_row_pairs_interleaved() {
        for (rows, lanes) in [(1, 5), (2, 16), (3, 20), (5, 33), (4, 48)] {
            let units = Units::new(rows, lanes).unwrap();
            let lane_bytes = 16;
            let mut seen = vec![0u8; units.packed_len(lane_bytes)];
            let mut indices = vec![0u8; units.count()];
            for r in 0..rows {
                for u in 0..units.units() {
                    let at = units.offset(r, u, lane_bytes);
                    for s in &mut seen[at..at + units.lanes(u) * lane_bytes] {
                        *s += 1;
                    }
                    indices[units.index(r, u)] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{rows} x {lanes}");
            for a in (0..rows).step_by(2) {
                let pair = units.pair([a, (a + 1).min(rows - 1)]);
                for u in 0..units.units() {
                    let b = (a + 1).min(rows - 1);
                    assert_eq!(
                        pair.offsets(u, lane_bytes),
                        [
                            units.offset(a, u, lane_bytes),
                            units.offset(b, u, lane_bytes)
                        ]
                    );
                    assert_eq!(pair.indices(u), [units.index(a, u), units.index(b, u)]);
                    assert_eq!(pair.lanes(u), units.lanes(u));
                }
            }
            assert!(indices.iter().all(|&s| s == 1), "{rows} x {lanes}");
            // A pair's unit u of both rows sits side by side.
            if rows >= 2 {
                let u = units.units() - 1;
                assert_eq!(
                    units.offset(1, u, lane_bytes),
                    units.offset(0, u, lane_bytes) + units.lanes(u) * lane_bytes
                );
            }
        }
        assert!(Units::new(2, 0).is_none());
        assert!(Units::new(usize::MAX, 16).is_none());
    }

    #[test]
    fn interleave_puts_four_values_of_each_block_in_its_lane() {
        // 20 blocks of 8 values: a full unit and a 4-lane one; value v of block b is b·8 + v.
        let quants: Vec<i8> = (0..160).map(|i| i as i8).collect();
        let mut out = vec![0u8; 2 * 2 * 64];
        interleave(&quants, 8, &mut out);
        for b in 0..20 {
            for v in 0..8 {
                let (u, j) = (b / LANES, b % LANES);
                assert_eq!(out[(2 * u + v / 4) * 64 + 4 * j + v % 4], (8 * b + v) as u8);
            }
        }
        assert!(out[2 * 2 * 64 - 48..].iter().all(|&v| v == 0));
    }
}

/// Timings of the kernels against candle's f32 matmul on the same (dequantized) weights:
/// `cargo test --release --lib cpu_matmul::bench -- --ignored --nocapture`.
#[cfg(test)]
mod bench {
    use super::*;
    use candle_core::{Device, Tensor};
    use rand::{Rng, SeedableRng};
    use std::time::Instant;

    fn time(mut f: impl FnMut()) -> f64 {
        f();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    }

    fn report<W: StoredRows>(name: &str, w: &W, dense: &Tensor) {
        let (rows, cols) = w.shape();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for t in [1, 128] {
            let x: Vec<f32> = (0..t * cols).map(|_| rng.random_range(-1.0..1.0)).collect();
            let ours = time(|| {
                matmul(w, &x, t).unwrap();
            });
            let quantize = time(|| {
                w.quantize(&x, t);
            });
            eprintln!("  quantize {:.1} us", quantize * 1e6);
            let xt = Tensor::from_vec(x.clone(), (t, cols), &Device::Cpu).unwrap();
            let f32_mm = time(|| {
                xt.matmul(&dense.t().unwrap()).unwrap();
            });
            let gmacs = (t * rows * cols) as f64 / 1e9;
            eprintln!(
                "{name} {rows}x{cols} t={t}: ours {:.1} us ({:.0} GMAC/s), f32 {:.1} us ({:.0} GMAC/s)",
                ours * 1e6,
                gmacs / ours,
                f32_mm * 1e6,
                gmacs / f32_mm
            );
        }
    }

    fn random_blocks(n: usize, block: usize, f16_at: &[usize], rng: &mut impl Rng) -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..n * block).map(|_| rng.random()).collect();
        for b in bytes.chunks_exact_mut(block) {
            for &at in f16_at {
                let d = half::f16::from_f32(rng.random_range(0.0005..0.004));
                b[at..at + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
        bytes
    }

    fn dense(
        bytes: &[u8],
        dtype: candle_core::quantized::GgmlDType,
        rows: usize,
        cols: usize,
    ) -> Tensor {
        candle_core::quantized::ggml_file::qtensor_from_ggml(
            dtype,
            bytes,
            vec![rows, cols],
            &Device::Cpu,
        )
        .unwrap()
        .dequantize(&Device::Cpu)
        .unwrap()
    }

    #[test]
    #[ignore]
    fn bench() {
        use candle_core::quantized::GgmlDType;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        for (rows, cols) in [(4864, 896), (896, 4864), (896, 896)] {
            let b = random_blocks(rows * cols / 32, 22, &[0], &mut rng);
            let w = super::super::q5::Q50Rows::from_gguf_blocks(&b, rows, cols).unwrap();
            report("q5_0", &w, &dense(&b, GgmlDType::Q5_0, rows, cols));
        }
    }
}

#[cfg(test)]
mod tile_bench {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Best of five timings of the widest tile the driver uses for `W`, in GMAC/s.
    fn run<W: StoredRows>(name: &str, w: &W, cols: usize, _: &mut impl Rng) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let x: Vec<f32> = (0..8 * cols).map(|_| rng.random_range(-1.0..1.0)).collect();
        let a = w.quantize(&x, 8);
        let n = W::ROWS;
        let iters = 100_000_000 / cols;
        let mut best = 0f64;
        let mut s = 0f32;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                // SAFETY: test on a supported CPU.
                s += unsafe {
                    match n {
                        4 => w.tile::<4>([0, 1], &a, 0)[0][0],
                        _ => w.tile::<TILE>([0, 1], &a, 0)[0][0],
                    }
                };
            }
            best = best.max((iters * 2 * n * cols) as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        eprintln!("{name} cols {cols} rows {n}: {best:.1} GMAC/s ({s})");
    }

    #[test]
    #[ignore]
    fn tile_alone() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        for cols in [4864, 896] {
            let rows = 2;
            let mut b: Vec<u8> = (0..rows * cols / 32 * 22).map(|_| rng.random()).collect();
            for blk in b.chunks_exact_mut(22) {
                blk[..2].copy_from_slice(&half::f16::from_f32(0.001).to_le_bytes());
            }
            let w = super::super::q5::Q50Rows::from_gguf_blocks(&b, rows, cols).unwrap();
            run("q5_0", &w, cols, &mut rng);
            let v: Vec<f32> = (0..rows * cols)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let w = super::super::q8::Q8Rows::quantize(&v, rows, cols).unwrap();
            run("q8_0", &w, cols, &mut rng);
            let h = half::f16::from_f32(0.001).to_le_bytes();
            let mut b: Vec<u8> = (0..rows * cols / 32 * 20).map(|_| rng.random()).collect();
            b.chunks_exact_mut(20)
                .for_each(|b| b[..4].copy_from_slice(&[h, h].concat()));
            let w = super::super::q4::Q41Rows::from_gguf_blocks(&b, rows, cols).unwrap();
            run("q4_1", &w, cols, &mut rng);
            if cols % 256 == 0 {
                let mut b: Vec<u8> = (0..rows * cols / 256 * 144).map(|_| rng.random()).collect();
                b.chunks_exact_mut(144)
                    .for_each(|b| b[..4].copy_from_slice(&[h, h].concat()));
                let w = super::super::q4k::Q4KRows::from_gguf_blocks(&b, rows, cols).unwrap();
                run("q4_k", &w, cols, &mut rng);
                let mut b: Vec<u8> = (0..rows * cols / 256 * 210).map(|_| rng.random()).collect();
                b.chunks_exact_mut(210)
                    .for_each(|b| b[208..].copy_from_slice(&h));
                let w = super::super::q6k::Q6KRows::from_gguf_blocks(&b, rows, cols).unwrap();
                run("q6_k", &w, cols, &mut rng);
            }
        }
    }
}
