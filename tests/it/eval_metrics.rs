//! The paper's metrics on hand-made runs whose values can be worked out on paper.

use tableseek::eval::metrics::{
    evaluate, format_robustness, recall_at_k, refinement_curve, Aggregate, AnswerOutcome,
    MetricsError, QueryMetrics, QueryOutcome, Verdict,
};

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A TableSeek-style outcome on a dataset with sibling groups.
fn seek(ranking: &[&str], seen: &[&str], final_table: &str, prediction: &str) -> QueryOutcome {
    QueryOutcome {
        gold_table: "gold".into(),
        group: Some(ids(&["sib1", "sib2"])),
        ranking: ids(ranking),
        tables_seen: Some(ids(seen)),
        final_table: Some(final_table.into()),
        answer: Some(AnswerOutcome::TableQa {
            prediction: prediction.into(),
            gold_answers: ids(&["35,156", "thirty-five thousand"]),
        }),
    }
}

fn approx(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-12)
}

#[test]
fn recall_cuts() {
    let ranking = ids(&["a", "b", "gold", "c"]);
    assert!(!recall_at_k(&ranking, "gold", 2));
    assert!(recall_at_k(&ranking, "gold", 3));
    assert!(!recall_at_k(&ranking, "gold", 0));
    assert!(!recall_at_k(&ids(&["a"]), "gold", 5));
}

#[test]
fn group_recall_and_final_status_per_query() {
    // Gold seen at a later QA call, but the final answer came from a sibling.
    let m = seek(&["sib1", "x", "gold"], &["sib1", "gold"], "sib1", "35156.0")
        .metrics(0)
        .unwrap();
    assert!(!m.r_at_1 && m.r_at_3 && m.r_at_5);
    assert_eq!((m.r_all, m.r_final), (Some(true), Some(false)));
    assert_eq!(
        (m.gr_at_1, m.gr_all, m.gr_final),
        (Some(true), Some(true), Some(true))
    );
    assert_eq!((m.f1, m.em), (Some(1.0), Some(true)));
    assert_eq!(m.correct, None);

    // Gold never seen; the final table is outside the group: GR@all falls back to it.
    let m = seek(&["x"], &["x", "y"], "y", "no").metrics(0).unwrap();
    assert_eq!(
        (m.r_all, m.gr_all, m.gr_final),
        (Some(false), Some(false), Some(false))
    );
    assert_eq!(m.gr_at_1, Some(false));
    let m = seek(&["x"], &["x", "sib2"], "sib2", "no")
        .metrics(0)
        .unwrap();
    assert_eq!((m.r_all, m.gr_all), (Some(false), Some(true)));
}

