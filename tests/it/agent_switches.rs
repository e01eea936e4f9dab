//! Every refine strategy, evidence size and ablation switch, and the configuration surface.

use crate::agent_support::*;
use tableseek::agent::testing::ScriptedLlm;
use tableseek::agent::{
    Ablations, Action, Agent, AgentConfig, AgentError, Evidence, History, NoneReason, StepKind,
    Strategy, TaskType,
};

const QUERY: &str = "What was the population of Paris, France in 2020?";

fn with_strategy(strategy: Strategy) -> AgentConfig {
    AgentConfig::builder().strategy(strategy).build().unwrap()
}

#[test]
fn every_select_strategy_shows_n_and_keeps_at_most_m() {
    let all_ids = select(&["T0", "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9"]);
    for strategy in Strategy::PAPER {
        let Strategy::Select { n, m } = strategy else {
            continue;
        };
        let (t, llm) = run(
            with_strategy(strategy),
            QUERY,
            &[PATTERNS_FR, &all_ids, "Answer: 1"],
        );
        // Six tables match; n candidates are shown when that many exist.
        assert_eq!(shown_sections(&llm.requests()[1]), n.min(6), "{strategy}");
        assert_eq!(t.rounds[0].candidates.len(), n.min(6), "{strategy}");
        match &t.calls[1].action {
            Action::Select { shown_ids, .. } => assert_eq!(shown_ids.len(), m, "{strategy}"),
            other => panic!("{strategy}: unexpected {other:?}"),
        }
        assert_eq!(shown_sections(&llm.requests()[2]), m, "{strategy}");
        assert_eq!(t.tables_seen.len(), m, "{strategy}");
        let refine = prompt_text(&llm.requests()[1]);
        if m > 1 {
            assert!(refine.contains(&format!("at most {m}")), "{strategy}");
        }
        assert!(!refine.contains("\"rerank\""), "{strategy}");
    }
}

#[test]
fn every_rerank_strategy_sends_the_models_top_table_forward() {
    for strategy in Strategy::PAPER {
        let Strategy::Rerank { n } = strategy else {
            continue;
        };
        let order = r#"{"action": "rerank", "order": ["T9", "T2", "T0", "T1"]}"#;
        let (t, llm) = run(
            with_strategy(strategy),
            QUERY,
            &[PATTERNS_FR, order, "Answer: 1"],
        );
        assert_eq!(shown_sections(&llm.requests()[1]), n.min(6), "{strategy}");
        assert!(prompt_text(&llm.requests()[1]).contains("\"rerank\""));
        assert_eq!(t.calls[1].kind, StepKind::RefineRerank, "{strategy}");
        match &t.calls[1].action {
            // T9 is beyond every N here and is dropped; the full valid order is kept.
            Action::Rerank { shown_ids, .. } => assert_eq!(shown_ids, &["T2", "T0", "T1"]),
            other => panic!("{strategy}: unexpected {other:?}"),
        }
        assert_eq!(t.final_table.as_deref(), Some(IDS[5]), "{strategy}");
        assert_eq!(t.tables_seen.len(), 1);
    }
}

#[test]
fn rerank_may_regenerate_too() {
    let (t, _) = run(
        with_strategy(Strategy::Rerank { n: 3 }),
        "How long is the Seine?",
        &[
            PATTERNS_FR,
            &regenerate(&["Seine"]),
            r#"{"order": ["T0"]}"#,
            "Answer: 777",
        ],
    );
    assert_eq!(
        kinds(&t)[1..3],
        [StepKind::RefineRegenerate, StepKind::RefineRerank]
    );
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
}

#[test]
fn no_refine_goes_from_the_first_ranking_to_qa() {
    let config = AgentConfig::builder()
        .no_refine(true)
        .fallback_tables(2)
        .build()
        .unwrap();
    let (t, llm) = run(config, QUERY, &[PATTERNS_FR, "Answer: 2148000"]);
    assert_eq!(kinds(&t), [StepKind::PatternGen, StepKind::Qa]);
    assert_eq!(shown_sections(&llm.requests()[1]), 2);
    assert_eq!(t.rounds.len(), 1);
}

#[test]
fn no_fallback_stops_after_one_qa_call() {
    let config = AgentConfig::builder().no_fallback(true).build().unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T1"]),
            "Answer: INSUFFICIENT",
            "unused",
        ],
    );
    assert_eq!(t.steps, 3);
    assert_eq!(llm.remaining(), 1);
    assert_eq!(t.final_table.as_deref(), Some(IDS[1]));
}

