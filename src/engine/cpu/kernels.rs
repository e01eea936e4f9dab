//! Vectorized CPU kernels for the hot loops candle runs op by op: exp, erf, softmax, layer norm,
//! and a thin wrapper over the `gemm` crate (the one candle's CPU matmul uses) for products on
//! strided views, so callers can read heads in place and accumulate into prepared buffers.
//!
//! Why our own: candle's CPU backend computes `exp` and `erf` with scalar libm calls and allocates a
//! tensor per op; `perf` put over half of MiniLM encoding and ~45% of a 6k-token SmolLM2 prefill
//! outside the matrix products. The element-wise loops here are plain Rust, compiled three times
//! (AVX-512, AVX2+FMA, baseline) and picked at run time, so a portable binary still gets wide
//! vectors where the CPU has them; reductions use a fixed number of lanes, so results do not
//! depend on which version runs.

use gemm::Parallelism;

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(pub(crate) *mut f32);
// SAFETY: users write disjoint elements only, and the buffer outlives the parallel loop.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Through a method, so closures capture the whole (Sync) wrapper, not the raw pointer field.
    pub(crate) fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// Runs `f` over `0..n` split into ranges, on candle's own worker pool when it has workers.
/// Candle's ops run on that pool and its workers spin between ops: handing our kernels to rayon's
/// pool instead left two sets of threads fighting for the cores (SmolLM2 decoding on 2 threads
/// fell from 53 to 38 tokens/s).
pub(crate) fn parallel_ranges(n: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    if candle_core::utils::get_num_threads() > 1 && n > 1 {
        candle_core::utils::barrier_pool().execute_chunked(n, f);
    } else {
        f(0..n);
    }
}

/// Runs `$body` (an expression using only `#[inline(always)]` helpers) compiled for the widest
/// vector extension the CPU supports.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn portable($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) { portable($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) { portable($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            portable($($arg),*)
        }
    };
}

/// Lanes of the independent accumulators in reductions: wide enough for one AVX-512 register, and
/// a fixed summation order whatever the vector width, so results do not depend on the CPU.
pub(crate) const LANES: usize = 16;

/// e^x for x in f32's range, to within a few ulp (Cephes' `expf` polynomial after reducing by
/// ln 2), written without branches so loops over it vectorize. Below -87 it returns ~1e-38
/// instead of a denormal or 0: softmax and GELU only add it to numbers near 1.
#[inline(always)]
pub(crate) fn exp_approx(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds x·log2(e) to an integer n and leaves n in the low mantissa bits, so
    // 2ⁿ is built with integer ops (`n as i32` is a saturating cast that does not vectorize).
    const ROUNDER: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    e * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// erf(x) as a rational function of x on [-4, 4] (beyond it erf is ±1 in f32): the minimax
/// fit Eigen and XLA use for f32, a few ulp from the exact value, with no exp and no branch.
#[inline(always)]
pub(crate) fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329e-3;
    q = q * x2 - 1.426_474e-2;
    x * p / q
}

