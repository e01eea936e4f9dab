use super::*;
use crate::agent::testing::{render_chat, MemorySpace, ScriptedLlm};
use crate::retrieve::chunks::{chunk_table, Chunk, ChunkOptions};

/// Word overlap between the text and each chunk: a stand-in for the dense index.
struct WordIndex {
    chunks: Vec<Chunk>,
}

impl WordIndex {
    fn new(space: &MemorySpace) -> Self {
        let chunks = (0..space.len())
            .filter_map(|i| {
                space
                    .table(i)
                    .map(|t| chunk_table(i, t, &ChunkOptions::default()))
            })
            .flatten()
            .collect();
        Self { chunks }
    }
}

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_string)
        .collect()
}

impl ChunkSearch for WordIndex {
    fn search(&self, text: &str, n: usize) -> Result<Vec<ChunkHit>, String> {
        let wanted = words(text);
        let mut hits: Vec<ChunkHit> = self
            .chunks
            .iter()
            .enumerate()
            .map(|(chunk, c)| {
                let have = words(&c.text);
                ChunkHit {
                    chunk,
                    table: c.table,
                    score: wanted.iter().filter(|w| have.contains(w)).count() as f64,
                }
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk.cmp(&b.chunk)));
        hits.truncate(n);
        Ok(hits)
    }

    fn chunk_text(&self, chunk: usize) -> &str {
        &self.chunks[chunk].text
    }
}

fn space() -> MemorySpace {
    MemorySpace::new([
        (
            "concert_singer/stadium.csv",
            "Stadium,Location,Capacity\nHampden Park,Glasgow,52500\nBalmoor,Peterhead,4000",
        ),
        (
            "concert_singer/singer.csv",
            "Name,Country,Age\nJoe Sharp,Netherlands,52\nTimbaland,United States,32\n\
             Justin Brown,France,29\nRose White,France,41",
        ),
    ])
}

fn config() -> TableRagConfig {
    TableRagConfig {
        max_iterations: 3,
        recall: 30,
        top_k: 3,
        sql_retries: 0,
        ..TableRagConfig::default()
    }
}

const QUESTION: &str = "How many singers from France are there? (singer country age)";