#[test]
fn no_regenerate_selects_from_the_first_pool_only() {
    let config = AgentConfig::builder().no_regenerate(true).build().unwrap();
    let (t, llm) = run(
        config.clone(),
        QUERY,
        &[PATTERNS_FR, &regenerate(&["Seine"]), "Answer: 1"],
    );
    let refine = prompt_text(&llm.requests()[1]);
    assert!(!refine.contains("regenerate"));
    assert!(refine.contains("\"select\""));
    assert_eq!(
        t.calls[1].action,
        Action::NoAction {
            reason: NoneReason::RegenerateDisabled
        }
    );
    assert_eq!(t.rounds.len(), 1);
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));

    let (t, _) = run(config, QUERY, &[PATTERNS_FR, &select(&["T2"]), "Answer: 1"]);
    assert_eq!(t.final_table.as_deref(), Some(IDS[5]));
}

#[test]
fn no_select_regenerates_until_the_budget_then_reads_the_top1() {
    let config = AgentConfig::builder().no_select(true).build().unwrap();
    let (t, llm) = run(
        config.clone(),
        "How long is the Seine?",
        &[
            PATTERNS_FR,
            &regenerate(&["France"]),
            &regenerate(&["Germany"]),
            &regenerate(&["Seine"]),
            "Answer: 777",
        ],
    );
    assert!(!prompt_text(&llm.requests()[1]).contains("\"select\""));
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineRegenerate,
            StepKind::RefineRegenerate,
            StepKind::RefineRegenerate,
            StepKind::Qa
        ]
    );
    assert_eq!(t.rounds.len(), 4);
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));

    // A selection anyway is a refine-none.
    let (t, _) = run(config, QUERY, &[PATTERNS_FR, &select(&["T2"]), "Answer: 1"]);
    assert_eq!(
        t.calls[1].action,
        Action::NoAction {
            reason: NoneReason::SelectDisabled
        }
    );
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
}

#[test]
fn match_only_previews_drop_the_head() {
    let outputs = [PATTERNS_FR, &select(&["T0"]), "Answer: 1"];
    let (_, plain) = run(AgentConfig::default(), QUERY, &outputs);
    let config = AgentConfig::builder().match_only(true).build().unwrap();
    let (_, matched) = run(config, QUERY, &outputs);
    let plain = user_text(&plain.requests()[1]);
    let matched_refine = user_text(&matched.requests()[1]);
    assert!(plain.contains("city,country,population_2020"));
    assert!(!matched_refine.contains("city,country,population_2020"));
    assert!(matched_refine.contains("Paris,France,2148000"));
    // QA still reads the whole table.
    let qa = user_text(&matched.requests()[2]);
    assert!(qa.contains("city,country,population_2020") && qa.contains("Madrid,Spain"));
}

#[test]
fn match_only_qa_shows_qa_the_matched_rows_only() {
    let config = AgentConfig::builder().match_only_qa(true).build().unwrap();
    let (_, llm) = run(config, QUERY, &[PATTERNS_FR, &select(&["T0"]), "Answer: 1"]);
    let qa = user_text(&llm.requests()[2]);
    assert!(qa.contains("Paris,France,2148000"));
    assert!(!qa.contains("Madrid,Spain"));
    assert!(!qa.contains("population_2020"));
    // The refine previews keep their head.
    assert!(user_text(&llm.requests()[1]).contains("population_2020"));
}

