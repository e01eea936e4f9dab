//! Evaluation runs end to end with a deterministic fake model over an in-memory corpus: every
//! method's records and metrics, resuming after a kill (a half-written last line), config checks,
//! `report` rebuilding the summary, and `compare` on two runs.

use std::collections::BTreeMap;
use std::path::Path;

use tableseek::agent::tas::search::SearchTool;
use tableseek::agent::testing::MemorySpace;
use tableseek::agent::{
    AgentConfig, AgentError, CallKind, Llm, LlmRequest, LlmResponse, Role, TaskType,
};
use tableseek::engine::{load_tokenizer, DeviceMap, Model, ModelSpec};
use tableseek::eval::rundir::{PLOTS_DIR, QUERIES_FILE, REPORT_FILE, SUMMARY_FILE};
use tableseek::eval::stats::BootstrapOptions;
use tableseek::eval::{
    compare_runs, load_queries, read_records, write_summary, EvalOptions, EvalQuery, Evaluator,
    Method, RunConfig, RunDir, RunError, Summary,
};
use tableseek::retrieve::bert::Embeddings;
use tableseek::retrieve::dense::{self, DenseIndex, TextEncoder};
use tableseek::retrieve::rerank::{RerankOptions, Reranker};

pub(crate) const TABLES: [(&str, &str); 4] = [
    (
        "geo/capitals.csv",
        "country,capital\nAustralia,Canberra\nFrance,Paris",
    ),
    (
        "geo/cities.csv",
        "city,population\nParis,2148000\nCanberra,431000",
    ),
    ("space/planets.csv", "planet,moons\nSaturn,146\nMars,2"),
    ("sport/teams.csv", "team,points\nessendon,120\ncarlton,80"),
];

pub(crate) const DATASET: &str = r#"{"qid":"q1","query":"What is the capital of Australia?","task":"tableqa","answers":["Canberra"],"gold_tables":["geo/capitals.csv"]}
{"qid":"q2","query":"How many people live in Paris?","task":"tableqa","answers":["2148000"],"gold_tables":["geo/cities.csv"],"group_tables":["geo/capitals.csv"]}
{"qid":"q3","query":"How many moons does Saturn have?","task":"tableqa","answers":["146"],"gold_tables":["space/planets.csv"]}
{"qid":"q4","query":"How many moons does Mars have?","task":"tableqa","answers":["2"],"gold_tables":["space/planets.csv"]}
{"qid":"c1","claim":"essendon score more point than carlton","label":1,"gold_table":"sport/teams.csv"}
{"qid":"c2","claim":"carlton score 120 point","label":0,"gold_table":"sport/teams.csv"}
"#;

