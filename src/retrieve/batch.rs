//! Ranking a list of queries with one [`Ranker`] into JSON lines, one per query, with recall at
//! 1, 2 and 3 over the queries that name a gold table: what `tableseek retrieve` writes.

use std::io::Write;

use serde::Serialize;

use super::bm25::Hit;
use super::dense::DenseError;
use super::pipeline::Ranker;
use crate::corpus::Corpus;

/// One query to rank.
#[derive(Debug, Clone, Copy)]
pub struct BatchQuery<'q> {
    pub qid: &'q str,
    pub text: &'q str,
    /// The table recall tests for, when known.
    pub gold: Option<&'q str>,
}

/// Why ranking a batch stopped.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("query {qid}: {source}")]
    Rank { qid: String, source: DenseError },
    #[error("writing the rankings: {0}")]
    Write(#[from] std::io::Error),
    #[error("writing the rankings: {0}")]
    Json(#[from] serde_json::Error),
}

/// What a batch measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchSummary {
    pub queries: usize,
    /// Queries that named a gold table; recall is over these.
    pub with_gold: usize,
    /// Gold tables that are not in the corpus (counted as misses).
    pub unknown_gold: usize,
    /// Queries with the gold table within the first 1, 2, 3 hits.
    pub hits_at: [usize; 3],
    pub encode_ms: f64,
    pub rerank_ms: f64,
    /// Warnings of the rankings, each with its query's id.
    pub warnings: Vec<(String, String)>,
    /// Methods with a candidate pool (T-RAG's C*): queries whose gold table is in it, the
    /// pool sizes summed, and gold hits at 10, 20 and 50.
    pub pool: Option<PoolSummary>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolSummary {
    pub gold_in_pool: usize,
    pub size_sum: usize,
    pub hits_at_deep: [usize; 3],
}

/// The deeper cut-offs T-RAG reports.
pub const DEEP_CUTOFFS: [usize; 3] = [10, 20, 50];

impl BatchSummary {
    /// Recall at 1, 2, 3, when any query named a gold table.
    pub fn recall(&self) -> Option<[f64; 3]> {
        (self.with_gold > 0).then(|| self.hits_at.map(|h| h as f64 / self.with_gold as f64))
    }

    /// What `tableseek retrieve` prints: recall where gold is known, a warning for unknown gold
    /// tables, and with `timings` the encoder and reranker time per query.
    pub fn describe(&self, timings: bool) -> String {
        let mut lines = Vec::new();
        if let Some(r) = self.recall() {
            lines.push(format!(
                "R@1 {:.3}  R@2 {:.3}  R@3 {:.3}  ({} queries with a gold table)",
                r[0], r[1], r[2], self.with_gold
            ));
        }
        if let (Some(pool), true) = (&self.pool, self.with_gold > 0 && self.queries > 0) {
            let n = self.with_gold as f64;
            lines.push(format!(
                "R@10 {:.3}  R@20 {:.3}  R@50 {:.3}  gold in the pool {:.3}  mean pool {:.1} tables",
                pool.hits_at_deep[0] as f64 / n,
                pool.hits_at_deep[1] as f64 / n,
                pool.hits_at_deep[2] as f64 / n,
                pool.gold_in_pool as f64 / n,
                pool.size_sum as f64 / self.queries as f64
            ));
        }
        if self.unknown_gold > 0 {
            lines.push(format!(
                "warning: {} gold tables are not in the corpus (counted as misses)",
                self.unknown_gold
            ));
        }
        if timings && self.queries > 0 {
            let n = self.queries as f64;
            lines.push(format!(
                "ms per query: encode {:.1}, rerank {:.1} ({} queries)",
                self.encode_ms / n,
                self.rerank_ms / n,
                self.queries
            ));
        }
        lines.join("\n")
    }

    fn count(&mut self, corpus: &Corpus, gold: &str, hits: &[Hit]) {
        self.with_gold += 1;
        let Some(gold) = corpus.index_of(gold) else {
            self.unknown_gold += 1;
            return;
        };
        let rank = hits.iter().position(|hit| hit.doc == gold);
        if let Some(rank) = rank.filter(|&r| r < 3) {
            for hit in &mut self.hits_at[rank..] {
                *hit += 1;
            }
        }
        if let (Some(pool), Some(rank)) = (&mut self.pool, rank) {
            pool.gold_in_pool += 1;
            for (count, cutoff) in pool.hits_at_deep.iter_mut().zip(DEEP_CUTOFFS) {
                *count += usize::from(rank < cutoff);
            }
        }
    }
}

#[derive(Serialize)]
struct Line<'a> {
    qid: &'a str,
    ranking: Vec<Ranked<'a>>,
    /// Model forward passes spent on this query.
    calls: usize,
    ms: Millis,
    /// T-RAG: the chosen clusters' sizes per view and the size of their union.
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<PoolLine>,
}

#[derive(Serialize)]
struct PoolLine {
    views: [usize; 3],
    union: usize,
}

#[derive(Serialize)]
struct Ranked<'a> {
    table_id: &'a str,
    score: f64,
}

#[derive(Serialize)]
struct Millis {
    encode: f64,
    rerank: f64,
}

/// Ranks every query (at least 3 deep, for recall) and writes its first `top_k` hits to `out`
/// as `{"qid", "ranking": [{"table_id", "score"}], "calls", "ms": {"encode", "rerank"}}`.
/// `corpus` must be the one `ranker`'s indexes were built from.
pub fn rank_batch(
    ranker: &Ranker<'_, '_>,
    corpus: &Corpus,
    queries: &[BatchQuery<'_>],
    top_k: usize,
    out: &mut dyn Write,
) -> Result<BatchSummary, BatchError> {
    let depth = top_k.max(3);
    let document = |table: usize| corpus.text(table).to_string();
    let mut summary = BatchSummary {
        queries: queries.len(),
        ..BatchSummary::default()
    };
    for query in queries {
        let ranking = ranker
            .rank(query.text, depth, &document)
            .map_err(|source| BatchError::Rank {
                qid: query.qid.to_string(),
                source,
            })?;
        for warning in &ranking.warnings {
            tracing::warn!(qid = query.qid, "{warning}");
            summary
                .warnings
                .push((query.qid.to_string(), warning.clone()));
        }
        if ranking.coarse_views.is_some() {
            summary
                .pool
                .get_or_insert_with(PoolSummary::default)
                .size_sum += ranking.hits.len();
        }
        if let Some(gold) = query.gold {
            summary.count(corpus, gold, &ranking.hits);
        }
        summary.encode_ms += ranking.encode_ms;
        summary.rerank_ms += ranking.rerank_ms;
        let line = Line {
            qid: query.qid,
            ranking: ranking
                .hits
                .iter()
                .take(top_k)
                .map(|hit| Ranked {
                    table_id: corpus.id(hit.doc),
                    score: hit.score,
                })
                .collect(),
            calls: ranking.encode_calls + ranking.rerank_calls,
            pool: ranking.coarse_views.map(|views| PoolLine {
                views,
                union: ranking.hits.len(),
            }),
            ms: Millis {
                encode: ranking.encode_ms,
                rerank: ranking.rerank_ms,
            },
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(summary)
}