#[test]
fn evidence_size_reaches_the_previews() {
    let outputs = [r#"["Germany", "France"]"#, &select(&["T0"]), "Answer: 1"];
    let small = AgentConfig::builder()
        .evidence(Evidence::Small)
        .build()
        .unwrap();
    let full = AgentConfig::builder()
        .evidence(Evidence::Full)
        .build()
        .unwrap();
    let (_, small) = run(small, QUERY, &outputs);
    let (_, full) = run(full, QUERY, &outputs);
    // Spain's row matches no pattern: only the whole-table preview shows it.
    assert!(!user_text(&small.requests()[1]).contains("Madrid,Spain"));
    assert!(user_text(&full.requests()[1]).contains("Madrid,Spain"));
}

#[test]
fn strategy_and_evidence_names_round_trip() {
    let names = ["5s1", "5s3", "10s1", "10s3", "10s5", "r3", "r5", "r10"];
    for (name, strategy) in names.iter().zip(Strategy::PAPER) {
        assert_eq!(name.parse::<Strategy>().unwrap(), strategy);
        assert_eq!(strategy.to_string(), *name);
    }
    assert_eq!(" 5S1 ".parse::<Strategy>().unwrap(), Strategy::default());
    assert_eq!(
        "l5".parse::<Strategy>().unwrap(),
        Strategy::Likelihood { n: 5 }
    );
    assert_eq!(Strategy::Likelihood { n: 3 }.to_string(), "l3");
    for bad in [
        "", "5", "s1", "5s0", "5s6", "r0", "r", "rx", "5x1", "-5s1", "l0", "l",
    ] {
        assert!(
            matches!(bad.parse::<Strategy>(), Err(AgentError::BadName { .. })),
            "{bad:?} should be rejected"
        );
    }
    for (name, evidence) in [
        ("small", Evidence::Small),
        ("medium", Evidence::Medium),
        ("big", Evidence::Big),
        ("full", Evidence::Full),
    ] {
        assert_eq!(name.parse::<Evidence>().unwrap(), evidence);
        assert_eq!(evidence.to_string(), name);
    }
    assert!("huge".parse::<Evidence>().is_err());
    assert_eq!(Evidence::Medium.row_limits(), Some((2, 10)));
    assert_eq!(Evidence::Full.row_limits(), None);
    assert_eq!(
        "fact_verification".parse::<TaskType>().unwrap(),
        TaskType::FactVerification
    );
    assert_eq!("full".parse::<History>().unwrap(), History::Full);
}

#[test]
fn config_serializes_with_readable_names_and_defaults() {
    let config = AgentConfig::builder()
        .task(TaskType::FactVerification)
        .max_steps(10)
        .strategy("10s3".parse().unwrap())
        .evidence(Evidence::Big)
        .history(History::Full)
        .no_fallback(true)
        .build()
        .unwrap();
    let json = serde_json::to_value(&config).unwrap();
    assert_eq!(json["strategy"], "10s3");
    assert_eq!(json["evidence"], "big");
    assert_eq!(json["task"], "fact_verification");
    assert_eq!(json["history"], "full");
    assert_eq!(json["ablations"]["no_fallback"], true);
    let back: AgentConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, config);

    let partial: AgentConfig = serde_json::from_str(r#"{"strategy": "r5"}"#).unwrap();
    assert_eq!(partial.strategy, Strategy::Rerank { n: 5 });
    assert_eq!(partial.max_steps, 5);
    assert_eq!(partial.fallback_tables, 1);
    assert_eq!(partial.ablations, Ablations::default());
    assert!(serde_json::from_str::<AgentConfig>(r#"{"strategy": "5s9"}"#).is_err());
}

#[test]
fn invalid_configs_are_rejected_before_any_call() {
    assert!(AgentConfig::builder().max_steps(1).build().is_err());
    assert!(AgentConfig::builder().fallback_tables(0).build().is_err());
    assert!(AgentConfig::builder().max_new_tokens(0).build().is_err());
    assert!(AgentConfig::builder()
        .no_select(true)
        .no_regenerate(true)
        .build()
        .is_err());
    assert!(AgentConfig::builder()
        .no_select(true)
        .no_regenerate(true)
        .no_refine(true)
        .build()
        .is_ok());
    let config: AgentConfig = serde_json::from_str(r#"{"max_steps": 1}"#).unwrap();
    assert!(matches!(
        Agent::new(config),
        Err(AgentError::InvalidConfig(_))
    ));
}

#[test]
fn names_parse_as_cli_arguments() {
    use clap::Parser;
    #[derive(Parser)]
    struct Args {
        #[arg(long, default_value = "5s1")]
        strategy: Strategy,
        #[arg(long, default_value = "small")]
        evidence: Evidence,
        #[arg(long, default_value = "none")]
        history: History,
        #[arg(long, default_value = "tableqa")]
        task: TaskType,
    }
    let args = Args::try_parse_from([
        "x",
        "--strategy",
        "r10",
        "--evidence",
        "big",
        "--history",
        "full",
        "--task",
        "fact_verification",
    ])
    .unwrap();
    assert_eq!(args.strategy, Strategy::Rerank { n: 10 });
    assert_eq!(args.evidence, Evidence::Big);
    assert_eq!(args.history, History::Full);
    assert_eq!(args.task, TaskType::FactVerification);
    let defaults = Args::try_parse_from(["x"]).unwrap();
    assert_eq!(defaults.strategy, Strategy::Select { n: 5, m: 1 });
    let err = Args::try_parse_from(["x", "--strategy", "5s9"])
        .err()
        .unwrap();
    assert!(err.to_string().contains("1 <= m <= n"), "{err}");
}

#[test]
fn fallback_after_a_rerank_follows_the_models_order() {
    let order = r#"{"action": "rerank", "order": ["T2", "T0"]}"#;
    let config = AgentConfig::builder()
        .strategy(Strategy::Rerank { n: 3 })
        .max_steps(10)
        .build()
        .unwrap();
    let (t, _) = run(
        config,
        QUERY,
        &[
            PATTERNS_FR,
            order,
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "Answer: 2148000",
        ],
    );
    // Reranked head T2, T0, then the unlisted T1, then the rest of the grep ranking.
    let seen: Vec<&str> = t.tables_seen.iter().map(|s| s.table_id.as_str()).collect();
    assert_eq!(seen, [IDS[5], IDS[0], IDS[1], IDS[2], IDS[3]]);
    assert_eq!(t.answer, "2148000");
    // The round keeps what was shown, in grep order.
    assert_eq!(t.rounds[0].candidates[0].table_id, IDS[0]);
}

/// Scores the river table's preview highest and the 2010 table's next; every other -50.
fn river_then_2010(prompt: &str, _continuation: &str) -> f64 {
    if prompt.contains("Seine") {
        0.0
    } else if prompt.contains("2240000") {
        -10.0
    } else {
        -50.0
    }
}

#[test]
fn likelihood_refine_reorders_the_shown_head_by_score_blended_with_the_ranking() {
    let config = AgentConfig::builder()
        .strategy(Strategy::Likelihood { n: 6 })
        .max_steps(10)
        .build()
        .unwrap();
    let space = corpus();
    let outputs = [
        PATTERNS_FR,
        "Answer: INSUFFICIENT",
        "Answer: INSUFFICIENT",
        "Answer: INSUFFICIENT",
        "Answer: 777",
    ];
    let mut llm = ScriptedLlm::new(outputs).with_scorer(river_then_2010);
    let t = Agent::new(config)
        .unwrap()
        .run(&mut llm, &space, QUERY)
        .unwrap();
    // Ranking 0, 1, 5 (share 1), 2, 3, 4 (share 0.5), scaled to 1,1,1,0,0,0; likelihoods
    // scaled to 0, 0.8, 0, 0, 0, 1. Blended: 1, 1.8, 1, 0, 0, 1: T1 first, then the ties of
    // 1 in ranking order (T0, T2 = table 5, T5 = table 4).
    assert_eq!(t.calls[1].kind, StepKind::RefineScore);
    match &t.calls[1].action {
        Action::Rerank { shown_ids, .. } => {
            assert_eq!(shown_ids, &["T1", "T0", "T2", "T5", "T3", "T4"])
        }
        other => panic!("unexpected {other:?}"),
    }
    let seen: Vec<&str> = t.tables_seen.iter().map(|s| s.table_id.as_str()).collect();
    assert_eq!(seen, [IDS[1], IDS[0], IDS[5], IDS[4]]);
    assert_eq!(t.answer, "777");
    // One scoring step, no chat request for it; every shown preview scored against the query.
    assert_eq!(llm.requests().len(), t.calls.len() - 1);
    assert_eq!(llm.scored().len(), 6);
    for (prompt, continuation) in llm.scored() {
        assert!(prompt.starts_with("<|im_start|>user\nHere is a table.\n\n"));
        assert!(prompt.ends_with("A question this table answers:"));
        assert_eq!(continuation, &format!(" {QUERY}"));
        for id in IDS {
            assert!(!prompt.contains(id.rsplit('/').next().unwrap()));
        }
    }
    assert!(t.calls[1].output.contains("\"log_likelihood\""));
    // The round keeps the ranking's order.
    assert_eq!(t.rounds[0].candidates[0].table_id, IDS[0]);
}

#[test]
fn likelihood_refine_needs_a_backend_that_scores() {
    let config = AgentConfig::builder()
        .strategy(Strategy::Likelihood { n: 5 })
        .build()
        .unwrap();
    let mut llm = ScriptedLlm::new([PATTERNS_FR]);
    let error = Agent::new(config)
        .unwrap()
        .run(&mut llm, &corpus(), QUERY)
        .unwrap_err();
    assert!(error.to_string().contains("scores text"), "{error}");
}