multiversion! {
    pub(crate) fn gelu_erf_in_place(xs: &mut [f32]) {
        for x in xs.iter_mut() {
            *x = 0.5 * *x * (1.0 + erf_approx(*x * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

/// softmax(x · scale) over `row`, in place.
#[inline(always)]
fn softmax_in_place(row: &mut [f32], scale: f32) {
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &x) in max.iter_mut().zip(chunk) {
            *m = m.max(x);
        }
    }
    let max = chunks.remainder().iter().fold(
        max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        |a, &b| a.max(b),
    );
    for x in row.iter_mut() {
        *x = exp_approx((*x - max) * scale);
    }
    let inverse = 1.0 / sum_lanes(row);
    for x in row.iter_mut() {
        *x *= inverse;
    }
}

multiversion! {
    pub(crate) fn softmax_rows_in_place(scores: &mut [f32], row_len: usize, scale: f32) {
        for row in scores.chunks_exact_mut(row_len) {
            softmax_in_place(row, scale);
        }
    }
}

multiversion! {
    /// Rows of a prefill chunk's scores (`row_len` keys each; row i is position
    /// `first_position + i`): softmax over the keys that row may see — `pad..=position`, or only
    /// itself when the row is padding (position < pad) — and exactly 0 elsewhere, which is what
    /// an additive -inf mask gives.
    pub(crate) fn causal_softmax_rows_in_place(
        scores: &mut [f32],
        row_len: usize,
        first_position: usize,
        pad: usize,
        scale: f32
    ) {
        for (i, row) in scores.chunks_exact_mut(row_len).enumerate() {
            let own = first_position + i;
            let first = if pad <= own { pad } else { own };
            let (before, rest) = row.split_at_mut(first);
            let (visible, after) = rest.split_at_mut(own + 1 - first);
            before.fill(0.0);
            after.fill(0.0);
            softmax_in_place(visible, scale);
        }
    }
}

multiversion! {
    pub(crate) fn layer_norm_rows_in_place(xs: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len();
        for row in xs.chunks_exact_mut(width) {
            let mean = sum_lanes(row) / width as f32;
            for x in row.iter_mut() {
                *x -= mean;
            }
            let mut squares = [0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (s, &x) in squares.iter_mut().zip(chunk) {
                    *s += x * x;
                }
            }
            let variance = (squares.iter().sum::<f32>()
                + chunks.remainder().iter().map(|x| x * x).sum::<f32>())
                / width as f32;
            let inverse = 1.0 / (variance + eps).sqrt();
            for ((x, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
                *x = *x * inverse * w + b;
            }
        }
    }
}

/// Sum with [`LANES`] independent accumulators (vectorizable, fixed order).
#[inline(always)]
pub(crate) fn sum_lanes(xs: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// A row-major matrix view: element (i, j) sits at `ptr + i * row_stride + j * col_stride`.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub(crate) ptr: *const f32,
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

/// `dst (m × n, rows dst_row_stride apart) (+)= lhs (m × k) · rhs (k × n)`; with `accumulate` the
/// product is added to what `dst` holds.
///
/// # Safety
/// Every element the views and `dst` address must lie inside live allocations, and `dst` must not
/// overlap the inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_row_stride: usize,
    accumulate: bool,
    lhs: View,
    rhs: View,
    parallelism: Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_row_stride as isize,
        accumulate,
        lhs.ptr,
        lhs.col_stride as isize,
        lhs.row_stride as isize,
        rhs.ptr,
        rhs.col_stride as isize,
        rhs.row_stride as isize,
        1.0,
        1.0,
        false,
        false,
        false,
        parallelism,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_approx_is_within_a_few_ulp_of_libm() {
        let mut worst = 0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let relative = ((exp_approx(x) - x.exp()) / x.exp()).abs();
            worst = worst.max(relative);
            x += 0.013;
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp_approx(0.0), 1.0);
        assert!(exp_approx(-1e4) < 1e-37 && exp_approx(-1e4) >= 0.0);
    }

    #[test]
    fn erf_approx_is_within_a_few_ulp() {
        let mut worst = 0f64;
        let mut x = -6.0f32;
        while x < 6.0 {
            let exact = candle_core::cpu::erf::erf_f64(x as f64);
            worst = worst.max((erf_approx(x) as f64 - exact).abs());
            x += 0.001;
        }
        assert!(worst < 5e-7, "worst absolute error {worst}");
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_the_direct_formula() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 23) as f32 * 0.37 - 4.0)
            .collect();
        let mut scores: Vec<f32> = row.iter().chain(row.iter().rev()).copied().collect();
        softmax_rows_in_place(&mut scores, row.len(), 0.5);
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let denominator: f64 = row.iter().map(|&x| (((x - max) * 0.5) as f64).exp()).sum();
        for (j, &x) in row.iter().enumerate() {
            let expected = (((x - max) * 0.5) as f64).exp() / denominator;
            assert!((scores[j] as f64 - expected).abs() < 1e-6);
            assert!((scores[2 * row.len() - 1 - j] as f64 - expected).abs() < 1e-6);
        }
    }
}
