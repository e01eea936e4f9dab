//! The TableSeek loop's control flow against a scripted backend: select, regenerate, budget,
//! fallback, refine-none, unusable outputs, history, prefix sharing, trajectories.

use crate::agent_support::*;
use tableseek::agent::testing::{render_chat, MemorySpace, ScriptedLlm};
use tableseek::agent::{
    Action, Agent, AgentConfig, AgentError, History, NoneReason, Role, StepKind, Strategy,
    TaskType, Verdict,
};

const QUERY: &str = "What was the population of Paris, France in 2020?";

fn config() -> AgentConfig {
    AgentConfig::builder().build().unwrap()
}

#[test]
fn select_path_answers_from_the_selected_table() {
    let (t, llm) = run(
        config(),
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "It is listed.\nAnswer: 2148000",
        ],
    );
    assert_eq!(
        kinds(&t),
        [StepKind::PatternGen, StepKind::RefineSelect, StepKind::Qa]
    );
    assert_eq!(t.answer, "2148000");
    assert_eq!(t.verdict, Some(Verdict::Answered));
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
    assert_eq!(t.tables_seen.len(), 1);
    assert_eq!(t.tables_seen[0].call, 2);
    // The refine prompt showed the five best candidates; QA read the selected table whole.
    assert_eq!(shown_sections(&llm.requests()[1]), 5);
    let qa = user_text(&llm.requests()[2]);
    assert!(qa.contains("Madrid,Spain,3223000"));
    assert!(!qa.contains("population_2010"));
    assert_eq!(
        t.calls[1].action,
        Action::Select {
            shown_ids: vec!["T0".into()],
            table_ids: vec![IDS[0].into()]
        }
    );
    assert_eq!(t.rounds.len(), 1);
    let shown: Vec<&str> = t.rounds[0]
        .candidates
        .iter()
        .map(|c| c.table_id.as_str())
        .collect();
    assert_eq!(shown, [IDS[0], IDS[1], IDS[5], IDS[2], IDS[3]]);
}

#[test]
fn regenerate_reranks_and_starts_a_new_round() {
    let (t, llm) = run(
        config(),
        "How long is the Seine?",
        &[
            r#"["France"]"#,
            &regenerate(&["Seine", "length_km"]),
            &select(&["T0"]),
            "Answer: 777 km",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineRegenerate,
            StepKind::RefineSelect,
            StepKind::Qa
        ]
    );
    assert_eq!(t.rounds.len(), 2);
    assert_eq!(t.rounds[1].patterns, ["Seine", "length_km"]);
    assert_eq!(t.rounds[1].candidates[0].table_id, IDS[4]);
    assert_eq!(t.rounds[1].candidates[0].shown_id, "T0");
    assert_eq!(t.rounds[1].candidates[0].score, 1.0);
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
    assert_eq!(t.answer, "777 km");
    // The second refine call shows the new patterns and only the table they match.
    let second = user_text(&llm.requests()[2]);
    assert!(second.contains(r#"Patterns: ["Seine","length_km"]"#));
    assert_eq!(shown_sections(&llm.requests()[2]), 1);
}

#[test]
fn budget_spent_in_refinement_sends_the_current_top1_to_qa() {
    let config = AgentConfig::builder()
        .max_steps(3)
        .fallback_tables(3)
        .build()
        .unwrap();
    let (t, llm) = run(
        config,
        "How long is the Rhine?",
        &[
            PATTERNS_FR,
            &regenerate(&["Rhine"]),
            "Answer: 1233",
            "unused",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineRegenerate,
            StepKind::Qa
        ]
    );
    // Top-1 of the regenerated ranking, not the top K_fb = 3 tables.
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
    assert_eq!(t.tables_seen.len(), 1);
    assert_eq!(shown_sections(&llm.requests()[2]), 1);
    assert_eq!(llm.remaining(), 1);
}

#[test]
fn two_steps_leave_no_refine_round() {
    let config = AgentConfig::builder().max_steps(2).build().unwrap();
    let (t, _) = run(
        config,
        QUERY,
        &[PATTERNS_FR, "Answer: INSUFFICIENT", "unused"],
    );
    assert_eq!(kinds(&t), [StepKind::PatternGen, StepKind::Qa]);
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
}

#[test]
fn fallback_walks_the_ranking_and_stops_on_a_satisfactory_answer() {
    let config = AgentConfig::builder().max_steps(10).build().unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T1"]),
            "Answer: INSUFFICIENT",
            "The table does not contain this information.",
            "Answer: 2148000",
            "unused",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineSelect,
            StepKind::Qa,
            StepKind::QaFallback,
            StepKind::QaFallback
        ]
    );
    // Selected T1 (ranked second) first, then rank order skipping what QA already saw.
    let seen: Vec<&str> = t.tables_seen.iter().map(|s| s.table_id.as_str()).collect();
    assert_eq!(seen, [IDS[1], IDS[0], IDS[5]]);
    let verdicts: Vec<Verdict> = t.tables_seen.iter().map(|s| s.verdict).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Insufficient,
            Verdict::Insufficient,
            Verdict::Answered
        ]
    );
    assert_eq!(t.answer, "2148000");
    assert_eq!(t.final_table.as_deref(), Some(IDS[5]));
    assert_eq!(llm.remaining(), 1);
    assert!(t.saw_table(IDS[1]) && !t.saw_table(IDS[2]));
}