#[test]
fn a_sub_question_is_answered_by_sql_over_the_retrieved_tables() {
    let space = space();
    let index = WordIndex::new(&space);
    let mut llm = ScriptedLlm::new([
        r#"{"subquery": "How many singers have country France?"}"#,
        "```sql\nSELECT COUNT(*) FROM T0 WHERE \"country\" = 'France';\n```",
        "There are 2 singers from France.",
        r#"{"answer": "2"}"#,
    ]);
    let trajectory = run(&mut llm, &space, &index, &config(), QUESTION).unwrap();
    assert_eq!(trajectory.answer, "2");
    assert_eq!(trajectory.verdict, Some(Verdict::Answered));
    assert!(!trajectory.incomplete);
    assert_eq!(
        trajectory.final_table.as_deref(),
        Some("concert_singer/singer.csv")
    );
    let kinds: Vec<StepKind> = trajectory.calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            StepKind::Decompose,
            StepKind::Nl2Sql,
            StepKind::Compose,
            StepKind::Decompose
        ]
    );
    let iteration = &trajectory.iterations[0];
    assert_eq!(iteration.sql_rows, Some(1));
    assert_eq!(iteration.sql_error, None);
    assert_eq!(iteration.answer, "There are 2 singers from France.");
    assert_eq!(iteration.sql_tables[0], "concert_singer/singer.csv");
    assert_eq!(
        trajectory.calls[1].sql.as_ref().unwrap().rows,
        [[Some("2".to_string())]]
    );
    // The initial ranking is recorded for R@k, the singer table first.
    assert_eq!(
        trajectory.rounds[0].candidates[0].table_id,
        "concert_singer/singer.csv"
    );
    let requests = llm.requests();
    // Decompose sees the seed table under T0, and on its second turn the tool's answer.
    let first = render_chat(&requests[0].messages);
    assert!(
        first.contains("(T0;") && first.contains("Justin Brown"),
        "{first}"
    );
    assert!(render_chat(&requests[3].messages).contains("Tool answer: There are 2 singers"));
    // NL2SQL sees the schema with samples; compose sees the SQL, its result and the excerpts.
    let nl2sql = render_chat(&requests[1].messages);
    assert!(nl2sql.contains(r#""table_name":"T0""#), "{nl2sql}");
    assert!(
        nl2sql.contains(r#"["country","TEXT",["Netherlands","United States","France"]]"#),
        "{nl2sql}"
    );
    let compose = render_chat(&requests[2].messages);
    assert!(
        compose.contains("Result: COUNT(*)\n2\n(1 rows)"),
        "{compose}"
    );
    assert!(
        compose.contains("| Justin Brown | France | 29 |"),
        "{compose}"
    );
    // No prompt names a file, a database or a real id.
    for request in requests {
        let text = render_chat(&request.messages);
        assert!(
            !text.contains("concert_singer") && !text.contains(".csv"),
            "{text}"
        );
    }
    // The first decompose call may only ask; later ones may answer.
    let grammar = |i: usize| format!("{:?}", requests[i].constraint);
    assert!(!grammar(0).contains("answer") && grammar(3).contains("answer"));
}

#[test]
fn bad_sql_becomes_text_for_compose_and_the_loop_goes_on() {
    let space = space();
    let index = WordIndex::new(&space);
    let bad = [
        "SELEC oops",
        "SELECT nationality FROM T0",
        // A table the model was not shown (a second statement never reaches SQLite: the
        // extraction keeps the first one).
        "SELECT * FROM T9",
        "DELETE FROM T0",
        "no query at all",
    ];
    for sql in bad {
        let mut llm = ScriptedLlm::new([
            r#"{"subquery": "singers from France"}"#,
            sql,
            "I could not tell.",
            r#"{"subquery": "singers from France, count"}"#,
            "SELECT COUNT(*) FROM T0 WHERE country = 'France'",
            "2 singers.",
            r#"{"answer": "2"}"#,
        ]);
        let trajectory = run(&mut llm, &space, &index, &config(), QUESTION).unwrap();
        let first = &trajectory.iterations[0];
        let error = first
            .sql_error
            .as_deref()
            .unwrap_or_else(|| panic!("{sql}: no error"));
        assert!(first.sql_rows.is_none(), "{sql}");
        assert!(!trajectory.calls[1].parsed, "{sql}");
        let compose = render_chat(&llm.requests()[2].messages);
        assert!(compose.contains("the query failed"), "{sql}: {compose}");
        assert!(compose.contains(error), "{sql}: {compose}");
        assert_eq!(trajectory.answer, "2", "{sql}");
        assert_eq!(trajectory.iterations[1].sql_rows, Some(1));
    }
}

#[test]
fn a_failed_query_is_retried_once_with_its_error_under_the_grammar_of_the_tables() {
    let space = space();
    let index = WordIndex::new(&space);
    let mut llm = ScriptedLlm::new([
        r#"{"subquery": "singers from France, count"}"#,
        "SELECT COUNT(*) FROM T0 WHERE nationality = 'France'",
        "SELECT COUNT(*) FROM T0 WHERE country = 'France'",
        "2 singers.",
        r#"{"answer": "2"}"#,
    ]);
    let config = TableRagConfig {
        sql_retries: 1,
        ..config()
    };
    let trajectory = run(&mut llm, &space, &index, &config, QUESTION).unwrap();
    let requests = llm.requests();
    let kinds: Vec<CallKind> = requests.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds[..4],
        [
            CallKind::Decompose,
            CallKind::Nl2Sql,
            CallKind::Nl2Sql,
            CallKind::Compose
        ]
    );
    // The retry sees its failed query and the error; both calls carry the SELECT grammar
    // over the shown tables.
    let retry = render_chat(&requests[2].messages);
    assert!(
        retry.contains("nationality") && retry.contains("no such column"),
        "{retry}"
    );
    for request in &requests[1..3] {
        let grammar = format!("{:?}", request.constraint);
        assert!(
            grammar.contains("SELECT") || grammar.contains("[Ss][Ee][Ll]"),
            "{grammar}"
        );
        assert!(grammar.contains("country"), "{grammar}");
    }
    assert!(!trajectory.calls[1].parsed && trajectory.calls[2].parsed);
    let first = &trajectory.iterations[0];
    assert_eq!(first.sql_error, None);
    assert_eq!(first.sql_rows, Some(1));
    assert!(render_chat(&requests[3].messages).contains("Result: COUNT(*)\n2\n(1 rows)"));
    assert_eq!(trajectory.answer, "2");
}

#[test]
fn a_query_that_loops_is_stopped_and_a_huge_result_is_capped() {
    let space = space();
    let index = WordIndex::new(&space);
    let looping = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                   SELECT COUNT(*) FROM c";
    let million = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) \
                   SELECT x FROM c";
    let mut llm = ScriptedLlm::new([
        r#"{"subquery": "singers from France"}"#,
        looping,
        "No answer.",
        r#"{"subquery": "all singers"}"#,
        million,
        "Many.",
        r#"{"answer": "many"}"#,
    ]);
    let trajectory = run(&mut llm, &space, &index, &config(), QUESTION).unwrap();
    let stopped = trajectory.iterations[0].sql_error.as_deref().unwrap();
    assert!(stopped.contains("stopped"), "{stopped}");
    assert_eq!(trajectory.iterations[1].sql_rows, Some(SHOWN_ROWS));
    let attempt = trajectory.calls[4].sql.as_ref().unwrap();
    assert!(attempt.truncated);
    let compose = render_chat(&llm.requests()[5].messages);
    assert!(
        compose.contains("more than 10000 rows; the first"),
        "{compose}"
    );
    assert!(compose.len() < SHOWN_CHARS + 3000, "{}", compose.len());
}