/// Per query (matched by its text in the prompt): grep patterns and the QA answer. Answers
/// depend only on the request, never on call order, so a resumed run sees the same outputs.
fn knowledge() -> BTreeMap<&'static str, (&'static str, &'static str)> {
    BTreeMap::from([
        (
            "capital of Australia",
            (r#"["Australia", "capital"]"#, "Canberra"),
        ),
        ("live in Paris", (r#"["Paris", "population"]"#, "2148000")),
        ("moons does Saturn", (r#"["Saturn", "moons"]"#, "146")),
        // Wrong on purpose: the metrics must notice.
        ("moons does Mars", (r#"["Mars", "moons"]"#, "146")),
        (
            "essendon score",
            (r#"["essendon", "carlton"]"#, "supported"),
        ),
        (
            "carlton score 120",
            (r#"["carlton", "points"]"#, "supported"),
        ),
    ])
}

/// A fake model; with `blind` set it ignores the question and always gives the same answer.
#[derive(Default)]
struct FakeLlm {
    calls: usize,
    blind: bool,
    /// QA calls on the query containing this text fail.
    fail_qa_on: Option<&'static str>,
    /// Every user prompt seen, in order.
    prompts: Vec<String>,
}

impl Llm for FakeLlm {
    fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError> {
        self.calls += 1;
        let prompt: String = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .collect();
        self.prompts.push(prompt.clone());
        let (patterns, answer) = knowledge()
            .into_iter()
            .find(|(key, _)| prompt.contains(key))
            .map(|(_, v)| v)
            .ok_or_else(|| AgentError::Llm("no query in prompt".into()))?;
        let answer = if self.blind { "Paris" } else { answer };
        let is_qa = matches!(request.kind, CallKind::Qa | CallKind::QaFallback);
        if is_qa && self.fail_qa_on.is_some_and(|key| prompt.contains(key)) {
            return Err(AgentError::Llm("context window exceeded".into()));
        }
        let text = match request.kind {
            CallKind::PatternGen => patterns.to_string(),
            CallKind::Refine => r#"{"action": "select", "tables": ["T0"]}"#.to_string(),
            CallKind::Qa | CallKind::QaFallback => format!("Answer: {answer}"),
            // TableRAG: one sub-question (the question itself), SQL that selects the answer,
            // compose repeats it, and decompose answers once the tool has replied.
            CallKind::Decompose if prompt.contains("Tool answer:") => {
                let answer = match answer {
                    "supported" | "refuted" => answer.to_uppercase(),
                    other => other.to_string(),
                };
                serde_json::json!({ "answer": answer }).to_string()
            }
            CallKind::Decompose => {
                let question = request.messages[1]
                    .content
                    .rsplit(": ")
                    .next()
                    .unwrap_or("");
                serde_json::json!({ "subquery": question }).to_string()
            }
            CallKind::Nl2Sql => format!("```sql\nSELECT '{answer}' FROM T0 LIMIT 1\n```"),
            CallKind::Compose => format!("The answer is {answer}."),
            // TaS: the query's patterns as one constraint, every check met, answer when asked.
            CallKind::TasSchema => {
                format!(r#"{{"constraints": [{{"check": "holds it", "patterns": {patterns}}}]}}"#)
            }
            CallKind::TasExpand => format!(r#"{{"searches": [{patterns}]}}"#),
            CallKind::TasVerify => {
                r#"{"checks": {"1": {"verdict": "yes", "evidence": "a matching row"}}}"#.to_string()
            }
            CallKind::TasPlan => r#"{"action": "answer"}"#.to_string(),
        };
        Ok(LlmResponse {
            text,
            prompt_tokens: prompt.len() / 4,
            cached_tokens: 0,
            ms: 0.0,
            constrained: false,
        })
    }
}

fn queries(dir: &Path) -> Vec<EvalQuery> {
    let path = dir.join("dataset.jsonl");
    std::fs::write(&path, DATASET).unwrap();
    load_queries(&path).unwrap()
}

fn options() -> EvalOptions {
    EvalOptions {
        agent: AgentConfig::builder().max_steps(5).build().unwrap(),
        timings: false,
        ..EvalOptions::default()
    }
}

fn config(method: Method) -> RunConfig {
    RunConfig {
        tableseek_version: "test".into(),
        git_revision: None,
        model_sha256: Some("abc".into()),
        options: serde_json::json!({ "method": method, "steps": 5 }),
        limit: None,
        command_line: Vec::new(),
    }
}

/// A complete run of `method` into `dir`; returns the number of LLM calls.
fn full_run(method: Method, dir: &Path, queries: &[EvalQuery], llm: &mut FakeLlm) -> usize {
    let space = MemorySpace::new(TABLES);
    let evaluator = Evaluator::new(method, &space, space.len(), options()).unwrap();
    let mut run = RunDir::open(dir, &config(method), false).unwrap();
    run.run(&evaluator, llm, queries, |_| {}).unwrap();
    llm.calls
}

pub(crate) fn tableseek() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_tableseek"))
}

/// Runs the command, asserts it succeeded (showing its stderr if not) and returns its stdout.
pub(crate) fn succeed(command: &mut std::process::Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn methods_produce_scored_records() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    // Dense and rerank need an encoder and a reranker: `dense_and_rerank_methods` below.
    for method in Method::ALL.into_iter().filter(|m| {
        !matches!(
            m,
            Method::Dense | Method::Rerank | Method::Tablerag | Method::Hybrid | Method::Trag
        )
    }) {
        let dir = tmp.path().join(method.as_str());
        full_run(method, &dir, &queries, &mut FakeLlm::default());
        let records = read_records(&dir).unwrap();
        assert_eq!(records.len(), 6, "{method}");
        let by_qid: BTreeMap<&str, _> = records.iter().map(|r| (r.qid.as_str(), r)).collect();
        let (q1, q4, c2) = (by_qid["q1"], by_qid["q4"], by_qid["c2"]);
        assert_eq!(q1.prediction, "Canberra", "{method}");
        assert_eq!(q1.metrics.f1, Some(1.0), "{method}");
        assert_eq!(q4.metrics.em, Some(false), "{method}");
        assert_eq!(c2.task, TaskType::FactVerification);
        assert_eq!(c2.metrics.correct, Some(false), "{method}");
        assert_eq!(by_qid["c1"].metrics.correct, Some(true), "{method}");
        // Only q2 has a group; GR is absent elsewhere.
        assert!(by_qid["q2"].metrics.gr_at_1.is_some());
        assert!(q1.metrics.gr_at_1.is_none());
        match method {
            Method::Oracle => {
                assert!(records.iter().all(|r| r.metrics.r_all == Some(true)));
                assert_eq!(q1.tables_seen, ["geo/capitals.csv"]);
            }
            Method::NoTable => {
                assert!(records.iter().all(|r| r.metrics.r_all == Some(false)));
                assert!(records.iter().all(|r| r.final_table.is_none()));
            }
            Method::Tableseek => {
                assert_eq!(q1.final_table.as_deref(), Some("geo/capitals.csv"));
                assert_eq!(q1.metrics.r_all, Some(true));
                assert_eq!(q1.cost.llm_calls, 3);
                assert!(q1.trajectory.is_some());
            }
            Method::Tas => {
                // Schema, one verification (a full match), QA.
                assert_eq!(q1.final_table.as_deref(), Some("geo/capitals.csv"));
                assert_eq!(q1.cost.llm_calls, 3);
                assert_eq!(q1.ranking[0], "geo/capitals.csv");
                let tas = q1.trajectory.as_ref().unwrap().tas.as_ref().unwrap();
                assert!(tas.final_rows()[0].is_full_match());
            }
            Method::Dense | Method::Rerank | Method::Tablerag | Method::Hybrid | Method::Trag => {
                unreachable!("filtered out")
            }
            Method::Bm25 => {
                assert_eq!(q1.ranking.len(), 4);
                assert_eq!(q1.cost.llm_calls, 1);
                assert_eq!(q1.tables_seen, [q1.ranking[0].clone()]);
            }
        }
        let summary: serde_json::Value =
            serde_json::from_str(&read(&dir.join(SUMMARY_FILE))).unwrap();
        assert_eq!(summary["n"], 6);
        assert_eq!(summary["metrics"]["qa_queries"], 4);
        assert_eq!(summary["metrics"]["verification_queries"], 2);
        // q1-q3 right, q4 wrong; c1 right, c2 wrong.
        assert_eq!(summary["metrics"]["em"], 0.75);
        assert_eq!(summary["metrics"]["acc"], 0.5);
        assert!(read(&dir.join(REPORT_FILE)).contains("| Acc |"));
    }
}

#[test]
fn a_killed_run_resumes_to_the_same_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    for method in [Method::Tableseek, Method::Bm25] {
        let whole = tmp.path().join(format!("{method}-whole"));
        let calls_whole = full_run(method, &whole, &queries, &mut FakeLlm::default());
        let cut = tmp.path().join(format!("{method}-cut"));
        full_run(method, &cut, &queries, &mut FakeLlm::default());
        // Simulate a kill during the fourth record: three whole lines and half of the fourth.
        let text = read(&cut.join(QUERIES_FILE));
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let kept = format!("{}{}", lines[..3].concat(), &lines[3][..lines[3].len() / 2]);
        std::fs::write(cut.join(QUERIES_FILE), kept).unwrap();
        std::fs::remove_file(cut.join(SUMMARY_FILE)).unwrap();
        // `report` on the killed run ignores the torn line.
        assert_eq!(read_records(&cut).unwrap().len(), 3);

        let space = MemorySpace::new(TABLES);
        let evaluator = Evaluator::new(method, &space, space.len(), options()).unwrap();
        let mut run = RunDir::open(&cut, &config(method), true).unwrap();
        assert_eq!(run.finished().len(), 3);
        let mut llm = FakeLlm::default();
        let mut redone = Vec::new();
        run.run(&evaluator, &mut llm, &queries, |r| {
            redone.push(r.qid.clone())
        })
        .unwrap();
        assert_eq!(redone, ["q4", "c1", "c2"], "{method}");
        assert!(
            llm.calls < calls_whole,
            "{method}: finished queries were redone"
        );
        assert_eq!(
            read(&cut.join(QUERIES_FILE)),
            read(&whole.join(QUERIES_FILE))
        );
        assert_eq!(
            read(&cut.join(SUMMARY_FILE)),
            read(&whole.join(SUMMARY_FILE))
        );
    }
}

#[test]
fn report_rebuilds_the_same_summary_from_records() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let dir = tmp.path().join("run");
    full_run(Method::Tableseek, &dir, &queries, &mut FakeLlm::default());
    let summary = read(&dir.join(SUMMARY_FILE));
    let report = read(&dir.join(REPORT_FILE));
    // An agent run has every plot but time by stage (timings are off here); each names what it
    // shows.
    let plots = dir.join(PLOTS_DIR);
    assert!(!plots.join("time_by_stage.svg").exists());
    let mut drawn = Vec::new();
    for (file, label) in [
        ("actions_per_query.svg", "pattern-gen ("),
        ("top1_by_round.svg", "round 0 ("),
        ("score_by_format.svg", "csv, n="),
    ] {
        let svg = read(&plots.join(file));
        assert!(svg.contains(label), "{file} lacks {label:?}");
        drawn.push(svg);
    }
    let parsed: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let by_round = parsed["metrics"]["top1_hit_by_round"].as_array().unwrap();
    assert!(!by_round.is_empty());
    assert!(by_round
        .iter()
        .all(|r| (0.0..=1.0).contains(&r.as_f64().unwrap())));
    std::fs::remove_file(dir.join(SUMMARY_FILE)).unwrap();
    std::fs::remove_file(dir.join(REPORT_FILE)).unwrap();
    std::fs::remove_dir_all(&plots).unwrap();
    write_summary(&dir, &read_records(&dir).unwrap()).unwrap();
    assert_eq!(read(&dir.join(SUMMARY_FILE)), summary);
    assert_eq!(read(&dir.join(REPORT_FILE)), report);
    for (file, svg) in [
        "actions_per_query.svg",
        "top1_by_round.svg",
        "score_by_format.svg",
    ]
    .iter()
    .zip(&drawn)
    {
        assert_eq!(&read(&plots.join(file)), svg, "{file} redrawn differently");
    }
    // Finishing order does not change the summary, not even in the last digit of a float sum.
    let mut records = read_records(&dir).unwrap();
    for (i, record) in records.iter_mut().enumerate() {
        record.cost.ms.retrieval = [0.1, 0.2, 0.3, 1e-17, 7.7][i % 5];
    }
    let forward = Summary::from_records(&records).unwrap();
    records.reverse();
    let backward = Summary::from_records(&records).unwrap();
    assert_eq!(
        serde_json::to_string(&forward).unwrap(),
        serde_json::to_string(&backward).unwrap()
    );
}

#[test]
fn resuming_refuses_other_settings_and_fresh_runs_refuse_old_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let dir = tmp.path().join("run");
    full_run(Method::Oracle, &dir, &queries, &mut FakeLlm::default());
    let before = read(&dir.join(QUERIES_FILE));

    let mut other = config(Method::Oracle);
    other.options["steps"] = serde_json::json!(10);
    let err = RunDir::open(&dir, &other, true).err().unwrap();
    assert!(matches!(err, RunError::ConfigMismatch { .. }), "{err}");
    assert!(err.to_string().contains("steps"), "{err}");

    let mut other_model = config(Method::Oracle);
    other_model.model_sha256 = Some("def".into());
    let err = RunDir::open(&dir, &other_model, true).err().unwrap();
    assert!(err.to_string().contains("model_sha256"), "{err}");

    let err = RunDir::open(&dir, &config(Method::Oracle), false)
        .err()
        .unwrap();
    assert!(matches!(err, RunError::Exists(_)), "{err}");
    // A different git revision or query limit does not block resuming.
    let mut moved = config(Method::Oracle);
    moved.git_revision = Some("0123".into());
    moved.limit = Some(3);
    assert_eq!(
        RunDir::open(&dir, &moved, true).unwrap().finished().len(),
        6
    );
    assert_eq!(read(&dir.join(QUERIES_FILE)), before);
}

#[test]
fn a_corrupt_middle_line_is_an_error_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let dir = tmp.path().join("run");
    full_run(Method::NoTable, &dir, &queries, &mut FakeLlm::default());
    let text = read(&dir.join(QUERIES_FILE));
    let damaged = text.replacen("{\"qid\":\"q2\"", "{\"qid\":", 1);
    std::fs::write(dir.join(QUERIES_FILE), &damaged).unwrap();
    let err = RunDir::open(&dir, &config(Method::NoTable), true)
        .err()
        .unwrap();
    assert!(
        matches!(err, RunError::CorruptRecord { line: 2, .. }),
        "{err}"
    );
    assert_eq!(read(&dir.join(QUERIES_FILE)), damaged);
}

#[test]
fn compare_pairs_common_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let good = tmp.path().join("good");
    let blind = tmp.path().join("blind");
    full_run(Method::Oracle, &good, &queries, &mut FakeLlm::default());
    // The blind run only did the four table-QA queries.
    full_run(
        Method::Oracle,
        &blind,
        &queries[..4],
        &mut FakeLlm {
            blind: true,
            ..FakeLlm::default()
        },
    );
    let a = read_records(&good).unwrap();
    let b = read_records(&blind).unwrap();
    let comparison = compare_runs(&a, &b, &BootstrapOptions::default().resamples(2000));
    assert_eq!(
        (comparison.common, comparison.only_a, comparison.only_b),
        (4, 2, 0)
    );
    let answer = &comparison.metrics[0];
    assert_eq!(answer.n, 4);
    // Good: F1 1,1,1,0 (q4 wrong); blind answers "Paris" everywhere: F1 0.
    assert_eq!((answer.mean_a, answer.mean_b), (0.75, 0.0));
    let bootstrap = answer.bootstrap.as_ref().unwrap();
    assert!((bootstrap.mean_diff - 0.75).abs() < 1e-12);
    assert!(bootstrap.ci_low >= 0.0);
    assert!(answer.t_test.is_ok());
    // Both read the gold table every time: R@all identical, so the t-test has no variance.
    let recall = &comparison.metrics[1];
    assert_eq!(recall.metric, "R@all");
    assert_eq!((recall.mean_a, recall.mean_b), (1.0, 1.0));
    assert!(recall.t_test.is_err());
}

#[test]
fn report_and_compare_commands_read_run_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let a = tmp.path().join("tableseek");
    let b = tmp.path().join("bm25");
    full_run(Method::Tableseek, &a, &queries, &mut FakeLlm::default());
    full_run(Method::Bm25, &b, &queries, &mut FakeLlm::default());
    let summary_a = read(&a.join(SUMMARY_FILE));
    std::fs::remove_file(a.join(SUMMARY_FILE)).unwrap();

    let table = succeed(tableseek().arg("report").args([&a, &b]));
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| ")).count(),
        3,
        "{table}"
    );
    assert!(
        table.contains("| tableseek | 6 |") && table.contains("| bm25 | 6 |"),
        "{table}"
    );
    assert_eq!(read(&a.join(SUMMARY_FILE)), summary_a);

    let text = succeed(
        tableseek()
            .args(["compare", "--resamples", "500"])
            .args([&a, &b]),
    );
    assert!(text.contains("6 common queries"), "{text}");
    assert!(text.contains("| R@all | 6 |"), "{text}");

    let output = tableseek()
        .args(["report"])
        .arg(tmp.path().join("missing"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no finished queries"));
}

#[test]
fn a_failing_query_is_recorded_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    for method in [Method::Tableseek, Method::Bm25] {
        let dir = tmp.path().join(method.as_str());
        let mut llm = FakeLlm {
            fail_qa_on: Some("moons does Saturn"),
            ..FakeLlm::default()
        };
        full_run(method, &dir, &queries, &mut llm);
        let records = read_records(&dir).unwrap();
        assert_eq!(records.len(), 6, "{method}");
        let q3 = &records[2];
        assert_eq!(q3.qid, "q3");
        assert!(
            q3.error.as_deref().unwrap().contains("context window"),
            "{method}"
        );
        assert_eq!((q3.prediction.as_str(), q3.metrics.f1), ("", Some(0.0)));
        if method == Method::Tableseek {
            // What the agent did before the failure is kept.
            let trajectory = q3.trajectory.as_ref().unwrap();
            assert_eq!(trajectory.calls.len(), 2);
            assert_eq!(
                q3.ranking.first().map(String::as_str),
                Some("space/planets.csv")
            );
        }
        assert!(records
            .iter()
            .filter(|r| r.qid != "q3")
            .all(|r| r.error.is_none()));
        let summary: serde_json::Value =
            serde_json::from_str(&read(&dir.join(SUMMARY_FILE))).unwrap();
        assert_eq!(summary["errors"], 1);
        assert!(read(&dir.join(REPORT_FILE)).contains("| errors |"));
    }
}

/// Bag of hashed lowercase words: texts sharing words are close. Enough to rank the four tables.
struct WordsEncoder;

impl WordsEncoder {
    fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; 64];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
        {
            let hash = word.to_lowercase().bytes().fold(2166136261u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(16777619)
            });
            v[hash as usize % 64] += 1.0;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter().map(|x| x / norm).collect()
    }
}

impl TextEncoder for WordsEncoder {
    fn embed_documents(&self, texts: &[&str]) -> dense::Result<Embeddings> {
        Ok(Embeddings {
            data: texts.iter().flat_map(|t| Self::vector(t)).collect(),
            dim: 64,
            truncated: 0,
        })
    }

    fn embed_query(&self, text: &str) -> dense::Result<Vec<f32>> {
        Ok(Self::vector(text))
    }

    fn dim(&self) -> usize {
        64
    }

    fn identity(&self) -> Vec<u8> {
        b"words".to_vec()
    }
}

/// The tiny random Qwen3 as a reranker (its vocabulary has no "yes"/"no": ids 11 and 10 stand
/// in), when ../shared is there.
fn tiny_reranker() -> Option<Reranker> {
    let dir = crate::common::shared_dir().join("reference/tiny-models/tiny-qwen3");
    if !dir.is_dir() {
        eprintln!("skipping the rerank part: {} not found", dir.display());
        return None;
    }
    let model = Model::load(&ModelSpec::Path(dir.clone()), &DeviceMap::cpu(), None).unwrap();
    let options = RerankOptions {
        yes_no_ids: Some((11, 10)),
        ..RerankOptions::default()
    };
    Some(Reranker::new(model, load_tokenizer(&dir, None).unwrap(), options).unwrap())
}

#[test]
fn tablerag_runs_over_chunks_and_records_its_stages() {
    use tableseek::retrieve::chunks::{chunk_tables, ChunkOptions};
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let space = MemorySpace::new(TABLES);
    let tables: Vec<_> = (0..space.len())
        .map(|i| {
            tableseek::agent::SearchSpace::table(&space, i)
                .unwrap()
                .clone()
        })
        .collect();
    let chunks = chunk_tables(&tables, &ChunkOptions::default());
    let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
    let index = DenseIndex::build(&WordsEncoder, &texts).unwrap();

    let bare = Evaluator::new(Method::Tablerag, &space, space.len(), options()).unwrap();
    let err = bare
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("chunk index"), "{err}");

    let evaluator = Evaluator::new(Method::Tablerag, &space, space.len(), options())
        .unwrap()
        .with_chunks(&WordsEncoder, &index, &chunks);
    let dir = tmp.path().join("tablerag");
    let mut run = RunDir::open(&dir, &config(Method::Tablerag), false).unwrap();
    run.run(&evaluator, &mut FakeLlm::default(), &queries, |_| {})
        .unwrap();
    let records = read_records(&dir).unwrap();
    let by_qid: BTreeMap<&str, _> = records.iter().map(|r| (r.qid.as_str(), r)).collect();
    let q1 = by_qid["q1"];
    assert_eq!(q1.prediction, "Canberra");
    assert_eq!(q1.metrics.f1, Some(1.0));
    assert_eq!(q1.ranking[0], "geo/capitals.csv");
    assert_eq!(q1.final_table.as_deref(), Some("geo/capitals.csv"));
    assert_eq!(
        q1.cost.llm_calls, 4,
        "decompose, nl2sql, compose, decompose"
    );
    let trajectory = q1.trajectory.as_ref().unwrap();
    assert_eq!(trajectory.iterations.len(), 1);
    assert_eq!(trajectory.iterations[0].sql_rows, Some(1));
    assert_eq!(by_qid["c1"].metrics.correct, Some(true));
    assert_eq!(by_qid["c2"].metrics.correct, Some(false));
    // The stored line names the stages; the report reads it like any other run.
    let line = serde_json::to_string(q1).unwrap();
    assert!(line.contains(r#""kind":"nl2sql""#), "{line}");
    let summary: serde_json::Value = serde_json::from_str(&read(&dir.join(SUMMARY_FILE))).unwrap();
    assert_eq!(summary["methods"][0], "tablerag");
    assert_eq!(summary["metrics"]["action_parse_rate"], 1.0);
}

#[test]
fn dense_and_rerank_methods() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let space = MemorySpace::new(TABLES);
    let texts: Vec<&str> = TABLES.iter().map(|(_, text)| *text).collect();
    let index = DenseIndex::build(&WordsEncoder, &texts).unwrap();

    // Without an encoder the method cannot run, and says why.
    let bare = Evaluator::new(Method::Dense, &space, space.len(), options()).unwrap();
    let err = bare
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("encoder"), "{err}");

    let evaluator = Evaluator::new(Method::Dense, &space, space.len(), options())
        .unwrap()
        .with_dense(&WordsEncoder, &index);
    let dense: Vec<_> = queries
        .iter()
        .map(|q| evaluator.run_query(&mut FakeLlm::default(), q).unwrap())
        .collect();
    let q1 = &dense[0];
    assert_eq!(q1.ranking[0], "geo/capitals.csv");
    assert_eq!(q1.ranking.len(), 4);
    assert_eq!(q1.final_table.as_deref(), Some("geo/capitals.csv"));
    assert!(q1.metrics.r_at_1);
    assert_eq!(
        (
            q1.cost.llm_calls,
            q1.cost.encode_calls,
            q1.cost.rerank_calls
        ),
        (1, 1, 0)
    );
    let line = serde_json::to_string(q1).unwrap();
    assert!(line.contains("\"encode_calls\":1"), "{line}");
    assert!(
        !line.contains("rerank_calls"),
        "zero counters stay out of the record"
    );

    // Hybrid: BM25 and the same dense ranking fused; both put the capitals table first for q1,
    // and every table either ranking holds appears once.
    let bare = Evaluator::new(Method::Hybrid, &space, space.len(), options()).unwrap();
    let err = bare
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("encoder"), "{err}");
    let hybrid = Evaluator::new(Method::Hybrid, &space, space.len(), options())
        .unwrap()
        .with_dense(&WordsEncoder, &index);
    let record = hybrid
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap();
    assert_eq!(record.ranking[0], "geo/capitals.csv");
    let mut unique = record.ranking.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), record.ranking.len());
    assert_eq!((record.cost.llm_calls, record.cost.encode_calls), (1, 1));

    // TaS with BM25 and dense as search tools: both rank the query in the first expansion, and
    // the dense tool needs the encoder like the dense method does.
    let tas_options = || {
        let mut options = options();
        options.tas.tools = vec![SearchTool::Grep, SearchTool::Bm25, SearchTool::Dense];
        options
    };
    let bare = Evaluator::new(Method::Tas, &space, space.len(), tas_options()).unwrap();
    let err = bare
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("encoder"), "{err}");
    let tas = Evaluator::new(Method::Tas, &space, space.len(), tas_options())
        .unwrap()
        .with_dense(&WordsEncoder, &index);
    let record = tas.run_query(&mut FakeLlm::default(), &queries[0]).unwrap();
    assert_eq!(record.final_table.as_deref(), Some("geo/capitals.csv"));
    let trajectory = record.trajectory.as_ref().unwrap();
    let tools: Vec<Option<&str>> = trajectory
        .rounds
        .iter()
        .map(|r| r.tool.as_deref())
        .collect();
    assert!(
        tools.contains(&Some("bm25")) && tools.contains(&Some("dense")),
        "{tools:?}"
    );

    let Some(mut reranker) = tiny_reranker() else {
        return;
    };
    let rerank_options = EvalOptions {
        rerank_depth: 3,
        ..options()
    };
    let no_reranker = Evaluator::new(Method::Rerank, &space, space.len(), options())
        .unwrap()
        .with_dense(&WordsEncoder, &index);
    let err = no_reranker
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("reranker"), "{err}");
    let evaluator = Evaluator::new(Method::Rerank, &space, space.len(), rerank_options)
        .unwrap()
        .with_dense(&WordsEncoder, &index)
        .with_reranker(&mut reranker);
    for (query, dense) in queries.iter().zip(&dense) {
        let record = evaluator.run_query(&mut FakeLlm::default(), query).unwrap();
        assert_eq!(record.method, Method::Rerank);
        assert_eq!(record.cost.rerank_calls, 3);
        assert_eq!(record.cost.encode_calls, 1);
        // The reranker reorders the dense top 3 and leaves the rest in place.
        let mut head = record.ranking[..3].to_vec();
        let mut dense_head = dense.ranking[..3].to_vec();
        head.sort();
        dense_head.sort();
        assert_eq!(head, dense_head);
        assert_eq!(record.ranking[3..], dense.ranking[3..]);
        assert_eq!(record.final_table.as_ref(), Some(&record.ranking[0]));
    }
}

