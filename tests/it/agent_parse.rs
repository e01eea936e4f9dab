//! Reading model output: the tolerances small and reasoning models need, and the QA verdicts.

use proptest::prelude::*;
use tableseek::agent::parse::{
    fact_label, is_insufficient, parse_patterns, parse_qa, parse_refine, shown_id, strip_thinking,
    RefineDecision,
};
use tableseek::agent::prompts::{self, ShownTable};
use tableseek::agent::{NoneReason, QaVariant, TaskType, Verdict};

fn choose(text: &str, shown: usize, cap: usize) -> Option<Vec<usize>> {
    match parse_refine(text, shown, cap).decision {
        RefineDecision::Choose(ids) => Some(ids),
        _ => None,
    }
}

#[test]
fn refine_json_is_found_in_prose_and_code_fences() {
    let text = "Looking at the previews, T2 has the population column.\n```json\n{\"action\": \"select\", \"tables\": [\"T2\"]}\n```\nThat is my choice.";
    assert_eq!(choose(text, 5, 1), Some(vec![2]));
}

#[test]
fn trailing_commas_and_single_quotes_are_repaired() {
    assert_eq!(
        choose("{'action': 'select', 'tables': ['T1', 'T3',],}", 5, 3),
        Some(vec![1, 3])
    );
    assert_eq!(
        parse_patterns("['O\\'Brien', \"it's\", 'a \"quoted\" cell',]"),
        Some(vec![
            "O'Brien".to_string(),
            "it's".to_string(),
            "a \"quoted\" cell".to_string()
        ])
    );
}

#[test]
fn ids_in_every_spelling() {
    for (raw, id) in [
        ("\"T3\"", 3),
        ("\"t3\"", 3),
        ("\"Table_3\"", 3),
        ("\"table 3\"", 3),
        ("\"Table3\"", 3),
        ("\"#3\"", 3),
        ("\"3\"", 3),
        ("3", 3),
        ("\" T03 \"", 3),
    ] {
        let value: serde_json::Value = serde_json::from_str(raw).unwrap();
        assert_eq!(shown_id(&value), Some(id), "{raw}");
    }
    for raw in ["\"T\"", "\"X3\"", "\"T3b\"", "-1", "3.5", "null", "\"\""] {
        let value: serde_json::Value = serde_json::from_str(raw).unwrap();
        assert_eq!(shown_id(&value), None, "{raw}");
    }
}