#[test]
fn fallback_stops_when_the_budget_is_spent() {
    let (t, llm) = run(
        config(),
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "unused",
        ],
    );
    assert_eq!(t.steps, 5);
    assert_eq!(
        kinds(&t)[2..],
        [StepKind::Qa, StepKind::QaFallback, StepKind::QaFallback]
    );
    assert_eq!(llm.remaining(), 1);
    assert_eq!(t.verdict, Some(Verdict::Insufficient));
    assert_eq!(t.final_table.as_deref(), Some(IDS[5]));
}

#[test]
fn fallback_stops_when_the_ranking_is_exhausted() {
    let config = AgentConfig::builder().max_steps(10).build().unwrap();
    let (t, llm) = run(
        config,
        "How long is the Tiber?",
        &[
            r#"["Tiber", "Rome"]"#,
            &select(&["T0"]),
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "Answer: INSUFFICIENT",
            "unused",
        ],
    );
    // Only three tables mention Tiber or Rome.
    assert_eq!(t.tables_seen.len(), 3);
    assert_eq!(t.steps, 5);
    assert_eq!(llm.remaining(), 1);
}

#[test]
fn refine_none_sends_the_top_fallback_tables_to_qa() {
    let config = AgentConfig::builder().fallback_tables(2).build().unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[PATTERNS_FR, r#"{"action": "none"}"#, "Answer: 2148000"],
    );
    assert_eq!(
        kinds(&t),
        [StepKind::PatternGen, StepKind::RefineNone, StepKind::Qa]
    );
    assert_eq!(
        t.calls[1].action,
        Action::NoAction {
            reason: NoneReason::Declined
        }
    );
    assert!(t.calls[1].parsed);
    let seen: Vec<&str> = t.tables_seen.iter().map(|s| s.table_id.as_str()).collect();
    assert_eq!(seen, [IDS[0], IDS[1]]);
    assert_eq!(shown_sections(&llm.requests()[2]), 2);
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
}

#[test]
fn unparseable_refine_output_is_recorded_and_counts_as_refine_none() {
    let garbage = "I think the first table looks right, but I am not sure.";
    let (t, _) = run(config(), QUERY, &[PATTERNS_FR, garbage, "Answer: 2148000"]);
    assert_eq!(t.calls[1].kind, StepKind::RefineNone);
    assert!(!t.calls[1].parsed);
    assert_eq!(t.calls[1].output, garbage);
    assert_eq!(
        t.calls[1].action,
        Action::NoAction {
            reason: NoneReason::Unparseable
        }
    );
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
}

