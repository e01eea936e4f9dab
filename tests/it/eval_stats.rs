//! The significance tests against scipy's values recorded in tests/fixtures/stats.json
//! (scripts/make-stats-fixture.py).

use serde::Deserialize;
use tableseek::eval::stats::{
    paired_bootstrap, paired_t_test, wilcoxon_signed_rank, BootstrapOptions, WilcoxonMethod,
};

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    a: Vec<f64>,
    b: Vec<f64>,
    mean_diff: f64,
    t_test: TTest,
    wilcoxon: Wilcoxon,
    normal_ci: [f64; 2],
}

#[derive(Deserialize)]
struct TTest {
    t: f64,
    df: f64,
    p_value: f64,
}

#[derive(Deserialize)]
struct Wilcoxon {
    statistic: f64,
    p_value: f64,
    method: String,
}

fn fixture() -> Fixture {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/stats.json"
    ))
    .expect("read tests/fixtures/stats.json");
    serde_json::from_str(&text).expect("parse stats.json")
}

#[test]
fn t_test_matches_scipy() {
    for case in fixture().cases {
        let r = paired_t_test(&case.a, &case.b).unwrap();
        assert!(
            (r.p_value - case.t_test.p_value).abs() < 1e-6,
            "{}: p {} vs scipy {}",
            case.name,
            r.p_value,
            case.t_test.p_value
        );
        // Much tighter than required: the formula is the same, only rounding differs.
        assert!(
            (r.p_value - case.t_test.p_value).abs() < 1e-12,
            "{}",
            case.name
        );
        assert!((r.t - case.t_test.t).abs() < 1e-9 * case.t_test.t.abs().max(1.0));
        assert_eq!(r.df, case.t_test.df, "{}", case.name);
        assert!((r.mean_diff - case.mean_diff).abs() < 1e-12);
    }
}

#[test]
fn wilcoxon_matches_scipy_in_every_method() {
    let mut methods_seen = Vec::new();
    for case in fixture().cases {
        let r = wilcoxon_signed_rank(&case.a, &case.b).unwrap();
        let method = match r.method {
            WilcoxonMethod::Exact => "exact",
            WilcoxonMethod::Permutation => "permutation",
            WilcoxonMethod::Normal => "normal",
        };
        assert_eq!(method, case.wilcoxon.method, "{}", case.name);
        assert_eq!(r.statistic, case.wilcoxon.statistic, "{}", case.name);
        assert!(
            (r.p_value - case.wilcoxon.p_value).abs() < 1e-6,
            "{} ({method}): p {} vs scipy {}",
            case.name,
            r.p_value,
            case.wilcoxon.p_value
        );
        // Same arithmetic as scipy up to summation order.
        assert!(
            (r.p_value - case.wilcoxon.p_value).abs() < 1e-12,
            "{}",
            case.name
        );
        assert_eq!(r.z.is_some(), method == "normal");
        methods_seen.push(method);
    }
    for method in ["exact", "permutation", "normal"] {
        assert!(
            methods_seen.contains(&method),
            "fixture lacks a {method} case"
        );
    }
}

#[test]
fn bootstrap_is_deterministic_for_a_seed() {
    let case = &fixture().cases[0];
    let options = BootstrapOptions::default().seed(11);
    let first = paired_bootstrap(&case.a, &case.b, &options).unwrap();
    let second = paired_bootstrap(&case.a, &case.b, &options).unwrap();
    assert_eq!(first, second);
    let other = paired_bootstrap(&case.a, &case.b, &options.clone().seed(12)).unwrap();
    assert_ne!(first.ci_low, other.ci_low);
    assert_eq!(first.resamples, 10_000);
}

#[test]
fn bootstrap_interval_agrees_with_normal_theory_on_large_samples() {
    for case in fixture().cases.iter().filter(|c| c.a.len() >= 200) {
        let r = paired_bootstrap(&case.a, &case.b, &BootstrapOptions::default()).unwrap();
        assert!((r.mean_diff - case.mean_diff).abs() < 1e-12);
        let [low, high] = case.normal_ci;
        let width = high - low;
        // With n = 200 and 10,000 resamples the percentile interval's ends sit within a few
        // percent of the interval's width from the normal-theory ends.
        assert!(
            (r.ci_low - low).abs() < 0.06 * width && (r.ci_high - high).abs() < 0.06 * width,
            "{}: bootstrap [{}, {}] vs normal [{low}, {high}]",
            case.name,
            r.ci_low,
            r.ci_high
        );
        assert!(r.ci_low <= r.mean_diff && r.mean_diff <= r.ci_high);
    }
}

#[test]
fn bootstrap_p_value_tracks_the_evidence() {
    let fixture = fixture();
    let find = |name: &str| fixture.cases.iter().find(|c| c.name == name).unwrap();
    let better = find("n200_f1_better");
    let r = paired_bootstrap(&better.a, &better.b, &BootstrapOptions::default()).unwrap();
    // A clear improvement: the smallest p the 10,000 resamples can give, interval away from 0.
    assert!(r.p_value < 1e-3, "{r:?}");
    assert!(r.ci_low > 0.0);
    let null = find("n200_f1");
    let r = paired_bootstrap(&null.a, &null.b, &BootstrapOptions::default()).unwrap();
    // No real difference: p close to the t-test's and the interval spans 0.
    assert!((r.p_value - null.t_test.p_value).abs() < 0.05, "{r:?}");
    assert!(r.ci_low < 0.0 && r.ci_high > 0.0);
}

mod sign_flip_enumeration {
    use super::*;
    use proptest::prelude::*;

    /// p-value by listing all 2^n sign assignments of the non-zero differences, with average
    /// ranks computed the slow, obvious way.
    fn brute_force_p(d: &[f64]) -> f64 {
        let nonzero: Vec<f64> = d.iter().copied().filter(|&x| x != 0.0).collect();
        let rank = |x: f64| {
            let less = nonzero.iter().filter(|y| y.abs() < x.abs()).count() as f64;
            let equal = nonzero.iter().filter(|y| y.abs() == x.abs()).count() as f64;
            less + (equal + 1.0) / 2.0
        };
        let ranks: Vec<f64> = nonzero.iter().map(|&x| rank(x)).collect();
        let observed: f64 = nonzero
            .iter()
            .zip(&ranks)
            .filter(|(x, _)| **x > 0.0)
            .map(|(_, r)| r)
            .sum();
        let outcomes = 1usize << ranks.len();
        let (mut at_most, mut at_least) = (0usize, 0usize);
        for signs in 0..outcomes {
            let t: f64 = (0..ranks.len())
                .filter(|i| signs >> i & 1 == 1)
                .map(|i| ranks[i])
                .sum();
            at_most += usize::from(t <= observed);
            at_least += usize::from(t >= observed);
        }
        (2.0 * at_most.min(at_least) as f64 / outcomes as f64).min(1.0)
    }

    proptest! {
        // Small integer-valued differences: plenty of ties and zeros, n within scipy's exact and
        // permutation range (<= 13 pairs).
        #[test]
        fn exact_paths_equal_brute_force(d in prop::collection::vec(-4i32..=4, 1..=13)) {
            let a: Vec<f64> = d.iter().map(|&x| f64::from(x)).collect();
            let b = vec![0.0; a.len()];
            let r = wilcoxon_signed_rank(&a, &b).unwrap();
            prop_assume!(r.n_nonzero > 0);
            prop_assert_ne!(r.method, WilcoxonMethod::Normal);
            let want = brute_force_p(&a);
            prop_assert!((r.p_value - want).abs() < 1e-12, "{} vs {}", r.p_value, want);
        }
    }
}
