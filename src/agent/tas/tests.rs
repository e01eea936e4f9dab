//! TaS's control flow through a scripted LLM: the state table's transitions, the budget, the
//! stop reasons and what prompts may show.

use super::*;
use crate::agent::testing::{render_chat, MemorySpace, ScriptedLlm};

fn space() -> MemorySpace {
    MemorySpace::new([
        (
            "db/lyon_people.csv",
            "city,population\nLyon,522250\nNice,342669",
        ),
        (
            "db/paris_people.csv",
            "city,population,year\nParis,2148000,2020\nLyon,522250,2020",
        ),
        (
            "db/paris_weather.csv",
            "city,rain_mm\nParis,637\nBrest,1210",
        ),
        ("db/rivers.csv", "river,length_km\nSeine,777\nLoire,1006"),
    ])
}

fn config(max_steps: usize) -> TasConfig {
    TasConfig {
        task: TaskType::Tableqa,
        max_steps,
        ..TasConfig::default()
    }
}

const SCHEMA: &str = r#"{"constraints": [{"check": "lists Paris", "patterns": ["paris"]},
    {"check": "has a population column", "patterns": ["population"]}]}"#;

#[test]
fn rows_are_verified_then_the_full_match_is_answered() {
    let space = space();
    let mut llm = ScriptedLlm::new([
        SCHEMA,
        // Row T0 (the best match of both patterns: paris_people).
        r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris,2148000,2020"},
                       {"id": 2, "verdict": "yes", "evidence": "population column"}]}"#,
        "Answer: 2148000",
    ]);
    let tas = Tas::new(config(10)).unwrap();
    let t = tas
        .run(&mut llm, &space, "How many people live in Paris?")
        .unwrap();
    assert_eq!(t.answer, "2148000");
    assert_eq!(t.final_table.as_deref(), Some("db/paris_people.csv"));
    let kinds: Vec<StepKind> = t.calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [StepKind::TasSchema, StepKind::TasVerify, StepKind::Qa]
    );
    let tas_record = t.tas.as_ref().unwrap();
    assert_eq!(tas_record.stop, Some(StopReason::FullMatch));
    assert_eq!(tas_record.first_full_match_call, Some(1));
    assert_eq!(tas_record.cells_filled, 2);
    assert_eq!(tas_record.ranking[0], "db/paris_people.csv");
    // Create, then one append per new row, two updates, the answer.
    let ops: Vec<Operation> = tas_record.snapshots.iter().map(|s| s.operation).collect();
    assert_eq!(ops[0], Operation::Create);
    assert_eq!(ops.last(), Some(&Operation::Answer));
    assert_eq!(ops.iter().filter(|o| **o == Operation::Update).count(), 2);
    // A table id is never in two rows.
    let rows = tas_record.final_rows();
    let mut ids: Vec<&str> = rows.iter().map(|r| r.table_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), rows.len());
    assert_eq!(tas_record.rows_added, rows.len());
    assert_eq!(llm.remaining(), 0);
}

#[test]
fn unusable_output_leaves_cells_pending_and_the_loop_goes_on() {
    let space = space();
    let mut llm = ScriptedLlm::new([
        SCHEMA,
        "I think it is fine.",
        // Second row: one cell without evidence stays pending.
        r#"{"checks": [{"id": 1, "verdict": "no", "evidence": "Lyon, Nice only"},
                       {"id": 2, "verdict": "yes", "evidence": ""}]}"#,
        "Answer: not known",
    ]);
    let tas = Tas::new(config(4)).unwrap();
    let t = tas
        .run(&mut llm, &space, "How many people live in Paris?")
        .unwrap();
    assert_eq!(t.steps, 4, "the budget counts every call");
    assert!(!t.calls[1].parsed);
    let tas_record = t.tas.as_ref().unwrap();
    assert_eq!(tas_record.stop, Some(StopReason::Budget));
    let rows = tas_record.final_rows();
    assert!(rows[0]
        .cells
        .iter()
        .all(|c| c.status == CellStatus::Pending && c.evidence.is_empty()));
    assert_eq!(rows[1].cells[0].status, CellStatus::No);
    assert_eq!(rows[1].cells[0].evidence, "Lyon, Nice only");
    assert_eq!(rows[1].cells[1].status, CellStatus::Pending);
    assert_eq!(tas_record.cells_filled, 1);
    assert!(tas_record.cells_pending >= 3);
    // Every cell that left `pending` did so through an update snapshot of a recorded call.
    let updates: Vec<&Snapshot> = tas_record
        .snapshots
        .iter()
        .filter(|s| s.operation == Operation::Update)
        .collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].call, Some(2));
}

