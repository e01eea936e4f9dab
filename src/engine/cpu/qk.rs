//! Activations quantized to Q8_K as llama.cpp's `quantize_row_q8_K` does (per 256 values an f32
//! scale, int8 values and per-16 sums): the pairing ggml uses for its k-quant weights, shared by
//! the Q4_K (`cpu::q4k`) and Q6_K (`cpu::q6k`) kernels; vectorized where those kernels run.

/// Values per k-quant super-block (ggml's `QK_K`).
pub(crate) const QK_K: usize = 256;

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
        if super::q8::supported() {
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
/// The CPU must have the features [`supported`](super::q8::supported) checks; `xs` and `quants`
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    pub(crate) fn f16_bytes(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_le_bytes()
    }

    pub(crate) fn f16_at(bytes: &[u8], at: usize) -> f32 {
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
    pub(crate) fn q8k_steps(y: &[Q8K]) -> Vec<f32> {
        y.iter().flat_map(|b| [b.d.abs(); QK_K]).collect()
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
}
