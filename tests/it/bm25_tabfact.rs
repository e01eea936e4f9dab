//! BM25 on TARGET-TabFact test-1k: documents are the raw CSV text of the 1,695 tables (id = file
//! name), queries the 1,000 `claim`s, gold the `gold_table` file name. Needs ../shared (or the
//! directory in `TABLESEEK_SHARED`, for checkouts such as git worktrees that sit elsewhere); skips
//! with a message when it is absent.
//!
//! Reference (shared/reference/README.md): rank_bm25 Okapi R@1 0.516 / R@2 0.580 / R@3 0.608;
//! bm25s Lucene with English stopwords 0.602 / 0.672 / 0.705.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Deserialize;
use tableseek::retrieve::bm25::{Bm25Builder, Bm25Index};

#[derive(Deserialize)]
struct Claim {
    claim: String,
    gold_table: String,
}

struct Benchmark {
    ids: Vec<String>,
    documents: Vec<String>,
    claims: Vec<Claim>,
}

fn tabfact_dir() -> Option<PathBuf> {
    let dir = crate::common::shared_dir().join("data/tabfact");
    if dir.join("test-1k.jsonl").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} not found (TabFact lives in ../shared)",
            dir.display()
        );
        None
    }
}

fn load(dir: &Path) -> Benchmark {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("tables"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    // File-name order, as the reference scripts listed the directory (sorted).
    paths.sort();
    let ids = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let documents = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let claims = std::fs::read_to_string(dir.join("test-1k.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    Benchmark {
        ids,
        documents,
        claims,
    }
}

/// R@1, R@2, R@3.
fn recall(bench: &Benchmark, index: &Bm25Index) -> [f64; 3] {
    let queries: Vec<&str> = bench.claims.iter().map(|c| c.claim.as_str()).collect();
    let results = index.search_batch(&queries, 3);
    let mut hits = [0usize; 3];
    for (claim, ranking) in bench.claims.iter().zip(&results) {
        let gold = bench.ids.iter().position(|id| *id == claim.gold_table);
        let gold = gold.unwrap_or_else(|| panic!("gold table {} not in corpus", claim.gold_table));
        if let Some(rank) = ranking.iter().position(|hit| hit.doc == gold) {
            for hit in &mut hits[rank..] {
                *hit += 1;
            }
        }
    }
    hits.map(|h| h as f64 / bench.claims.len() as f64)
}

/// Builds the index, runs the claims, prints recall (and timings, for the record only).
fn measure(bench: &Benchmark, name: &str, builder: Bm25Builder) -> [f64; 3] {
    let start = Instant::now();
    let index = builder.build(&bench.documents).unwrap();
    let built = start.elapsed();
    let r = recall(bench, &index);
    eprintln!(
        "BM25 {name}: R@1 {:.3} R@2 {:.3} R@3 {:.3} (index {built:.2?}, 1,000 queries {:.2?})",
        r[0],
        r[1],
        r[2],
        start.elapsed() - built
    );
    assert!(r[0] <= r[1] && r[1] <= r[2]);
    r
}

#[test]
fn bm25_recall_on_tabfact_test_1k() {
    let Some(dir) = tabfact_dir() else { return };
    let bench = load(&dir);
    assert_eq!((bench.documents.len(), bench.claims.len()), (1695, 1000));

    let okapi = measure(&bench, "Okapi", Bm25Builder::okapi());
    assert!(okapi[0] >= 0.50, "Okapi R@1 {} < 0.50", okapi[0]);
    // Okapi reproduces rank_bm25 exactly (same formula, tokens and summation order), so its
    // recall must be the reference's to the claim.
    assert_eq!(okapi.map(|r| (r * 1000.0).round()), [516.0, 580.0, 608.0]);

    let lucene = measure(
        &bench,
        "Lucene+stopwords",
        Bm25Builder::lucene().english_stopwords(true),
    );
    assert!(lucene[0] >= 0.58, "Lucene R@1 {} < 0.58", lucene[0]);
}