#[test]
fn an_expansion_runs_when_nothing_is_pending_and_nothing_matches() {
    let space = MemorySpace::new([
        ("a.csv", "city,population\nLyon,522250"),
        ("b.csv", "river,length_km\nSeine,777"),
        ("c.csv", "city,population\nParis,2148000"),
    ]);
    let schema = r#"{"constraints": [{"check": "lists Lyon", "patterns": ["lyon"]}]}"#;
    let mut llm = ScriptedLlm::new([
        schema,
        r#"{"checks": [{"id": 1, "verdict": "no", "evidence": "only 2019"}]}"#,
        r#"{"searches": [["paris"], ["lyon"]]}"#,
        r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris,2148000"}]}"#,
        "Answer: 2148000",
    ]);
    let mut cfg = config(10);
    cfg.per_search = 1;
    let tas = Tas::new(cfg).unwrap();
    let t = tas.run(&mut llm, &space, "Lyon?").unwrap();
    let kinds: Vec<StepKind> = t.calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            StepKind::TasSchema,
            StepKind::TasVerify,
            StepKind::TasExpand,
            StepKind::TasVerify,
            StepKind::Qa
        ]
    );
    // The repeated search (`lyon`) was dropped; `paris` found the new row.
    assert_eq!(
        t.calls[2].action,
        Action::Strategies {
            searches: vec![vec!["paris".to_string()]]
        }
    );
    let tas_record = t.tas.as_ref().unwrap();
    assert_eq!(tas_record.final_rows()[1].table_id, "c.csv");
    assert_eq!(t.final_table.as_deref(), Some("c.csv"));
    assert_eq!(tas_record.stop, Some(StopReason::FullMatch));
}

#[test]
fn insufficient_answers_fall_back_to_the_next_row() {
    let space = space();
    let mut llm = ScriptedLlm::new([
        SCHEMA,
        r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris"},
                       {"id": 2, "verdict": "yes", "evidence": "population"}]}"#,
        "Answer: INSUFFICIENT",
        "Answer: 2148000",
    ]);
    let tas = Tas::new(config(4)).unwrap();
    let t = tas
        .run(&mut llm, &space, "How many people live in Paris?")
        .unwrap();
    assert_eq!(t.steps, 4);
    assert_eq!(t.calls[3].kind, StepKind::QaFallback);
    assert_eq!(t.tables_seen.len(), 2);
    assert_eq!(t.answer, "2148000");
}

#[test]
fn same_inputs_same_trajectory_and_no_ids_in_prompts() {
    let run = || {
        let space = space();
        let mut llm = ScriptedLlm::new([
            SCHEMA,
            r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris"}]}"#,
            r#"{"checks": [{"id": 2, "verdict": "no", "evidence": "no such column"}]}"#,
            "Answer: 2148000",
        ]);
        let tas = Tas::new(config(4)).unwrap();
        let mut t = tas
            .run(&mut llm, &space, "How many people live in Paris?")
            .unwrap();
        t.zero_timings();
        let prompts: Vec<String> = llm
            .requests()
            .iter()
            .map(|r| render_chat(&r.messages))
            .collect();
        (serde_json::to_string(&t).unwrap(), prompts)
    };
    let (first, prompts) = run();
    assert_eq!(first, run().0);
    for prompt in &prompts {
        for leak in ["db/", ".csv", "paris_", "lyon_", "_weather"] {
            assert!(!prompt.contains(leak), "{leak} in {prompt}");
        }
    }
}