#[test]
fn invented_ids_are_ignored() {
    let (t, _) = run(
        config(),
        QUERY,
        &[PATTERNS_FR, &select(&["T7", "Table_12", "X"]), "Answer: 1"],
    );
    assert_eq!(t.calls[1].kind, StepKind::RefineNone);
    assert_eq!(
        t.calls[1].action,
        Action::NoAction {
            reason: NoneReason::InvalidIds
        }
    );
    // A valid id among invented ones is kept.
    let (t, _) = run(
        config(),
        QUERY,
        &[
            PATTERNS_FR,
            r#"{"action": "select", "tables": ["T9", "Table_2"]}"#,
            "Answer: 1",
        ],
    );
    assert_eq!(t.calls[1].kind, StepKind::RefineSelect);
    assert_eq!(t.final_table.as_deref(), Some(IDS[5]));
}

#[test]
fn ids_beyond_the_shown_candidates_are_invented_even_if_the_ranking_is_longer() {
    let config = AgentConfig::builder()
        .strategy("5s1".parse().unwrap())
        .build()
        .unwrap();
    // Six tables rank, five are shown: T5 was never shown.
    let (t, _) = run(config, QUERY, &[PATTERNS_FR, &select(&["T5"]), "Answer: 1"]);
    assert_eq!(t.calls[1].kind, StepKind::RefineNone);
}

