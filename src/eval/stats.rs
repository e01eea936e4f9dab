//! Paired significance tests on per-query scores (usually F1 or 0/1 correctness) of two systems
//! run on the same queries: a paired bootstrap, the Wilcoxon signed-rank test and the paired t-test.
//!
//! All three take the two score vectors `a` and `b` (same query order) and test the differences
//! `d = a - b`. The Wilcoxon test and the t-test reproduce `scipy.stats.wilcoxon` (scipy 1.17
//! defaults) and `scipy.stats.ttest_rel`; `tests/fixtures/stats.json` holds scipy's values and the
//! tests hold us to 1e-6 on every p-value. Everything here is deterministic: the bootstrap uses its
//! own seeded generator, so a seed gives the same interval on every platform and every release.

use serde::Serialize;

use super::special::{normal_two_sided_p, student_t_two_sided_p};

/// Why a test could not run on the given samples.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    #[error("paired samples differ in length: {a} vs {b}")]
    LengthMismatch { a: usize, b: usize },
    #[error("{test} needs at least {needed} paired samples, got {got}")]
    TooFewSamples {
        test: &'static str,
        needed: usize,
        got: usize,
    },
    #[error("sample {index} is not a finite number ({value})")]
    NonFinite { index: usize, value: f64 },
    #[error("every paired difference equals {difference}; the t statistic is undefined")]
    ZeroVariance { difference: f64 },
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

fn paired_differences(a: &[f64], b: &[f64]) -> Result<Vec<f64>, StatsError> {
    if a.len() != b.len() {
        return Err(StatsError::LengthMismatch {
            a: a.len(),
            b: b.len(),
        });
    }
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(index, (&x, &y))| {
            for value in [x, y] {
                if !value.is_finite() {
                    return Err(StatsError::NonFinite { index, value });
                }
            }
            Ok(x - y)
        })
        .collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

// ---------------------------------------------------------------------------------------------
// Paired bootstrap
// ---------------------------------------------------------------------------------------------

/// Settings of [`paired_bootstrap`]; `BootstrapOptions::default()` is the paper's setting.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapOptions {
    resamples: usize,
    seed: u64,
    confidence: f64,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        Self {
            resamples: 10_000,
            seed: 2024,
            confidence: 0.95,
        }
    }
}

impl BootstrapOptions {
    /// Number of bootstrap resamples (default 10,000).
    pub fn resamples(mut self, resamples: usize) -> Self {
        self.resamples = resamples;
        self
    }

    /// Seed of the resampling generator (default 2024).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Coverage of the percentile interval, in (0, 1) (default 0.95).
    pub fn confidence(mut self, confidence: f64) -> Self {
        self.confidence = confidence;
        self
    }
}

/// Result of [`paired_bootstrap`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BootstrapResult {
    /// Mean of `a - b` on the original sample.
    pub mean_diff: f64,
    /// Percentile interval of the resampled mean differences.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Two-sided p-value for "mean difference = 0"; see [`paired_bootstrap`].
    pub p_value: f64,
    pub resamples: usize,
    pub seed: u64,
}