#[test]
fn the_llm_planner_falls_back_to_the_rule_and_can_answer_early() {
    let space = space();
    let mut llm = ScriptedLlm::new([
        SCHEMA,
        "no idea",
        r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris"}]}"#,
        r#"{"action": "answer"}"#,
        "Answer: 2148000",
    ]);
    let mut cfg = config(10);
    cfg.planner = TasPlanner::Llm;
    let tas = Tas::new(cfg).unwrap();
    let t = tas
        .run(&mut llm, &space, "How many people live in Paris?")
        .unwrap();
    let kinds: Vec<StepKind> = t.calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            StepKind::TasSchema,
            StepKind::TasPlan,
            StepKind::TasVerify,
            StepKind::TasPlan,
            StepKind::Qa
        ]
    );
    assert!(!t.calls[1].parsed);
    assert_eq!(t.tas.as_ref().unwrap().stop, Some(StopReason::Planner));
}

#[test]
fn bad_budgets_are_refused() {
    assert!(Tas::new(config(1)).is_err());
    let mut cfg = config(5);
    cfg.searches = 0;
    assert!(Tas::new(cfg).is_err());
}

/// A text tool with a fixed ranking, recording what it was asked.
struct FixedTool {
    ranking: Vec<usize>,
    asked: std::sync::Mutex<Vec<String>>,
}

impl search::TextSearch for FixedTool {
    fn search(&self, text: &str, depth: usize) -> Result<Vec<usize>, String> {
        self.asked.lock().unwrap().push(text.to_string());
        Ok(self.ranking.iter().copied().take(depth).collect())
    }
}

#[test]
fn text_tools_search_the_query_and_rows_join_in_fused_order() {
    let space = space();
    // Both text tools put paris_weather (2) first; grep on `paris` and `population` puts
    // paris_people (1) first. The fusion of all four searches leads with 2, so it is verified
    // first, although the first search's top table is 1.
    let tool = |ranking: &[usize]| FixedTool {
        ranking: ranking.to_vec(),
        asked: std::sync::Mutex::new(Vec::new()),
    };
    let (bm25, dense) = (tool(&[2, 3, 0]), tool(&[2, 3, 1]));
    let mut llm = ScriptedLlm::new([
        SCHEMA,
        r#"{"checks": [{"id": 1, "verdict": "no", "evidence": "rain only"},
                       {"id": 2, "verdict": "no", "evidence": "no population"}]}"#,
        r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris,2148000,2020"},
                       {"id": 2, "verdict": "yes", "evidence": "population column"}]}"#,
        "Answer: 2148000",
    ]);
    let mut cfg = config(10);
    cfg.tools = vec![SearchTool::Grep, SearchTool::Bm25, SearchTool::Dense];
    let tas = Tas::new(cfg.clone()).unwrap();
    let tools = TextTools {
        bm25: Some(&bm25),
        dense: Some(&dense),
    };
    let query = "How many people live in Paris?";
    let t = tas.run_with(&mut llm, &space, tools, query).unwrap();
    assert_eq!(*bm25.asked.lock().unwrap(), [query]);
    assert_eq!(*dense.asked.lock().unwrap(), [query]);
    let record = t.tas.as_ref().unwrap();
    let rows: Vec<&str> = record
        .final_rows()
        .iter()
        .map(|r| r.table_id.as_str())
        .collect();
    assert_eq!(rows[..2], ["db/paris_weather.csv", "db/paris_people.csv"]);
    assert_eq!(t.final_table.as_deref(), Some("db/paris_people.csv"));
    let tools_used: Vec<Option<&str>> = t.rounds.iter().map(|r| r.tool.as_deref()).collect();
    assert!(tools_used.contains(&Some("bm25")) && tools_used.contains(&Some("dense")));
    // A configured tool without its ranker is refused before any call.
    let mut llm = ScriptedLlm::new([SCHEMA]);
    let missing = TextTools {
        bm25: Some(&bm25),
        dense: None,
    };
    let error = Tas::new(cfg)
        .unwrap()
        .run_with(&mut llm, &space, missing, query);
    assert!(matches!(error, Err(AgentError::InvalidConfig(_))));
    assert_eq!(llm.remaining(), 1);
}
