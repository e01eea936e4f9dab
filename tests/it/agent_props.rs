//! Property tests of the loop: random settings and random (often broken) model outputs must never
//! break the budget, the step accounting, the call order or the anonymity of prompts.

use crate::agent_support::*;
use proptest::prelude::*;
use tableseek::agent::testing::ScriptedLlm;
use tableseek::agent::{
    Agent, AgentConfig, AgentError, History, StepKind, Strategy as Refine, TaskType, Trajectory,
    Verdict,
};

const OUTPUTS: [&str; 18] = [
    r#"["France", "Paris"]"#,
    r#"["Seine", "length_km"]"#,
    r#"["zzz_nothing"]"#,
    r#"{"action": "select", "tables": ["T0"]}"#,
    r#"{"action": "select", "tables": ["T3", "T1", "T9"]}"#,
    r#"{'action': 'select', 'tables': ['Table_4',],}"#,
    r#"{"action": "rerank", "order": ["T2", "T1", "T0"]}"#,
    r#"{"action": "regenerate", "patterns": ["Germany"]}"#,
    r#"{"action": "regenerate", "patterns": []}"#,
    r#"{"action": "none"}"#,
    "I am not sure what to do here.",
    "<think>select T0</think>",
    "Answer: INSUFFICIENT",
    "Answer: 2148000",
    "Answer: CANNOT VERIFY",
    "Answer: SUPPORTED",
    "The table does not contain it.",
    "",
];

fn strategy() -> impl Strategy<Value = Refine> {
    proptest::sample::select(Refine::PAPER.to_vec())
}

fn config() -> impl Strategy<Value = AgentConfig> {
    (
        2usize..12,
        strategy(),
        1usize..4,
        any::<bool>(),
        any::<bool>(),
        proptest::array::uniform6(any::<bool>()),
    )
        .prop_filter_map("valid", |(steps, strategy, k, full, fact, a)| {
            AgentConfig::builder()
                .max_steps(steps)
                .strategy(strategy)
                .fallback_tables(k)
                .history(if full { History::Full } else { History::None })
                .task(if fact {
                    TaskType::FactVerification
                } else {
                    TaskType::Tableqa
                })
                .no_refine(a[0])
                .no_fallback(a[1])
                .no_regenerate(a[2])
                .no_select(a[3])
                .match_only(a[4])
                .match_only_qa(a[5])
                .build()
                .ok()
        })
}

fn check(t: &Trajectory, config: &AgentConfig) {
    let kinds: Vec<StepKind> = t.calls.iter().map(|c| c.kind).collect();
    assert_eq!(t.steps, kinds.len());
    assert_eq!(t.totals.steps, kinds.len());
    assert!(t.steps <= config.max_steps);
    assert_eq!(kinds.first(), Some(&StepKind::PatternGen));
    let is_qa = |k: &StepKind| matches!(k, StepKind::Qa | StepKind::QaFallback);
    let first_qa = kinds.iter().position(is_qa);
    // Pattern generation, then refine calls, then QA calls: never interleaved.
    for (i, kind) in kinds.iter().enumerate().skip(1) {
        match first_qa {
            Some(q) if i >= q => {
                let expected = if i == q {
                    StepKind::Qa
                } else {
                    StepKind::QaFallback
                };
                assert_eq!(*kind, expected);
            }
            _ => assert!(!is_qa(kind)),
        }
    }
    let refines = first_qa.unwrap_or(kinds.len()) - 1;
    if config.ablations.no_refine {
        assert_eq!(refines, 0);
    }
    // One step always stays for QA.
    assert!(refines <= config.max_steps - 2);
    if config.ablations.no_fallback {
        assert!(!kinds.contains(&StepKind::QaFallback));
    }
    // Fallback continues only after an unsatisfactory verdict, and never re-reads a table.
    let qa_calls: Vec<usize> = (0..kinds.len()).filter(|&i| is_qa(&kinds[i])).collect();
    for &call in qa_calls.iter().take(qa_calls.len().saturating_sub(1)) {
        let verdict = t
            .tables_seen
            .iter()
            .find(|s| s.call == call)
            .unwrap()
            .verdict;
        assert!(!verdict.is_satisfactory());
    }
    let mut ids: Vec<&str> = t.tables_seen.iter().map(|s| s.table_id.as_str()).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "a table was read twice");
    match qa_calls.last() {
        Some(&last) => {
            let first_of_last = t.tables_seen.iter().find(|s| s.call == last).unwrap();
            assert_eq!(
                t.final_table.as_deref(),
                Some(first_of_last.table_id.as_str())
            );
            assert_eq!(t.verdict, Some(first_of_last.verdict));
        }
        None => assert!(t.final_table.is_none() && t.verdict.is_none()),
    }
    if config.task == TaskType::FactVerification && t.verdict.is_some() {
        assert!(t.answer == "supported" || t.answer == "refuted");
    }
    if t.verdict == Some(Verdict::Answered) {
        assert_eq!(config.task, TaskType::Tableqa);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_script_keeps_the_loop_invariants(
        config in config(),
        picks in proptest::collection::vec(0usize..OUTPUTS.len(), 0..16),
    ) {
        let outputs: Vec<&str> = picks.iter().map(|&i| OUTPUTS[i]).collect();
        let space = corpus();
        let mut llm = ScriptedLlm::new(outputs.iter().copied());
        let agent = Agent::new(config.clone()).unwrap();
        let result = agent.run(&mut llm, &space, "What was the population of Paris in 2020?");
        assert_no_leak(llm.requests());
        match result {
            Ok(t) => {
                prop_assert_eq!(llm.requests().len(), t.steps);
                check(&t, &config);
            }
            Err(AgentError::Aborted { call, partial, .. }) => {
                // The script ran out: everything answered so far is kept.
                prop_assert_eq!(call, outputs.len());
                prop_assert_eq!(partial.calls.len(), outputs.len());
                prop_assert_eq!(llm.requests().len(), outputs.len() + 1);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }
}