#[test]
fn an_exhausted_budget_is_incomplete_and_an_early_answer_is_refused() {
    let space = space();
    let index = WordIndex::new(&space);
    // First reply answers (refused: no sub-question yet), then unreadable, then a sub-question.
    let mut llm = ScriptedLlm::new([
        r#"{"answer": "2"}"#,
        "I think two",
        r#"{"subquery": "count singers from France"}"#,
        "SELECT COUNT(*) FROM T0 WHERE country = 'France'",
        "2.",
    ]);
    let trajectory = run(&mut llm, &space, &index, &config(), QUESTION).unwrap();
    assert!(trajectory.incomplete);
    assert_eq!(trajectory.answer, "");
    assert_eq!(trajectory.verdict, None);
    assert_eq!(trajectory.calls.len(), 5);
    assert!(matches!(
        trajectory.calls[0].action,
        Action::NoAction {
            reason: NoneReason::Declined
        }
    ));
    assert!(matches!(
        trajectory.calls[1].action,
        Action::NoAction {
            reason: NoneReason::Unparseable
        }
    ));
    assert!(render_chat(&llm.requests()[1].messages).contains("first: the tool has not been asked"));
    // With force_answer, one more decompose call, answer only.
    let mut llm = ScriptedLlm::new([
        r#"{"subquery": "count singers from France"}"#,
        "SELECT COUNT(*) FROM T0 WHERE country = 'France'",
        "2.",
        r#"{"answer": "2"}"#,
    ]);
    let config = TableRagConfig {
        max_iterations: 1,
        force_answer: true,
        ..config()
    };
    let trajectory = run(&mut llm, &space, &index, &config, QUESTION).unwrap();
    assert!(trajectory.incomplete);
    assert_eq!(trajectory.answer, "2");
    assert!(render_chat(&llm.requests()[3].messages).contains(prompts::FORCE_ANSWER));
}

#[test]
fn claims_end_in_a_label_and_runs_are_deterministic() {
    let space = space();
    let index = WordIndex::new(&space);
    let script = [
        r#"{"subquery": "How old is Joe Sharp?"}"#,
        "SELECT age FROM T0 WHERE name = 'Joe Sharp'",
        "Joe Sharp is 52.",
        r#"{"answer": "REFUTED"}"#,
    ];
    let config = TableRagConfig {
        task: TaskType::FactVerification,
        ..config()
    };
    let claim = "Joe Sharp, the singer from the Netherlands, is 25 years of age.";
    let mut a = ScriptedLlm::new(script);
    let mut b = ScriptedLlm::new(script);
    let first = run(&mut a, &space, &index, &config, claim).unwrap();
    let second = run(&mut b, &space, &index, &config, claim).unwrap();
    assert_eq!(first.answer, "refuted");
    assert_eq!(first.verdict, Some(Verdict::Refuted));
    let (mut first, mut second) = (first, second);
    first.zero_timings();
    second.zero_timings();
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&second).unwrap()
    );
    assert!(format!("{:?}", a.requests()[3].constraint).contains("REFUTED"));
}

#[test]
fn gold_sql_of_a_tcr_question_executes_to_its_answer_rows() {
    // A scripted model emitting the question's gold SQL (table renamed to its anonymous id).
    let space = space();
    let index = WordIndex::new(&space);
    let gold_sql = "SELECT name FROM singer WHERE age > 40 ORDER BY name";
    let mut llm = ScriptedLlm::new([
        r#"{"subquery": "Which singers are older than 40?"}"#,
        gold_sql.replace("singer", "T0").as_str(),
        "Joe Sharp and Rose White.",
        r#"{"answer": "Joe Sharp, Rose White"}"#,
    ]);
    let trajectory = run(
        &mut llm,
        &space,
        &index,
        &config(),
        "singer age name older than 40",
    )
    .unwrap();
    let rows = &trajectory.calls[1].sql.as_ref().unwrap().rows;
    assert_eq!(
        rows,
        &[
            [Some("Joe Sharp".to_string())],
            [Some("Rose White".to_string())]
        ]
    );
}
