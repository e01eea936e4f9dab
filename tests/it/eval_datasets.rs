//! The datasets `tableseek eval` reads: the bundled sample queries against the sample corpus
//! (through the real corpus loader and grep-backed search space), and the TabFact adapter against
//! ../shared (or $TABLESEEK_SHARED; skipped with a message when absent).

use std::path::Path;

use tableseek::agent::testing::{render_chat, ScriptedLlm};
use tableseek::agent::{AgentError, CorpusSpace, Llm, LlmRequest, LlmResponse, TaskType};
use tableseek::corpus::{Corpus, LoadOptions};
use tableseek::eval::{load_queries, resolve_dataset, EvalOptions, Evaluator, Method, QaMode};

/// Always gives the same answer: enough to exercise retrieval and scoring.
struct Constant;

impl Llm for Constant {
    fn chat(&mut self, _request: &LlmRequest) -> Result<LlmResponse, AgentError> {
        Ok(LlmResponse {
            text: "Answer: Canberra".into(),
            prompt_tokens: 0,
            cached_tokens: 0,
            ms: 0.0,
            constrained: false,
        })
    }
}

#[test]
fn sample_queries_score_against_the_sample_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let queries = load_queries(&root.join("samples/queries.jsonl")).unwrap();
    let (corpus, _) = Corpus::load(&root.join("samples/corpus"), &LoadOptions::default()).unwrap();
    for query in &queries {
        assert!(
            corpus.index_of(query.gold_table()).is_some(),
            "{}",
            query.qid
        );
    }
    let space = CorpusSpace::new(&corpus);
    let options = EvalOptions {
        timings: false,
        ..EvalOptions::default()
    };
    let evaluator = Evaluator::new(Method::Bm25, &space, corpus.len(), options.clone()).unwrap();
    let records: Vec<_> = queries
        .iter()
        .map(|q| evaluator.run_query(&mut Constant, q).unwrap())
        .collect();
    let hits = records.iter().filter(|r| r.metrics.r_at_5).count();
    assert!(
        hits * 2 >= records.len(),
        "BM25 R@5 on the samples: {hits}/{}",
        records.len()
    );
    // "Canberra" is right for exactly the question whose answer it is; for a claim it is no
    // verdict at all, which the baseline reads as refuted.
    for (query, record) in queries.iter().zip(&records) {
        match query.task {
            TaskType::Tableqa => {
                let right = query.answers.iter().any(|a| a == "Canberra");
                assert_eq!(record.metrics.em, Some(right), "{}", query.qid);
            }
            TaskType::FactVerification => {
                assert_eq!(record.prediction, "refuted", "{}", query.qid);
                assert_eq!(record.metrics.correct, Some(query.label == Some(0)));
            }
        }
    }
    let oracle = Evaluator::new(Method::Oracle, &space, corpus.len(), options).unwrap();
    for query in &queries {
        let record = oracle.run_query(&mut Constant, query).unwrap();
        assert_eq!(record.metrics.r_all, Some(true));
        assert_eq!(record.final_table.as_deref(), Some(query.gold_table()));
    }
}

#[test]
fn tabfact_test_1k_maps_onto_the_tabfact_corpus() {
    let shared = crate::common::shared_dir();
    let (dataset, corpus) = resolve_dataset("tabfact-test-1k", &shared);
    if !dataset.is_file() {
        eprintln!(
            "skipping: {} not found (TabFact lives in ../shared)",
            dataset.display()
        );
        return;
    }
    let corpus = corpus.unwrap();
    let queries = load_queries(&dataset).unwrap();
    assert_eq!(queries.len(), 1000);
    assert!(queries.iter().all(|q| q.task == TaskType::FactVerification));
    let supported = queries.iter().filter(|q| q.label == Some(1)).count();
    assert!(supported > 0 && supported < 1000);
    for query in &queries {
        assert!(corpus.join(query.gold_table()).is_file(), "{}", query.qid);
    }
}

/// Writes the SQL a coder model would for the sample's Australia question, whatever it is asked.
struct SqlWriter {
    prompts: Vec<String>,
}

impl Llm for SqlWriter {
    fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError> {
        self.prompts
            .push(request.messages.last().unwrap().content.clone());
        Ok(LlmResponse {
            text: "```sql\nSELECT capital FROM t WHERE country = 'Australia';\n```".into(),
            prompt_tokens: 10,
            cached_tokens: 0,
            ms: 0.0,
            constrained: false,
        })
    }
}

/// `--qa sql` on the oracle table: the answer is the query's result over the parsed table, the
/// attempts are recorded, and a claim is decided by the truth of its query.
#[test]
fn oracle_sql_qa_answers_from_the_query_result() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let queries = load_queries(&root.join("samples/queries.jsonl")).unwrap();
    let (corpus, _) = Corpus::load(&root.join("samples/corpus"), &LoadOptions::default()).unwrap();
    let space = CorpusSpace::new(&corpus);
    let options = EvalOptions {
        timings: false,
        qa: QaMode::Sql,
        ..EvalOptions::default()
    };
    let oracle = Evaluator::new(Method::Oracle, &space, corpus.len(), options).unwrap();
    let capital = queries
        .iter()
        .find(|q| q.answers.iter().any(|a| a == "Canberra"))
        .expect("the samples ask for Australia's capital");
    let mut llm = SqlWriter {
        prompts: Vec::new(),
    };
    let record = oracle.run_query(&mut llm, capital).unwrap();
    assert_eq!(record.prediction, "Canberra");
    assert_eq!(record.metrics.em, Some(true));
    let attempts: serde_json::Value =
        serde_json::from_str(record.qa_output.as_deref().unwrap()).unwrap();
    assert_eq!(
        attempts[0]["sql"],
        "SELECT capital FROM t WHERE country = 'Australia'"
    );
    assert_eq!(attempts[0]["rows"][0][0], "Canberra");
    assert!(
        llm.prompts[0].contains("CREATE TABLE \"t\""),
        "{}",
        llm.prompts[0]
    );
    // A claim is tested by a query that returns 1 when it holds; a reply with no query leaves
    // it refuted.
    let sydney = queries
        .iter()
        .find(|q| q.qid == "s4")
        .expect("the samples claim Sydney hosted the 2000 Games");
    let mut llm = ScriptedLlm::new([
        "SELECT COUNT(*) > 0 FROM t WHERE host_city = 'Sydney' AND year = 2000",
        "SELECT COUNT(*) > 0 FROM t WHERE host_city = 'Sydney' AND year = 2004",
    ]);
    let record = oracle.run_query(&mut llm, sydney).unwrap();
    assert!(render_chat(&llm.requests()[0].messages).contains("Is this claim true"));
    assert_eq!(record.prediction, "supported");
    assert_eq!(record.metrics.correct, Some(true));
    let record = oracle.run_query(&mut llm, sydney).unwrap();
    assert_eq!(record.prediction, "refuted");
    assert_eq!(record.metrics.correct, Some(false));
    let record = oracle.run_query(&mut Constant, sydney).unwrap();
    assert_eq!(record.prediction, "refuted");
}