/// Paired bootstrap of the mean difference `mean(a - b)`.
///
/// Each resample draws `n` query indices with replacement (the same indices for both systems,
/// which is what makes it paired) and records the mean difference over them.
///
/// - Interval: percentile method, the `(1-c)/2` and `(1+c)/2` quantiles of the resampled means,
///   with linear interpolation between order statistics (numpy's default `percentile`).
/// - p-value: the shifted-null test of Efron & Tibshirani (1993, §16.4). Centring the differences
///   on zero imposes the null hypothesis; a resample of the centred differences has mean
///   `m*_b - m`, so `p = (1 + #{b : |m*_b - m| >= |m|}) / (B + 1)`. The `+1` counts the observed
///   sample as one of the resamples, so p is never exactly 0 and is at most 1.
pub fn paired_bootstrap(
    a: &[f64],
    b: &[f64],
    options: &BootstrapOptions,
) -> Result<BootstrapResult, StatsError> {
    let d = paired_differences(a, b)?;
    if d.is_empty() {
        return Err(StatsError::TooFewSamples {
            test: "paired bootstrap",
            needed: 1,
            got: 0,
        });
    }
    if options.resamples == 0 {
        return Err(StatsError::InvalidOption(
            "the bootstrap needs at least one resample".into(),
        ));
    }
    if !(options.confidence > 0.0 && options.confidence < 1.0) {
        return Err(StatsError::InvalidOption(format!(
            "confidence must lie in (0, 1), got {}",
            options.confidence
        )));
    }

    let observed = mean(&d);
    let n = d.len();
    let mut rng = SplitMix64::new(options.seed);
    let mut means: Vec<f64> = (0..options.resamples)
        .map(|_| {
            let sum: f64 = (0..n).map(|_| d[rng.below(n)]).sum();
            sum / n as f64
        })
        .collect();

    let extreme = means
        .iter()
        .filter(|&&m| (m - observed).abs() >= observed.abs())
        .count();
    let p_value = (1 + extreme) as f64 / (options.resamples + 1) as f64;

    means.sort_by(f64::total_cmp);
    let tail = (1.0 - options.confidence) / 2.0;
    Ok(BootstrapResult {
        mean_diff: observed,
        ci_low: percentile(&means, tail),
        ci_high: percentile(&means, 1.0 - tail),
        p_value,
        resamples: options.resamples,
        seed: options.seed,
    })
}

/// Quantile `q` of sorted values, interpolating linearly between order statistics.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let lower = position.floor() as usize;
    let upper = position.ceil() as usize;
    let weight = position - lower as f64;
    sorted[lower] + (sorted[upper] - sorted[lower]) * weight
}

/// SplitMix64 (Steele, Lea & Flood 2014). Our own rather than `rand`'s so that a seed keeps giving
/// the same bootstrap interval across `rand` releases (their value streams are not a stable API);
/// the bootstrap needs nothing stronger than this.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform index in `0..n` by multiply-shift (Lemire); the bias is below n / 2^64.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

// ---------------------------------------------------------------------------------------------
// Wilcoxon signed-rank test
// ---------------------------------------------------------------------------------------------

/// How [`wilcoxon_signed_rank`] computed its p-value (scipy's `method="auto"` choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WilcoxonMethod {
    /// Exact null distribution of the signed-rank sum: n <= 50, no ties, no zero differences.
    Exact,
    /// Every sign flip of the non-zero differences, with their tied (average) ranks: n <= 13 with
    /// ties or zeros. scipy runs this as an exhaustive `permutation_test`; we count the same
    /// outcomes with a subset-sum table, which gives identical p-values.
    Permutation,
    /// Normal approximation with the tie correction and no continuity correction: n > 50, or
    /// 14 <= n <= 50 with ties or zeros.
    Normal,
}

/// Result of [`wilcoxon_signed_rank`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WilcoxonResult {
    /// min(R+, R-), scipy's two-sided statistic.
    pub statistic: f64,
    pub p_value: f64,
    /// Pairs left after dropping zero differences.
    pub n_nonzero: usize,
    pub method: WilcoxonMethod,
    /// Standardised R+ (negative, as scipy reports it) when the normal approximation was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub z: Option<f64>,
}