/// [`TABLES`] as files in `dir/corpus`.
pub(crate) fn write_corpus(dir: &Path) -> std::path::PathBuf {
    let corpus = dir.join("corpus");
    for (id, text) in TABLES {
        let path = corpus.join(id);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    corpus
}

/// `--threads` must size the CPU pool before the corpus is read in parallel: it used to fail with
/// "the global thread pool has already been initialized" on every eval run with the flag.
#[test]
fn eval_with_a_thread_count_runs_the_real_model() {
    let Some(model) = crate::common::existing(crate::common::smollm2_gguf()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write_corpus(tmp.path());
    let dataset = tmp.path().join("dataset.jsonl");
    std::fs::write(&dataset, DATASET.lines().next().unwrap()).unwrap();
    let out = tmp.path().join("run");
    succeed(
        tableseek()
            .args(["eval", "--method", "oracle", "--threads", "1"])
            .args(["--max-new-tokens", "8"])
            .arg("--dataset")
            .arg(&dataset)
            .arg("--corpus")
            .arg(&corpus)
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(&out),
    );
    let records = read_records(&out).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].final_table.as_deref(), Some("geo/capitals.csv"));
}

/// The six queries of [`DATASET`] repeated to `n` lines under their own ids (`q1-0`, …): the
/// fake model answers by query text, so each copy scores as its original.
pub(crate) fn repeated_dataset(n: usize) -> String {
    (0..n)
        .map(|i| {
            let line = DATASET.lines().nth(i % 6).unwrap();
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            let qid = format!("{}-{i}", value["qid"].as_str().unwrap());
            value["qid"] = qid.into();
            format!("{value}\n")
        })
        .collect()
}