#[test]
fn unusable_pattern_output_falls_back_to_query_words() {
    let (t, llm) = run(
        config(),
        "Which river is longer, the Rhine or the Seine?",
        &[
            "<think>hmm</think>Sorry, I cannot help.",
            &select(&["T0"]),
            "Answer: Rhine",
        ],
    );
    assert!(!t.calls[0].parsed);
    match &t.calls[0].action {
        Action::Patterns {
            patterns,
            from_query,
        } => {
            assert!(*from_query);
            assert_eq!(patterns, &["river", "longer", "rhine", "seine"]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
    assert_eq!(shown_sections(&llm.requests()[1]), 1);
}

#[test]
fn thinking_blocks_are_ignored_when_parsing() {
    let (t, _) = run(
        config(),
        QUERY,
        &[
            r#"<think>maybe ["Berlin"]?</think>["France", "Paris"]"#,
            r#"<think>T2 has {"action": "select", "tables": ["T2"]}</think>{"action": "select", "tables": ["T0"]}"#,
            "<think>Answer: 3</think>Answer: 2148000",
        ],
    );
    assert_eq!(t.rounds[0].patterns, ["France", "Paris"]);
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
    assert_eq!(t.answer, "2148000");
}

#[test]
fn nothing_ranked_falls_back_to_the_query_words_for_qa() {
    let config = AgentConfig::builder()
        .no_refine(true)
        .widen_empty(false)
        .build()
        .unwrap();
    let (t, _) = run(
        config,
        QUERY,
        &[r#"["zzz_no_such_value"]"#, "Answer: 2148000"],
    );
    assert_eq!(kinds(&t), [StepKind::PatternGen, StepKind::Qa]);
    assert_eq!(t.rounds.len(), 2);
    assert!(t.rounds[0].candidates.is_empty());
    assert_eq!(
        t.rounds[1].patterns,
        ["population", "paris", "france", "2020"]
    );
    assert_eq!(
        t.final_table.as_deref(),
        Some(t.rounds[1].candidates[0].table_id.as_str())
    );
    assert_eq!(t.answer, "2148000");
}

#[test]
fn nothing_ranked_even_by_the_query_words_means_no_qa() {
    let config = AgentConfig::builder().no_refine(true).build().unwrap();
    let (t, _) = run(
        config,
        "Zyzzyva quokka?",
        &[r#"["zzz_no_such_value"]"#, "unused"],
    );
    assert_eq!(kinds(&t), [StepKind::PatternGen]);
    assert_eq!(t.verdict, None);
    assert_eq!(t.final_table, None);
    assert!(t.tables_seen.is_empty());
}

#[test]
fn patterns_that_match_nothing_are_widened_with_the_query_words() {
    let (t, llm) = run(
        config(),
        "How long is the Seine?",
        &[r#"["zzz"]"#, &select(&["T0"]), "Answer: 777"],
    );
    assert_eq!(t.rounds.len(), 1);
    assert!(t.rounds[0].widened);
    assert_eq!(t.rounds[0].patterns, ["zzz", "long", "seine"]);
    assert_eq!(t.rounds[0].candidates[0].table_id, IDS[4]);
    // Refine saw the candidates the query's words found, under the widened patterns.
    let refine = user_text(&llm.requests()[1]);
    assert!(!refine.contains("no table matched"), "{refine}");
    assert!(refine.contains("Seine,777,France"), "{refine}");
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
    // A round that matched keeps the model's patterns as they were.
    let (t, _) = run(
        config(),
        QUERY,
        &[PATTERNS_FR, &select(&["T0"]), "Answer: 1"],
    );
    assert!(!t.rounds[0].widened);
    assert_eq!(t.rounds[0].patterns, ["France", "Paris"]);
}

#[test]
fn refine_can_recover_from_an_empty_ranking() {
    let (t, llm) = run(
        AgentConfig::builder().widen_empty(false).build().unwrap(),
        "How long is the Seine?",
        &[
            r#"["zzz"]"#,
            &regenerate(&["Seine"]),
            &select(&["T0"]),
            "Answer: 777",
        ],
    );
    assert!(user_text(&llm.requests()[1]).contains("no table matched"));
    assert_eq!(t.final_table.as_deref(), Some(IDS[4]));
}

#[test]
fn history_full_continues_one_conversation() {
    let outputs = [
        r#"["France"]"#,
        &regenerate(&["Seine"]),
        &select(&["T0"]),
        "Answer: 777",
    ];
    let full = AgentConfig::builder()
        .history(History::Full)
        .build()
        .unwrap();
    let (t_full, llm_full) = run(full, "How long is the Seine?", &outputs);
    let (t_none, llm_none) = run(config(), "How long is the Seine?", &outputs);
    assert_eq!(t_full.final_table, t_none.final_table);

    let first = &llm_full.requests()[1].messages;
    let second = &llm_full.requests()[2].messages;
    assert_eq!(second.len(), first.len() + 2);
    assert_eq!(&second[..first.len()], &first[..]);
    assert_eq!(second[first.len()].role, Role::Assistant);
    assert_eq!(second[first.len()].content, outputs[1]);
    assert!(second
        .last()
        .unwrap()
        .content
        .contains("New search results"));
    // Without history the second refine call is a fresh two-message conversation.
    assert_eq!(llm_none.requests()[2].messages.len(), 2);
    // The whole first round is reused from the cache with history, only a prefix without.
    assert!(t_full.calls[2].cached_tokens > t_none.calls[2].cached_tokens);
    assert!(t_none.calls[2].cached_tokens > 0);
}

#[test]
fn successive_calls_share_the_system_and_query_prefix() {
    let (t, llm) = run(
        config(),
        QUERY,
        &[PATTERNS_FR, &select(&["T0"]), "Answer: 2148000"],
    );
    let requests = llm.requests();
    for pair in requests.windows(2) {
        assert_eq!(pair[0].messages[0], pair[1].messages[0]);
        assert_eq!(pair[0].messages[0].role, Role::System);
        let (a, b) = (user_text(&pair[0]), user_text(&pair[1]));
        let query_line = format!("Question: {QUERY}\n\n");
        assert!(a.starts_with(&query_line) && b.starts_with(&query_line));
    }
    assert_eq!(t.calls[0].cached_tokens, 0);
    assert!(t.calls[1].cached_tokens > 0 && t.calls[2].cached_tokens > 0);
    assert_eq!(
        t.totals.cached_tokens,
        t.calls.iter().map(|c| c.cached_tokens).sum::<usize>()
    );
    assert_eq!(
        t.totals.prompt_tokens,
        t.calls.iter().map(|c| c.prompt_tokens).sum::<usize>()
    );
}

#[test]
fn trajectories_are_deterministic_once_timings_are_zeroed() {
    let outputs = [
        PATTERNS_FR,
        "{'action': 'select', 'tables': ['T1',],}",
        "Answer: x",
    ];
    let space = corpus();
    let agent = Agent::new(config()).unwrap();
    let mut a = agent
        .run(
            &mut ScriptedLlm::new(outputs).with_latency(12.5),
            &space,
            QUERY,
        )
        .unwrap();
    let mut b = agent
        .run(
            &mut ScriptedLlm::new(outputs).with_latency(40.0),
            &space,
            QUERY,
        )
        .unwrap();
    assert_eq!(a.totals.ms, 37.5);
    assert_ne!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    a.zero_timings();
    b.zero_timings();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn trajectory_json_has_the_agreed_keys() {
    let (t, _) = run(
        config(),
        QUERY,
        &[PATTERNS_FR, &select(&["T0"]), "Answer: 2148000"],
    );
    let json = serde_json::to_value(&t).unwrap();
    for key in [
        "query",
        "task",
        "answer",
        "final_table",
        "tables_seen",
        "steps",
        "calls",
        "rounds",
        "totals",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["task"], "tableqa");
    let call = &json["calls"][1];
    for key in [
        "kind",
        "prompt_tokens",
        "cached_tokens",
        "ms",
        "output",
        "parsed",
        "constrained",
        "action",
    ] {
        assert!(call.get(key).is_some(), "missing calls[].{key}");
    }
    assert_eq!(call["kind"], "refine-select");
    assert_eq!(json["calls"][0]["kind"], "pattern-gen");
    assert_eq!(json["calls"][2]["kind"], "qa");
    let candidate = &json["rounds"][0]["candidates"][0];
    assert_eq!(candidate["shown_id"], "T0");
    assert_eq!(candidate["table_id"], IDS[0]);
    assert_eq!(candidate["score"], 1.0);
    for key in ["steps", "prompt_tokens", "cached_tokens", "ms"] {
        assert!(json["totals"].get(key).is_some(), "missing totals.{key}");
    }
    let back: tableseek::agent::Trajectory = serde_json::from_value(json).unwrap();
    assert_eq!(back, t);
}

#[test]
fn every_request_carries_the_grammar_of_its_step() {
    use tableseek::agent::{schemas, Grammar, Strategy};
    let config = AgentConfig::builder()
        .strategy(Strategy::Select { n: 10, m: 3 })
        .build()
        .unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[PATTERNS_FR, &select(&["T0"]), "Answer: 2148000"],
    );
    let requests = llm.requests();
    assert_eq!(requests[0].constraint, Some(schemas::patterns()));
    // Six tables match, so the round shows T0..T5 (not the strategy's ten), at most three chosen.
    let Some(Grammar::JsonSchema(refine)) = &requests[1].constraint else {
        panic!("refine has no JSON schema: {:?}", requests[1].constraint);
    };
    let select = &refine["anyOf"][0]["properties"]["tables"];
    let ids: Vec<&str> = select["items"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ids, ["T0", "T1", "T2", "T3", "T4", "T5"]);
    assert_eq!(select["maxItems"], 3);
    assert_eq!(
        refine["anyOf"][1]["properties"]["action"]["const"],
        "regenerate"
    );
    // Tableqa QA is free text.
    assert_eq!(requests[2].constraint, None);
    // The scripted backend decodes nothing, so no call was constrained.
    assert!(t.calls.iter().all(|c| !c.constrained));
}

#[test]
fn a_backend_failure_returns_the_partial_trajectory() {
    let space = corpus();
    let mut llm = ScriptedLlm::new([PATTERNS_FR, &select(&["T0"])]);
    let err = Agent::new(config())
        .unwrap()
        .run(&mut llm, &space, QUERY)
        .unwrap_err();
    match err {
        AgentError::Aborted {
            call,
            reason,
            partial,
        } => {
            assert_eq!(call, 2);
            assert!(reason.contains("script exhausted"));
            assert_eq!(partial.calls.len(), 2);
            assert_eq!(partial.rounds.len(), 1);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn an_empty_query_is_rejected() {
    let space = MemorySpace::default();
    let mut llm = ScriptedLlm::new(["[]"]);
    let err = Agent::new(config())
        .unwrap()
        .run(&mut llm, &space, "  ")
        .unwrap_err();
    assert!(matches!(err, AgentError::EmptyQuery));
    assert!(llm.requests().is_empty());
}

#[test]
fn fact_verification_falls_back_on_cannot_verify_and_reports_refuted_at_the_end() {
    let config = AgentConfig::builder()
        .task(TaskType::FactVerification)
        .build()
        .unwrap();
    let claim = "Paris had more than two million inhabitants in 2020.";
    let (t, llm) = run(
        config.clone(),
        claim,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "Answer: CANNOT VERIFY",
            "The table is about something else. Answer: cannot be verified",
            "Verdict: not enough information",
        ],
    );
    assert!(user_text(&llm.requests()[0]).starts_with(&format!("Claim: {claim}")));
    assert!(prompt_text(&llm.requests()[2]).contains("CANNOT VERIFY"));
    assert_eq!(t.steps, 5);
    assert_eq!(t.verdict, Some(Verdict::Unverifiable));
    assert_eq!(t.answer, "refuted");

    let (t, _) = run(
        config,
        claim,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "Answer: CANNOT VERIFY",
            "**Answer:** Supported.",
        ],
    );
    assert_eq!(t.verdict, Some(Verdict::Supported));
    assert_eq!(t.answer, "supported");
    assert_eq!(t.tables_seen.len(), 2);
}

#[test]
fn the_system_message_is_shared_across_queries_and_holds_the_instructions() {
    let agent = Agent::new(config()).unwrap();
    let space = corpus();
    let mut llm = ScriptedLlm::new([
        PATTERNS_FR,
        &select(&["T0"]) as &str,
        "Answer: 1",
        r#"["Seine"]"#,
        &select(&["T0"]),
        "Answer: 777",
    ]);
    agent.run(&mut llm, &space, QUERY).unwrap();
    let second = agent
        .run(&mut llm, &space, "How long is the Seine?")
        .unwrap();
    for request in llm.requests() {
        assert_eq!(request.messages[0].content, agent.system_prompt());
    }
    // The next query's first call reuses the whole system message from the previous query.
    let system_tokens = agent.system_prompt().split_whitespace().count();
    assert!(second.calls[0].cached_tokens > system_tokens);
    // Fixed instructions live in the system message, not in the per-call text.
    let system = agent.system_prompt();
    assert!(system.contains("\"regenerate\"") && system.contains("INSUFFICIENT"));
    assert!(!user_text(&llm.requests()[1]).contains("\"regenerate\""));

    let no_refine = Agent::new(AgentConfig::builder().no_refine(true).build().unwrap()).unwrap();
    assert!(!no_refine.system_prompt().contains("inspect the candidates"));
}

#[test]
fn tables_are_cut_to_fit_the_context_window_and_say_so() {
    // Two tables of ~3,600 whitespace tokens each against a window of 1,500 (100 kept for the
    // reply), selected together.
    let big = |label: &str| {
        let rows: String = (0..400)
            .map(|i| format!("\n{label} {i} , France , {}", 1000 + i))
            .collect();
        format!("city , country , population{rows}")
    };
    let space = MemorySpace::new([("vault/a.csv", big("Paris")), ("vault/b.csv", big("Lyon"))]);
    let config = AgentConfig::builder()
        .strategy(Strategy::Select { n: 5, m: 3 })
        .max_new_tokens(100)
        .build()
        .unwrap();
    let agent = Agent::new(config).unwrap();
    let mut llm = ScriptedLlm::new([PATTERNS_FR, &select(&["T0", "T1"]), "Answer: 1000"])
        .with_context_window(1500);
    let t = agent
        .run(&mut llm, &space, QUERY)
        .expect("every prompt fits");
    assert_eq!(t.answer, "1000");
    let qa = render_chat(&llm.requests()[2].messages);
    let tokens = qa.split_whitespace().count();
    assert!(
        (1200..=1400).contains(&tokens),
        "QA prompt of {tokens} tokens"
    );
    // Both tables keep their header and a fair share of rows, and each says what it left out.
    assert_eq!(qa.matches("city , country , population").count(), 2, "{qa}");
    assert_eq!(qa.matches("more lines not shown]").count(), 2, "{qa}");
    let paris = qa.matches("Paris ").count();
    let lyon = qa.matches("Lyon ").count();
    assert!(
        paris > 10 && lyon > 10 && paris.abs_diff(lyon) <= 3,
        "{paris} vs {lyon}"
    );
    // Without a window nothing is cut.
    let mut unbounded = ScriptedLlm::new([PATTERNS_FR, &select(&["T0"]), "Answer: 1000"]);
    agent.run(&mut unbounded, &space, QUERY).unwrap();
    assert!(!user_text(&unbounded.requests()[2]).contains("not shown"));
}

#[test]
fn full_history_restarts_the_conversation_when_earlier_rounds_crowd_out_the_previews() {
    // Two tables whose previews take ~100 whitespace tokens each against a window of 1,000 (100
    // kept for the reply): a conversation holds a few rounds, not five.
    let wide = |label: &str| {
        let rows: String = (0..10)
            .map(|i| format!("\n{label} {i} , {}", "river bank stone ".repeat(12)))
            .collect();
        format!("name , notes{rows}")
    };
    let space = MemorySpace::new([("a.csv", wide("Seine")), ("b.csv", wide("Loire"))]);
    let config = AgentConfig::builder()
        .history(History::Full)
        .max_steps(10)
        .max_new_tokens(100)
        .build()
        .unwrap();
    let agent = Agent::new(config).unwrap();
    let regen = regenerate(&["river", "stone"]);
    let outputs = [
        r#"["river"]"#,
        &regen,
        &regen,
        &regen,
        &regen,
        &select(&["T0"]),
        "Answer: 777",
    ];
    let mut llm = ScriptedLlm::new(outputs).with_context_window(1000);
    let t = agent
        .run(&mut llm, &space, "How long is the Seine?")
        .expect("every round fits");
    assert_eq!(t.answer, "777");
    let refine_lens: Vec<usize> = llm.requests()[1..6]
        .iter()
        .map(|r| r.messages.len())
        .collect();
    // Rounds continue one conversation until the next would overflow, then start afresh.
    assert_eq!(refine_lens[0], 2);
    assert!(refine_lens.contains(&4), "{refine_lens:?}");
    assert!(
        refine_lens.windows(2).any(|w| w[0] > 2 && w[1] == 2),
        "no restart: {refine_lens:?}"
    );
    // Each refine call shows the newest round; a fresh two-message prompt after the first is a
    // restart, and the round says so.
    let restarted: Vec<bool> = t.rounds.iter().map(|r| r.history_restarted).collect();
    let expected: Vec<bool> = refine_lens
        .iter()
        .enumerate()
        .map(|(i, &len)| i > 0 && len == 2)
        .collect();
    assert_eq!(restarted, expected);
    for request in &llm.requests()[1..6] {
        let text = render_chat(&request.messages);
        assert!(text.split_whitespace().count() <= 900);
        // The previews were never cut to make the history fit.
        assert!(!text.contains("not shown"), "{text}");
    }
}

/// `--qa sql`: QA writes SQL over the selected table. A query that fails is retried once with
/// the error; a query that runs but finds nothing is insufficient evidence, so the loop falls back
/// to the next ranked table, where the answer is the query's result. Every call keeps its SQL.
#[test]
fn sql_qa_retries_on_an_error_and_falls_back_on_an_empty_result() {
    let config = AgentConfig::builder()
        .qa(tableseek::agent::QaMode::Sql)
        .max_steps(6)
        .build()
        .unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T1"]),
            "SELECT population FROM t WHERE city = 'Paris'",
            "SELECT population_2010 FROM t WHERE city = 'Lyon'",
            "```sql\nSELECT population_2020 FROM t WHERE city = 'Paris';\n```",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineSelect,
            StepKind::Qa,
            StepKind::Qa,
            StepKind::QaFallback
        ]
    );
    let sql: Vec<_> = t.calls[2..]
        .iter()
        .map(|c| c.sql.clone().unwrap())
        .collect();
    assert!(sql[0]
        .error
        .as_deref()
        .unwrap()
        .contains("no such column: population"));
    assert!(!t.calls[2].parsed);
    // The retry saw the error; its query ran but found no row.
    assert!(user_text(&llm.requests()[3]).contains("no such column: population"));
    assert_eq!(sql[1].error, None);
    assert!(sql[1].rows.is_empty());
    assert_eq!(t.tables_seen[0].verdict, Verdict::Insufficient);
    // The fallback read the next table and answered from the result.
    assert_eq!(sql[2].rows, vec![vec![Some("2148000".to_string())]]);
    assert_eq!(t.answer, "2148000");
    assert_eq!(t.verdict, Some(Verdict::Answered));
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));
    // SQL prompts show the relation, never the table's id.
    assert!(user_text(&llm.requests()[2]).contains("CREATE TABLE \"t\""));
}

/// Under `--qa sql` a claim is tested by a query that returns 1 when it holds: a failed query
/// gets its retry, a query that ran decides the claim (a true value supports it, 0 refutes it),
/// and no call phrases anything.
#[test]
fn sql_fact_verification_decides_a_claim_by_the_truth_of_its_query() {
    let config = AgentConfig::builder()
        .task(TaskType::FactVerification)
        .qa(tableseek::agent::QaMode::Sql)
        .sql_answer(tableseek::agent::SqlAnswer::Phrased)
        .max_steps(6)
        .build()
        .unwrap();
    let claim = "Paris had more than two million inhabitants in 2020.";
    let (t, llm) = run(
        config.clone(),
        claim,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "SELECT inhabitants > 2000000 FROM t WHERE city = 'Paris'",
            "SELECT population_2020 > 2000000 FROM t WHERE city = 'Paris'",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineSelect,
            StepKind::Qa,
            StepKind::Qa
        ]
    );
    let asked = user_text(&llm.requests()[2]);
    assert!(
        asked.contains("Is this claim true") && asked.contains(claim),
        "{asked}"
    );
    assert!(user_text(&llm.requests()[3]).contains("no such column: inhabitants"));
    assert_eq!(t.verdict, Some(Verdict::Supported));
    assert_eq!(t.answer, "supported");
    assert_eq!(t.final_table.as_deref(), Some(IDS[0]));

    let (t, _) = run(
        config,
        claim,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "SELECT COUNT(*) FROM t WHERE city = 'Paris' AND population_2020 > 3000000",
        ],
    );
    assert_eq!(t.verdict, Some(Verdict::Refuted));
    assert_eq!(t.answer, "refuted");
    assert_eq!(t.tables_seen.len(), 1);
}

#[test]
fn sql_qa_can_phrase_its_answer_in_one_more_call() {
    let config = AgentConfig::builder()
        .qa(tableseek::agent::QaMode::Sql)
        .sql_answer(tableseek::agent::SqlAnswer::Phrased)
        .max_steps(6)
        .build()
        .unwrap();
    let (t, llm) = run(
        config,
        QUERY,
        &[
            PATTERNS_FR,
            &select(&["T0"]),
            "SELECT population_2020 FROM t WHERE city = 'Paris'",
            "About 2148000 people.",
        ],
    );
    assert_eq!(
        kinds(&t),
        [
            StepKind::PatternGen,
            StepKind::RefineSelect,
            StepKind::Qa,
            StepKind::Qa
        ]
    );
    assert_eq!(t.answer, "About 2148000 people.");
    assert_eq!(t.verdict, Some(Verdict::Answered));
    // The phrasing call reads the question, the SQL and its rows.
    let prompt = user_text(&llm.requests()[3]);
    assert!(
        prompt.contains("SQL: SELECT population_2020") && prompt.contains("2148000\n"),
        "{prompt}"
    );
}