/// Two-sided Wilcoxon signed-rank test of `a - b`, as `scipy.stats.wilcoxon(a, b)` with its defaults
/// (`zero_method="wilcox"`: zero differences are dropped; `correction=False`; `method="auto"`).
///
/// The method follows scipy 1.17's automatic choice, where `n` counts all pairs including zeros:
/// see [`WilcoxonMethod`]. Exact and permutation p-values are `2 * min(P(T <= R+), P(T >= R+))`,
/// capped at 1. When every difference is zero the test has no information: we return statistic 0
/// and p = 1 (scipy returns 1 for n <= 13 and NaN above).
pub fn wilcoxon_signed_rank(a: &[f64], b: &[f64]) -> Result<WilcoxonResult, StatsError> {
    let d = paired_differences(a, b)?;
    if d.is_empty() {
        return Err(StatsError::TooFewSamples {
            test: "Wilcoxon signed-rank test",
            needed: 1,
            got: 0,
        });
    }
    let n_total = d.len();
    let nonzero: Vec<f64> = d.iter().copied().filter(|&x| x != 0.0).collect();
    let has_zeros = nonzero.len() < n_total;
    let n = nonzero.len();

    let (doubled_ranks, tie_sizes) = doubled_average_ranks(&nonzero);
    let has_ties = tie_sizes.iter().any(|&t| t > 1);
    let method = if n_total > 50 {
        WilcoxonMethod::Normal
    } else if !has_ties && !has_zeros {
        WilcoxonMethod::Exact
    } else if n_total <= 13 {
        WilcoxonMethod::Permutation
    } else {
        WilcoxonMethod::Normal
    };

    if n == 0 {
        return Ok(WilcoxonResult {
            statistic: 0.0,
            p_value: 1.0,
            n_nonzero: 0,
            method,
            z: None,
        });
    }

    // Ranks are kept doubled so tied (half-integer) ranks stay exact integers.
    let doubled_r_plus: u64 = nonzero
        .iter()
        .zip(&doubled_ranks)
        .filter(|(&x, _)| x > 0.0)
        .map(|(_, &r)| r)
        .sum();
    let doubled_total = (n * (n + 1)) as u64;
    let r_plus = doubled_r_plus as f64 / 2.0;
    let r_minus = (doubled_total - doubled_r_plus) as f64 / 2.0;
    let statistic = r_plus.min(r_minus);

    let (p_value, z) = match method {
        WilcoxonMethod::Normal => {
            let nf = n as f64;
            let mean = nf * (nf + 1.0) / 4.0;
            let tie_term: f64 = tie_sizes
                .iter()
                .map(|&t| {
                    let t = t as f64;
                    t * t * t - t
                })
                .sum();
            let se = ((nf * (nf + 1.0) * (2.0 * nf + 1.0) - tie_term / 2.0) / 24.0).sqrt();
            let z = (r_plus - mean) / se;
            (normal_two_sided_p(z), Some(-z.abs()))
        }
        WilcoxonMethod::Exact | WilcoxonMethod::Permutation => {
            (sign_flip_p_value(&doubled_ranks, doubled_r_plus), None)
        }
    };
    Ok(WilcoxonResult {
        statistic,
        p_value,
        n_nonzero: n,
        method,
        z,
    })
}

/// Twice the average rank of each |value| (1-based), and the size of every group of tied values.
fn doubled_average_ranks(values: &[f64]) -> (Vec<u64>, Vec<usize>) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[i].abs().total_cmp(&values[j].abs()));
    let mut ranks = vec![0u64; values.len()];
    let mut tie_sizes = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let key = values[order[start]].abs();
        let end = order[start..]
            .iter()
            .position(|&i| values[i].abs() != key)
            .map_or(order.len(), |offset| start + offset);
        // Average of the 1-based ranks start+1 ..= end, doubled: (start + 1) + end.
        let doubled = (start + 1 + end) as u64;
        for &i in &order[start..end] {
            ranks[i] = doubled;
        }
        tie_sizes.push(end - start);
        start = end;
    }
    (ranks, tie_sizes)
}

/// `2 * min(P(T <= t), P(T >= t))` where T is the sum of a uniformly random subset of `ranks`
/// (each rank's sign flipped with probability 1/2), counted exactly with a subset-sum table.
/// Only called for n <= 50 pairs, so the 2^n outcome counts fit in a u64.
fn sign_flip_p_value(ranks: &[u64], observed: u64) -> f64 {
    let total: u64 = ranks.iter().sum();
    let mut counts = vec![0u64; total as usize + 1];
    counts[0] = 1;
    let mut reachable = 0usize;
    for &r in ranks {
        let r = r as usize;
        for sum in (0..=reachable).rev() {
            counts[sum + r] += counts[sum];
        }
        reachable += r;
    }
    let outcomes = (1u64 << ranks.len()) as f64;
    let observed = observed as usize;
    let at_most: u64 = counts[..=observed].iter().sum();
    let at_least: u64 = counts[observed..].iter().sum();
    (2.0 * at_most.min(at_least) as f64 / outcomes).min(1.0)
}