/// 30 queries: [`repeated_dataset`] of 30.
fn thirty_queries(dir: &Path) -> Vec<EvalQuery> {
    let path = dir.join("thirty.jsonl");
    std::fs::write(&path, repeated_dataset(30)).unwrap();
    load_queries(&path).unwrap()
}

#[test]
fn shards_merged_equal_the_unsharded_run() {
    use tableseek::eval::shard::SHARD_KEY;
    use tableseek::eval::{merge_shards, MergeError, Shard};
    let tmp = tempfile::tempdir().unwrap();
    let queries = thirty_queries(tmp.path());
    let whole = tmp.path().join("whole");
    full_run(Method::Tableseek, &whole, &queries, &mut FakeLlm::default());
    let space = MemorySpace::new(TABLES);
    let evaluator = Evaluator::new(Method::Tableseek, &space, space.len(), options()).unwrap();
    let shard_dir = |k: usize| tmp.path().join(format!("shard-{k}"));
    // Shards run in reverse order, each with a fresh model, as on separate machines.
    for k in [3, 2, 1] {
        let shard: Shard = format!("{k}/3").parse().unwrap();
        let mut config = config(Method::Tableseek);
        config.options[SHARD_KEY] = serde_json::json!(shard.info(queries.len()));
        let mine = shard.select(&queries);
        assert_eq!(mine.len(), 10);
        assert_eq!(mine[0].qid, queries[k - 1].qid);
        let mut run = RunDir::open(&shard_dir(k), &config, false).unwrap();
        run.run(&evaluator, &mut FakeLlm::default(), &mine, |_| {})
            .unwrap();
    }
    // A missing shard and a mismatched one are refused with what is wrong.
    let err = merge_shards(&[shard_dir(1), shard_dir(3)], &tmp.path().join("bad")).unwrap_err();
    assert!(matches!(err, MergeError::Incomplete { .. }), "{err}");
    let err = merge_shards(&[shard_dir(1), whole.clone()], &tmp.path().join("bad2")).unwrap_err();
    assert!(matches!(err, MergeError::NotAShard(_)), "{err}");

    let merged = tmp.path().join("merged");
    let dirs = [shard_dir(2), shard_dir(3), shard_dir(1)];
    let mut command = tableseek();
    command
        .arg("report")
        .arg("--merge")
        .arg(&merged)
        .args(&dirs);
    let printed = succeed(&mut command);
    assert!(printed.contains("| Acc |"), "{printed}");
    assert_eq!(
        read(&merged.join(QUERIES_FILE)),
        read(&whole.join(QUERIES_FILE))
    );
    assert_eq!(
        read(&merged.join(SUMMARY_FILE)),
        read(&whole.join(SUMMARY_FILE))
    );
    // The merged run is a run directory like any other: it refuses a second merge into it.
    let err = merge_shards(&dirs, &merged).unwrap_err();
    assert!(err.to_string().contains("already holds a run"), "{err}");
    // Bad shard specs are clear errors.
    for bad in ["0/3", "4/3", "3", "a/b"] {
        let err = bad.parse::<Shard>().unwrap_err();
        assert!(err.contains("K/N"), "{bad}: {err}");
    }
}

