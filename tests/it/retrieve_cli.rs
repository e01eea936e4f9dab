//! `tableseek retrieve` end to end on a small corpus: BM25 (no model needed) output format, recall
//! on stderr, determinism, clear errors for bad input; and, when the models are there, MiniLM +
//! SmolLM2 reranking.

use std::path::Path;
use std::process::{Command, Output};

fn corpus(dir: &Path) {
    let tables = dir.join("tables");
    std::fs::create_dir_all(&tables).unwrap();
    for (name, text) in [
        ("a.csv", "team,points\nessendon,120\ncarlton,98\n"),
        ("b.csv", "rider,grid\nkazuto sakata,4\nvalentino rossi,1\n"),
        (
            "c.csv",
            "country,capital\naustralia,canberra\nfrance,paris\n",
        ),
    ] {
        std::fs::write(tables.join(name), text).unwrap();
    }
}

fn retrieve(dir: &Path, queries: &str, extra: &[&str]) -> Output {
    let path = dir.join("queries.jsonl");
    std::fs::write(&path, queries).unwrap();
    Command::new(env!("CARGO_BIN_EXE_tableseek"))
        .arg("retrieve")
        .args(["--corpus", dir.join("tables").to_str().unwrap()])
        .args(["--queries", path.to_str().unwrap()])
        .args(["--out", dir.join("run.jsonl").to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

const QUERIES: &str = concat!(
    r#"{"qid": "q1", "query": "capital of australia", "gold_table": "c.csv"}"#,
    "\n",
    r#"{"qid": 2, "claim": "kazuto sakata be on grid 4", "gold_table": "a.csv"}"#,
    "\n\n",
    r#"{"qid": "q3", "question": "essendon points", "task": "qa"}"#,
    "\n",
);

#[test]
fn bm25_run_lines_and_recall() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    for variant in ["okapi", "lucene"] {
        let out = retrieve(
            dir.path(),
            QUERIES,
            &["--method", "bm25", "--bm25", variant, "--top-k", "2"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        // Two queries name a gold table; the first finds it at rank 1, the second's is elsewhere.
        assert!(stderr.contains("R@1 0.500"), "{stderr}");
        assert!(stderr.contains("(2 queries with a gold table)"), "{stderr}");

        let run = std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = run
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["qid"], "q1");
        // One reader for `retrieve` and `eval` (`eval::load_ranking_queries`): an integer qid
        // is kept as its text.
        assert_eq!(lines[1]["qid"], "2");
        assert_eq!(lines[0]["ranking"][0]["table_id"], "c.csv");
        assert_eq!(lines[1]["ranking"][0]["table_id"], "b.csv");
        assert_eq!(lines[2]["ranking"][0]["table_id"], "a.csv");
        assert_eq!(lines[0]["ranking"].as_array().unwrap().len(), 2);
        assert_eq!(lines[0]["calls"], 0);
        assert!(lines[0]["ms"]["encode"].is_number() && lines[0]["ms"]["rerank"].is_number());

        // BM25 lines carry no timings that vary, so a second run is byte-identical.
        retrieve(
            dir.path(),
            QUERIES,
            &["--method", "bm25", "--bm25", variant, "--top-k", "2"],
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap(),
            run
        );
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());

    let out = retrieve(
        dir.path(),
        r#"{"qid": "x", "text": "no query here"}"#,
        &["--method", "bm25"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("queries.jsonl:1") && stderr.contains("claim"),
        "{stderr}"
    );

    let out = retrieve(dir.path(), "{not json\n", &["--method", "bm25"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("queries.jsonl:1"));

    let out = retrieve(
        dir.path(),
        QUERIES,
        &["--method", "rerank", "--rerank-model", "no/such/model.gguf"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/model.gguf"));
}

use crate::common::models_dir;

/// MiniLM's dense top 3 reordered by SmolLM2 as a reranker.
#[test]
fn rerank_reorders_the_dense_head() {
    let models = models_dir();
    let (minilm, smollm2) = (
        models.join("all-MiniLM-L6-v2"),
        models.join("smollm2-135m-instruct-q4_1.gguf"),
    );
    if !minilm.is_dir() || !smollm2.is_file() {
        eprintln!("skipping: models not found in {}", models.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let common = [
        "--embed-model",
        minilm.to_str().unwrap(),
        "--no-cache",
        "--top-k",
        "3",
    ];
    let lines = |out: &Output| -> Vec<serde_json::Value> {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(dir.path().join("run.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let dense = lines(&retrieve(
        dir.path(),
        QUERIES,
        &[&["--method", "dense"], &common[..]].concat(),
    ));
    let out = retrieve(
        dir.path(),
        QUERIES,
        &[
            &["--method", "rerank", "--rerank-depth", "3"],
            &["--rerank-model", smollm2.to_str().unwrap()][..],
            &common[..],
        ]
        .concat(),
    );
    let reranked = lines(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("rerank"));
    assert_eq!(reranked.len(), 3);
    for (d, r) in dense.iter().zip(&reranked) {
        assert_eq!(d["qid"], r["qid"]);
        // One query encoding plus one reranker pass per candidate.
        assert_eq!(r["calls"], 4);
        assert!(r["ms"]["rerank"].as_f64().unwrap() > 0.0);
        let ids = |line: &serde_json::Value| {
            let mut ids: Vec<String> = line["ranking"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["table_id"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(d), ids(r));
        let scores: Vec<f64> = r["ranking"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["score"].as_f64().unwrap())
            .collect();
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    }
}

/// T-RAG end to end with MiniLM: every line carries its pool (the chosen clusters per view and
/// their union), the ranking is the pool, stderr adds the deep recalls and the gold-in-pool share,
/// and a second run (from the caches) writes the same rankings.
#[test]
fn trag_ranks_its_pool_and_reports_it() {
    let minilm = models_dir().join("all-MiniLM-L6-v2");
    if !minilm.is_dir() {
        eprintln!("skipping: {} not found", minilm.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let cache = dir.path().join("cache");
    let args = [
        "--method",
        "trag",
        "--trag-clusters",
        "2",
        "--top-k",
        "3",
        "--embed-model",
        minilm.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let run = || {
        let out = retrieve(dir.path(), QUERIES, &args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("run.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (stderr, lines)
    };
    let (stderr, first) = run();
    assert!(stderr.contains("gold in the pool"), "{stderr}");
    assert_eq!(first.len(), 3);
    let rankings = |lines: &[serde_json::Value]| -> Vec<serde_json::Value> {
        lines.iter().map(|l| l["ranking"].clone()).collect()
    };
    for line in &first {
        let union = line["pool"]["union"].as_u64().unwrap() as usize;
        let views = line["pool"]["views"].as_array().unwrap();
        assert_eq!(views.len(), 3);
        let largest = views
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .max()
            .unwrap();
        assert!((largest..=3).contains(&union), "{line}");
        assert_eq!(line["ranking"].as_array().unwrap().len(), union.min(3));
    }
    assert!(std::fs::read_dir(&cache).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("trag-")));
    let (_, second) = run();
    assert_eq!(rankings(&second), rankings(&first));
}