#[test]
fn per_query_json_uses_the_agreed_keys_and_skips_what_does_not_apply() {
    let retrieval_only = QueryOutcome {
        gold_table: "t1".into(),
        group: None,
        ranking: ids(&["t1", "t2"]),
        tables_seen: None,
        final_table: None,
        answer: None,
    };
    let json = serde_json::to_string(&retrieval_only.metrics(0).unwrap()).unwrap();
    assert_eq!(json, r#"{"r_at_1":true,"r_at_3":true,"r_at_5":true}"#);

    let verification = QueryOutcome {
        answer: Some(AnswerOutcome::FactVerification {
            prediction: Some(Verdict::Refuted),
            gold: Verdict::from_label(0).unwrap(),
        }),
        tables_seen: Some(ids(&["t2"])),
        final_table: Some("t2".into()),
        ..retrieval_only
    };
    let m = verification.metrics(0).unwrap();
    let json = serde_json::to_string(&m).unwrap();
    assert_eq!(
        json,
        r#"{"r_at_1":true,"r_at_3":true,"r_at_5":true,"r_all":false,"r_final":false,"correct":true,"label":"refuted"}"#
    );
    // Records round-trip, so a resumed run can aggregate what it stored.
    let back: QueryMetrics = serde_json::from_str(&json).unwrap();
    assert_eq!(back, m);
}

#[test]
fn aggregate_ratios_of_means() {
    let outcomes = vec![
        // R@1 1, R@all 1, R@final 1, GR all 1, F1 1.
        seek(&["gold"], &["gold"], "gold", "35156"),
        // Sibling everywhere: R 0, GR 1, F1 0.
        seek(&["sib1"], &["sib1"], "sib1", "12"),
        // Nothing: R 0, GR 0. F1 of "35,156 people" vs "35,156": P 1/2, R 1 -> 2/3.
        seek(&["x"], &["x"], "x", "35,156 people"),
        // Gold seen, final answer from another table: R@all 1, R@final 0, GR@final 0, F1 0.
        seek(&["x", "gold"], &["gold", "y"], "y", "none"),
    ];
    let run = evaluate(&outcomes).unwrap();
    assert_eq!(run.per_query.len(), 4);
    let agg = run.aggregate;
    assert_eq!(agg.queries, 4);
    assert!((agg.r_at_1 - 0.25).abs() < 1e-12 && (agg.r_at_3 - 0.5).abs() < 1e-12);
    assert!(approx(agg.r_all, 0.5) && approx(agg.r_final, 0.25));
    assert!(approx(agg.gr_at_1, 0.5) && approx(agg.gr_all, 0.75) && approx(agg.gr_final, 0.5));
    assert!(approx(agg.ds_at_1, 0.5));
    assert!(approx(agg.ds_all, 0.5 / 0.75));
    assert!(approx(agg.ds_final, 0.5));
    let f1 = (1.0 + 0.0 + 2.0 / 3.0 + 0.0) / 4.0;
    assert!(approx(agg.f1, f1));
    assert!(approx(agg.em, 0.25));
    assert!(approx(agg.eff, f1 / 0.5));
    assert_eq!((agg.qa_queries, agg.verification_queries), (4, 0));
    assert_eq!((agg.acc, agg.acc_sup, agg.acc_ref), (None, None, None));
}

#[test]
fn ds_and_eff_are_undefined_when_their_denominator_is_zero() {
    let agg = evaluate(&[seek(&["x"], &["x"], "x", "35156")])
        .unwrap()
        .aggregate;
    assert_eq!(agg.gr_at_1, Some(0.0));
    assert_eq!(
        (agg.ds_at_1, agg.ds_all, agg.ds_final, agg.eff),
        (None, None, None, None)
    );
    let json = serde_json::to_value(&agg).unwrap();
    assert!(json["ds_at_1"].is_null());
}

#[test]
fn verification_accuracy_by_label() {
    let claim = |prediction: Option<Verdict>, label: i64| QueryOutcome {
        gold_table: "t".into(),
        group: None,
        ranking: ids(&["t"]),
        tables_seen: Some(ids(&["t"])),
        final_table: Some("t".into()),
        answer: Some(AnswerOutcome::FactVerification {
            prediction,
            gold: Verdict::from_label(label).unwrap(),
        }),
    };
    use Verdict::{Refuted, Supported};
    let outcomes = [
        claim(Some(Supported), 1),
        claim(Some(Refuted), 1),
        claim(None, 1), // no verdict counts as wrong
        claim(Some(Refuted), 0),
        claim(Some(Refuted), 0),
    ];
    let agg = evaluate(&outcomes).unwrap().aggregate;
    assert!(approx(agg.acc, 3.0 / 5.0));
    assert!(approx(agg.acc_sup, 1.0 / 3.0));
    assert!(approx(agg.acc_ref, 1.0));
    assert_eq!((agg.f1, agg.eff, agg.gr_at_1), (None, None, None));
    assert_eq!(Verdict::from_label(2), Err(MetricsError::InvalidLabel(2)));
}

#[test]
fn bad_runs_are_refused() {
    assert_eq!(Aggregate::from_metrics(&[]), Err(MetricsError::NoQueries));
    let mut outcome = seek(&["gold"], &["gold"], "gold", "x");
    outcome.answer = Some(AnswerOutcome::TableQa {
        prediction: "x".into(),
        gold_answers: vec![],
    });
    assert_eq!(
        evaluate(&[seek(&["gold"], &["gold"], "gold", "x"), outcome]).unwrap_err(),
        MetricsError::NoGoldAnswers { query: 1 }
    );
}

#[test]
fn format_robustness_figures() {
    // CSV, Markdown, HTML, Mixed.
    let r = format_robustness(&[0.40, 0.30, 0.20, 0.30]).unwrap();
    assert!((r.mean - 0.30).abs() < 1e-12);
    assert!((r.range - 0.20).abs() < 1e-12);
    // Population std: sqrt((0.01 + 0 + 0.01 + 0) / 4).
    assert!((r.std - 0.005f64.sqrt()).abs() < 1e-12);
    assert!(approx(r.wcd, 0.5));
    assert!(approx(r.frs, 50.0));
    let flat = format_robustness(&[0.0, 0.0]).unwrap();
    assert_eq!((flat.wcd, flat.frs), (None, None));
    assert_eq!(format_robustness(&[]), Err(MetricsError::NoScores));
    assert!(matches!(
        format_robustness(&[0.1, f64::NAN]),
        Err(MetricsError::InvalidScore { index: 1, .. })
    ));
}

#[test]
fn refinement_curve_carries_the_last_status_forward() {
    let curve = refinement_curve(&[
        vec![false, true],               // found it in round 1, then stopped (selected)
        vec![false, false, false, true], // found it in round 3
        vec![true],                      // right from the first patterns
        vec![true, false],               // lost it after regenerating, gave up
    ])
    .unwrap();
    assert_eq!(curve, [0.5, 0.5, 0.5, 0.75]);
    assert_eq!(
        refinement_curve(&[vec![true], vec![]]),
        Err(MetricsError::EmptyTrajectory { sample: 1 })
    );
}
