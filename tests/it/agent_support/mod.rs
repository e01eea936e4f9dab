//! Shared fixtures for the agent tests: a small corpus whose ids look like storage paths, a runner
//! that checks the invariants every run must keep, and request helpers.

use tableseek::agent::testing::{render_chat, MemorySpace, ScriptedLlm};
use tableseek::agent::{Agent, AgentConfig, CallKind, LlmRequest, StepKind, Trajectory};

/// Ids carry storage metadata (directories, file names) that must never reach a prompt.
pub const IDS: [&str; 6] = [
    "vault/geo/pop_2020_final.csv",
    "vault/geo/pop_2010_draft.csv",
    "vault/econ/gdp_table.md",
    "vault/sport/medals_board.html",
    "vault/geo/rivers_list.csv",
    "vault/misc/capitals_ref.csv",
];

/// With patterns ["France", "Paris"] the ranking is 0, 1, 5 (score 1), then 2, 3, 4 (score 0.5).
pub fn corpus() -> MemorySpace {
    let texts = [
        "city,country,population_2020\nParis,France,2148000\nBerlin,Germany,3645000\nMadrid,Spain,3223000",
        "city,country,population_2010\nParis,France,2240000\nBerlin,Germany,3460000\nRome,Italy,2761000",
        "| country | gdp_busd | year |\n| France | 2937 | 2021 |\n| Germany | 4223 | 2021 |\n| Spain | 1427 | 2021 |",
        "<tr><th>nation</th><th>gold</th></tr>\n<tr><td>France</td><td>10</td></tr>\n<tr><td>Japan</td><td>27</td></tr>",
        "river,length_km,country\nSeine,777,France\nRhine,1233,Germany\nTiber,406,Italy",
        "country,capital\nFrance,Paris\nGermany,Berlin\nItaly,Rome",
    ];
    MemorySpace::new(IDS.iter().copied().zip(texts))
}

pub const PATTERNS_FR: &str = r#"["France", "Paris"]"#;

/// Runs one query and asserts what must hold for every run: the step count equals the number of
/// LLM calls (trajectory, totals and backend agree), the budget holds, and no prompt carries a
/// table id or any part of a storage path.
pub fn run(config: AgentConfig, query: &str, outputs: &[&str]) -> (Trajectory, ScriptedLlm) {
    let space = corpus();
    let mut llm = ScriptedLlm::new(outputs.iter().copied());
    let agent = Agent::new(config.clone()).expect("valid config");
    let trajectory = agent.run(&mut llm, &space, query).expect("run succeeds");
    assert_eq!(trajectory.steps, trajectory.calls.len());
    assert_eq!(trajectory.totals.steps, trajectory.calls.len());
    assert_eq!(llm.requests().len(), trajectory.calls.len());
    assert!(trajectory.steps <= config.max_steps);
    assert_no_leak(llm.requests());
    for (request, call) in llm.requests().iter().zip(&trajectory.calls) {
        let expected = match call.kind {
            StepKind::PatternGen => CallKind::PatternGen,
            StepKind::Qa => CallKind::Qa,
            StepKind::QaFallback => CallKind::QaFallback,
            _ => CallKind::Refine,
        };
        assert_eq!(request.kind, expected);
        assert_eq!(request.max_new_tokens, config.max_new_tokens);
    }
    (trajectory, llm)
}

pub fn assert_no_leak(requests: &[LlmRequest]) {
    for request in requests {
        let text = render_chat(&request.messages);
        for id in IDS {
            assert!(!text.contains(id), "table id {id} leaked into a prompt");
            let file = id.rsplit('/').next().unwrap();
            assert!(
                !text.contains(file),
                "file name {file} leaked into a prompt"
            );
            let stem = file.split('.').next().unwrap();
            assert!(
                !text.contains(stem),
                "file stem {stem} leaked into a prompt"
            );
        }
        assert!(!text.contains("vault"), "storage directory leaked");
    }
}

/// The user message of a request (the last one).
pub fn user_text(request: &LlmRequest) -> &str {
    &request.messages.last().unwrap().content
}

pub fn kinds(trajectory: &Trajectory) -> Vec<StepKind> {
    trajectory.calls.iter().map(|c| c.kind).collect()
}

/// The whole rendered request, system message included.
pub fn prompt_text(request: &LlmRequest) -> String {
    render_chat(&request.messages)
}

/// How many candidate / table sections a prompt shows.
pub fn shown_sections(request: &LlmRequest) -> usize {
    user_text(request).matches("\n### T").count()
}

pub fn select(ids: &[&str]) -> String {
    serde_json::json!({"action": "select", "tables": ids}).to_string()
}

pub fn regenerate(patterns: &[&str]) -> String {
    serde_json::json!({"action": "regenerate", "patterns": patterns}).to_string()
}