// ---------------------------------------------------------------------------------------------
// Paired t-test
// ---------------------------------------------------------------------------------------------

/// Result of [`paired_t_test`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TTestResult {
    pub t: f64,
    pub df: f64,
    pub p_value: f64,
    pub mean_diff: f64,
}

/// Two-sided paired t-test of `a - b`, as `scipy.stats.ttest_rel(a, b)`:
/// `t = mean(d) / (sd(d) / sqrt(n))` with the n-1 standard deviation, df = n-1.
pub fn paired_t_test(a: &[f64], b: &[f64]) -> Result<TTestResult, StatsError> {
    let d = paired_differences(a, b)?;
    if d.len() < 2 {
        return Err(StatsError::TooFewSamples {
            test: "paired t-test",
            needed: 2,
            got: d.len(),
        });
    }
    let n = d.len() as f64;
    let mean_diff = mean(&d);
    let variance = d.iter().map(|x| (x - mean_diff).powi(2)).sum::<f64>() / (n - 1.0);
    if variance == 0.0 {
        return Err(StatsError::ZeroVariance {
            difference: mean_diff,
        });
    }
    let t = mean_diff / (variance / n).sqrt();
    let df = n - 1.0;
    Ok(TTestResult {
        t,
        df,
        p_value: student_t_two_sided_p(t, df),
        mean_diff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties_and_ignore_sign() {
        let (ranks, ties) = doubled_average_ranks(&[-1.0, 2.0, 1.0, 3.0]);
        assert_eq!(ranks, vec![3, 6, 3, 8]);
        assert_eq!(ties, vec![2, 1, 1]);
    }

    #[test]
    fn exact_distribution_of_three_ranks() {
        // Subset sums of {1,2,3}: 0,1,2,3,3,4,5,6. P(T <= 0) = 1/8, so p = 2/8.
        assert_eq!(sign_flip_p_value(&[2, 4, 6], 0), 0.25);
        // T = 3 sits in the middle: both tails exceed 1/2, p caps at 1.
        assert_eq!(sign_flip_p_value(&[2, 4, 6], 6), 1.0);
    }

    #[test]
    fn errors_are_specific() {
        assert_eq!(
            paired_t_test(&[1.0], &[1.0, 2.0]),
            Err(StatsError::LengthMismatch { a: 1, b: 2 })
        );
        assert!(matches!(
            paired_t_test(&[1.0, f64::NAN], &[1.0, 2.0]),
            Err(StatsError::NonFinite { index: 1, .. })
        ));
        assert!(matches!(
            paired_t_test(&[1.0, 2.0], &[0.0, 1.0]),
            Err(StatsError::ZeroVariance { difference }) if difference == 1.0
        ));
        assert!(matches!(
            paired_bootstrap(&[1.0], &[0.0], &BootstrapOptions::default().confidence(1.0)),
            Err(StatsError::InvalidOption(_))
        ));
    }

    #[test]
    fn all_zero_differences_carry_no_evidence() {
        let r = wilcoxon_signed_rank(&[0.5; 60], &[0.5; 60]).unwrap();
        assert_eq!((r.statistic, r.p_value, r.n_nonzero), (0.0, 1.0, 0));
    }

    #[test]
    fn generator_indices_cover_the_range_evenly() {
        let mut rng = SplitMix64::new(7);
        let mut hits = [0usize; 10];
        for _ in 0..100_000 {
            hits[rng.below(10)] += 1;
        }
        assert!(
            hits.iter().all(|&h| (9_000..11_000).contains(&h)),
            "{hits:?}"
        );
    }
}