#[test]
fn invented_ids_are_dropped_and_selections_capped() {
    assert_eq!(
        choose(
            r#"{"action": "select", "tables": ["T7", "T1", "T1", 0, "T4"]}"#,
            5,
            2
        ),
        Some(vec![1, 0])
    );
    assert_eq!(
        parse_refine(r#"{"action": "select", "tables": ["T5", "foo"]}"#, 5, 1).decision,
        RefineDecision::None(NoneReason::InvalidIds)
    );
    // An object wrapped in a list.
    assert_eq!(
        choose(r#"[{"action": "select", "tables": ["T3"]}]"#, 5, 1),
        Some(vec![3])
    );
    // A single id instead of a list.
    assert_eq!(
        choose(r#"{"action": "select", "tables": "T4"}"#, 5, 1),
        Some(vec![4])
    );
}

#[test]
fn shapes_without_an_action_key() {
    assert_eq!(choose(r#"{"select": ["Table_1"]}"#, 5, 1), Some(vec![1]));
    assert_eq!(
        choose(r#"{"rerank": ["T1", "T0"]}"#, 3, 3),
        Some(vec![1, 0])
    );
    assert_eq!(
        parse_refine(r#"{"patterns": ["a", "b"]}"#, 5, 1).decision,
        RefineDecision::Regenerate(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        parse_refine(r#"{"action": "Regenerate", "patterns": []}"#, 5, 1).decision,
        RefineDecision::None(NoneReason::EmptyPatterns)
    );
    assert_eq!(
        parse_refine(r#"{"action": "none"}"#, 5, 1).decision,
        RefineDecision::None(NoneReason::Declined)
    );
    assert_eq!(
        parse_refine(r#"{"action": ""}"#, 5, 1).decision,
        RefineDecision::None(NoneReason::Declined)
    );
}

#[test]
fn unparseable_output_is_reported_as_such() {
    for text in [
        "",
        "select T1",
        "{not json at all",
        "[\"T1\"]",
        "{\"reason\": \"hmm\"}",
    ] {
        let parsed = parse_refine(text, 5, 1);
        assert!(!parsed.parsed, "{text:?}");
        assert_eq!(
            parsed.decision,
            RefineDecision::None(NoneReason::Unparseable)
        );
    }
}

#[test]
fn the_last_json_object_wins_over_an_echoed_example() {
    let text = r#"The format is {"action": "select", "tables": ["T1"]}. My answer: {"action": "select", "tables": ["T3"]}"#;
    assert_eq!(choose(text, 5, 1), Some(vec![3]));
}

#[test]
fn thinking_is_stripped_in_all_its_forms() {
    assert_eq!(strip_thinking("<think>a</think>\nb"), "b");
    assert_eq!(strip_thinking("x<think>a</think>y<think>c</think>z"), "xyz");
    assert_eq!(strip_thinking("reasoning only</think>answer"), "answer");
    assert_eq!(strip_thinking("answer<think>never closed"), "answer");
    assert_eq!(
        choose(
            r#"<think>{"action": "select", "tables": ["T0"]}</think>{"select": ["T2"]}"#,
            5,
            1
        ),
        Some(vec![2])
    );
}

#[test]
fn patterns_are_cleaned_and_deduplicated() {
    assert_eq!(
        parse_patterns(
            "Here you go:\n```\n[\"Paris\", \" paris \", \"Paris\", \"\", 2020, null]\n```"
        ),
        Some(vec!["Paris".into(), "paris".into(), "2020".into()])
    );
    assert_eq!(
        parse_patterns(r#"{"patterns": ["a"]}"#),
        Some(vec!["a".into()])
    );
    assert_eq!(parse_patterns("[]"), None);
    assert_eq!(parse_patterns("no json"), None);
    let many: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
    let text = serde_json::to_string(&many).unwrap();
    assert_eq!(parse_patterns(&text).unwrap().len(), 64);
}

#[test]
fn qa_answers_and_insufficiency() {
    let qa = |t: &str| parse_qa(t, TaskType::Tableqa, QaVariant::TableSeek);
    let got = qa("The row for Paris shows it.\nAnswer: 2,148,000.");
    assert_eq!(
        (got.answer.as_str(), got.verdict, got.parsed),
        ("2,148,000", Verdict::Answered, true)
    );
    assert_eq!(qa("**Answer:** \"Berlin\"").answer, "Berlin");
    assert_eq!(qa(r#"{"answer": ["Paris", "Rome"]}"#).answer, "Paris, Rome");
    assert_eq!(qa("Final answer: 42").answer, "42");
    assert_eq!(qa("Looking at row 3, the answer is: Rome").answer, "Rome");
    assert_eq!(
        qa("Answer:\n\n  Madrid\nExplanation: row 3").answer,
        "Madrid"
    );
    assert_eq!(
        qa("Answer: 1\nNote: the answer could differ\nAnswer: 2").answer,
        "2"
    );
    assert_eq!(
        qa("Explanation: Berlin is bigger.\nAnswer: Berlin").answer,
        "Berlin"
    );
    let bare = qa("Just 42");
    assert_eq!((bare.answer.as_str(), bare.parsed), ("Just 42", false));
    for insufficient in [
        "Answer: INSUFFICIENT",
        "Answer: insufficient evidence.",
        "The table does not contain the population of Paris.",
        "Answer: Not enough information to answer.",
        "Answer: The question cannot be answered from these tables",
        "Answer:",
        "",
        "<think>long</think>",
    ] {
        assert_eq!(
            qa(insufficient).verdict,
            Verdict::Insufficient,
            "{insufficient:?}"
        );
    }
    // Long answers that happen to contain a loose phrase are still answers.
    let long =
        "Answer: The club that does not contain any foreign players in its squad, which over \
                the seasons covered by this table remained the only one, listed in the third row \
                with its home ground and coach, is Athletic Bilbao of Spain";
    assert_eq!(qa(long).verdict, Verdict::Answered);
    // The baseline variant has no insufficiency option.
    let baseline = parse_qa(
        "Answer: INSUFFICIENT",
        TaskType::Tableqa,
        QaVariant::Baseline,
    );
    assert_eq!(baseline.verdict, Verdict::Answered);
}

#[test]
fn fact_labels_are_normalized() {
    for (text, label) in [
        ("supported", Verdict::Supported),
        ("SUPPORTED", Verdict::Supported),
        ("The claim is true", Verdict::Supported),
        ("entailed", Verdict::Supported),
        ("Yes, it is", Verdict::Supported),
        ("refuted", Verdict::Refuted),
        ("REFUTES", Verdict::Refuted),
        ("false", Verdict::Refuted),
        ("not supported", Verdict::Refuted),
        ("unsupported", Verdict::Refuted),
        ("incorrect", Verdict::Refuted),
        ("No.", Verdict::Refuted),
        ("CANNOT VERIFY", Verdict::Unverifiable),
        ("cannot_verify", Verdict::Unverifiable),
        ("cannot be verified from this table", Verdict::Unverifiable),
        ("Not enough info", Verdict::Unverifiable),
    ] {
        assert_eq!(fact_label(text), Some(label), "{text:?}");
    }
    assert_eq!(fact_label("supported, no doubt"), Some(Verdict::Supported));
    assert_eq!(fact_label("maybe"), None);

    let fact = |t: &str, v| parse_qa(t, TaskType::FactVerification, v);
    let seek = fact("Answer: CANNOT VERIFY", QaVariant::TableSeek);
    assert_eq!(
        (seek.verdict, seek.answer.as_str()),
        (Verdict::Unverifiable, "cannot_verify")
    );
    let base = fact("Answer: CANNOT VERIFY", QaVariant::Baseline);
    assert_eq!(
        (base.verdict, base.answer.as_str()),
        (Verdict::Refuted, "refuted")
    );
    assert_eq!(
        fact("gibberish", QaVariant::TableSeek).verdict,
        Verdict::Unverifiable
    );
    assert_eq!(
        fact("gibberish", QaVariant::Baseline).verdict,
        Verdict::Refuted
    );
    assert_eq!(
        fact("{\"label\": \"Supported\"}", QaVariant::TableSeek).answer,
        "supported"
    );
}

#[test]
fn is_insufficient_is_not_fooled_by_ordinary_answers() {
    for answer in [
        "Paris",
        "2148000",
        "no",
        "None of the above players",
        "Not applicable",
    ] {
        assert!(!is_insufficient(answer), "{answer:?}");
    }
}

#[test]
fn baseline_qa_prompts_offer_no_way_out() {
    let tables = [ShownTable {
        id: "T0".into(),
        text: "a,b\n1,2".into(),
        score: None,
    }];
    let render = |m: Vec<tableseek::agent::ChatMessage>| {
        m.iter()
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let seek = |task| {
        prompts::Prompts::new(&prompts::PromptOptions {
            task,
            strategy: Default::default(),
            refine: true,
            allow_select: true,
            allow_regenerate: true,
        })
    };
    let seek_qa = render(seek(TaskType::Tableqa).qa("q?", &tables));
    let base_qa = render(prompts::baseline_qa(TaskType::Tableqa, "q?", &tables));
    assert!(seek_qa.contains("INSUFFICIENT"));
    assert!(!base_qa.contains("INSUFFICIENT"));
    let seek_fv = render(seek(TaskType::FactVerification).qa("c", &tables));
    let base_fv = render(prompts::baseline_qa(
        TaskType::FactVerification,
        "c",
        &tables,
    ));
    assert!(seek_fv.contains("CANNOT VERIFY"));
    assert!(!base_fv.contains("CANNOT VERIFY"));
    assert!(base_fv.contains("counts as refuted"));
    // Same prefix layout as the agent's prompts: system, then the task prefix.
    let base = prompts::baseline_qa(TaskType::FactVerification, "c", &tables);
    assert_eq!(
        base[0].content,
        prompts::baseline_system(TaskType::FactVerification)
    );
    assert!(base[1].content.starts_with("Claim: c\n\n"));
}

proptest! {
    #[test]
    fn refine_parsing_never_panics_and_respects_bounds(text in ".{0,200}", shown in 0usize..12, cap in 1usize..6) {
        let parsed = parse_refine(&text, shown, cap);
        if let RefineDecision::Choose(ids) = parsed.decision {
            prop_assert!(!ids.is_empty() && ids.len() <= cap);
            prop_assert!(ids.iter().all(|&id| id < shown));
        }
    }

    #[test]
    fn structured_selections_survive_noise(prefix in "[a-zA-Z .,\n]{0,40}", ids in proptest::collection::vec(0usize..20, 1..6)) {
        let names: Vec<String> = ids.iter().map(|i| format!("Table_{i}")).collect();
        let text = format!("{prefix}{{'action': 'select', 'tables': {:?},}}", names).replace('"', "'");
        let mut expected: Vec<usize> = Vec::new();
        for &id in &ids {
            if id < 10 && !expected.contains(&id) && expected.len() < 3 {
                expected.push(id);
            }
        }
        let got = choose(&text, 10, 3);
        if expected.is_empty() {
            prop_assert_eq!(got, None);
        } else {
            prop_assert_eq!(got, Some(expected));
        }
    }

    #[test]
    fn qa_parsing_never_panics(text in "\\PC{0,300}") {
        let _ = parse_qa(&text, TaskType::Tableqa, QaVariant::TableSeek);
        let _ = parse_qa(&text, TaskType::FactVerification, QaVariant::Baseline);
        let _ = parse_patterns(&text);
    }
}

#[test]
fn baseline_qa_runs_one_call_without_the_insufficiency_option() {
    use tableseek::agent::testing::ScriptedLlm;
    let mut llm = ScriptedLlm::new(["Answer: CANNOT VERIFY"]);
    let (outcome, response) = tableseek::agent::baseline_qa(
        &mut llm,
        TaskType::FactVerification,
        "Paris is in Spain.",
        &["city,country\nParis,France".to_string()],
        64,
    )
    .unwrap();
    assert_eq!(outcome.verdict, Verdict::Refuted);
    assert_eq!(response.text, "Answer: CANNOT VERIFY");
    let request = &llm.requests()[0];
    assert_eq!(request.max_new_tokens, 64);
    assert!(request.messages[1]
        .content
        .contains("### T0\ncity,country\nParis,France"));
    assert!(!request.messages[1].content.contains("CANNOT VERIFY"));
}

#[test]
fn regex_escapes_written_without_json_escaping_survive() {
    let text = r#"Patterns: ["\d{5}", "zip\.code", "\bParis\b", "a\\sb", 'it\'s']"#;
    assert_eq!(
        parse_patterns(text),
        Some(vec![
            r"\d{5}".to_string(),
            r"zip\.code".to_string(),
            r"\bParis\b".to_string(),
            r"a\sb".to_string(),
            "it's".to_string(),
        ])
    );
    // Properly escaped JSON keeps its meaning, word boundaries included.
    assert_eq!(
        parse_patterns(r#"["\\bRome\\b", "\\d+"]"#),
        Some(vec![r"\bRome\b".to_string(), r"\d+".to_string()])
    );
}