#[test]
fn concurrent_workers_write_the_records_of_a_one_worker_run() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = thirty_queries(tmp.path());
    for method in [Method::Tableseek, Method::Bm25, Method::Oracle] {
        let space = MemorySpace::new(TABLES);
        let evaluator = Evaluator::new(method, &space, space.len(), options()).unwrap();
        let one = tmp.path().join(format!("{method}-one"));
        full_run(method, &one, &queries, &mut FakeLlm::default());
        let four = tmp.path().join(format!("{method}-four"));
        let mut run = RunDir::open(&four, &config(method), false).unwrap();
        let workers = (0..4).map(|_| FakeLlm::default()).collect();
        let mut order = Vec::new();
        run.run_concurrent(&evaluator, workers, &queries, |r| order.push(r.qid.clone()))
            .unwrap();
        let expected: Vec<String> = queries.iter().map(|q| q.qid.clone()).collect();
        assert_eq!(
            order, expected,
            "{method}: records reported in dataset order"
        );
        assert_eq!(
            read(&four.join(QUERIES_FILE)),
            read(&one.join(QUERIES_FILE))
        );
        assert_eq!(
            read(&four.join(SUMMARY_FILE)),
            read(&one.join(SUMMARY_FILE))
        );
    }
}

/// `eval --concurrency 4` runs the agent loops of the real model against one batching engine;
/// its records equal the one-at-a-time run's, byte for byte (timings off).
#[test]
fn eval_concurrency_gives_the_records_of_a_sequential_run() {
    let Some(model) = crate::common::existing(crate::common::smollm2_gguf()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write_corpus(tmp.path());
    let dataset = tmp.path().join("dataset.jsonl");
    std::fs::write(&dataset, DATASET).unwrap();
    let run = |concurrency: &str| {
        let out = tmp.path().join(format!("run-{concurrency}"));
        succeed(
            tableseek()
                .args([
                    "eval",
                    "--method",
                    "tableseek",
                    "--steps",
                    "3",
                    "--no-timings",
                ])
                .args(["--max-new-tokens", "48", "--concurrency", concurrency])
                .args(["--kv-memory", "64MiB"])
                .arg("--dataset")
                .arg(&dataset)
                .arg("--corpus")
                .arg(&corpus)
                .arg("--model")
                .arg(&model)
                .arg("--out")
                .arg(&out),
        );
        read(&out.join(QUERIES_FILE))
    };
    let sequential = run("1");
    assert_eq!(sequential.lines().count(), 6);
    assert!(!sequential.contains("\"error\""), "{sequential}");
    assert_eq!(run("4"), sequential);
}

/// T-RAG through the evaluator: the record ranks the pool C* (and says whether the gold table
/// was in it), the one QA call reads the top V_final tables, and the prompt never names a file.
#[test]
fn trag_ranks_its_pool_and_answers_over_the_top_tables() {
    use tableseek::agent::SearchSpace;
    use tableseek::retrieve::trag::{TragIndex, TragSettings};
    let tmp = tempfile::tempdir().unwrap();
    let queries = queries(tmp.path());
    let space = MemorySpace::new(TABLES);
    let texts: Vec<String> = (0..space.len()).map(|i| space.full_text(i)).collect();
    let borrowed: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = WordsEncoder.embed_documents(&borrowed).unwrap();
    let settings = TragSettings {
        clusters: 2,
        typical: 2,
        v_final: 2,
        ..TragSettings::default()
    };
    let index = TragIndex::build(&texts, embeddings, settings).unwrap();
    let bare = Evaluator::new(Method::Trag, &space, space.len(), options()).unwrap();
    let err = bare
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap_err();
    assert!(err.to_string().contains("T-RAG"), "{err}");
    let evaluator = Evaluator::new(Method::Trag, &space, space.len(), options())
        .unwrap()
        .with_trag(&WordsEncoder, &index);
    let mut llm = FakeLlm::default();
    let record = evaluator.run_query(&mut llm, &queries[0]).unwrap();
    let pool = record.pool.clone().unwrap();
    assert_eq!(pool.union, record.ranking.len());
    assert_eq!(
        pool.gold_in_pool,
        record.ranking.iter().any(|t| t == "geo/capitals.csv")
    );
    assert!(record.tables_seen.len() <= 2);
    assert_eq!(
        record.tables_seen[..],
        record.ranking[..record.tables_seen.len()]
    );
    assert_eq!((record.cost.llm_calls, record.cost.encode_calls), (1, 1));
    let prompt = llm.prompts.last().unwrap();
    assert!(
        prompt.contains("<answer>") && !prompt.contains(".csv"),
        "{prompt}"
    );
    // The same query again gives the same record.
    let again = evaluator
        .run_query(&mut FakeLlm::default(), &queries[0])
        .unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&record).unwrap()
    );
}
