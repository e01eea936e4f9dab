//! One ranking of a query's tables for every non-agent method, used alike by `tableseek retrieve`
//! and by `eval`: BM25, dense, dense → LLM rerank, and hybrid (BM25 + dense fused).
//!
//! The rule where the two callers once differed: a reranker failure (a prompt it cannot take, a
//! model error) costs the query its reranking, not the run. The dense order stands, and the
//! failure is returned among the ranking's [`Ranking::warnings`], as are documents the reranker
//! had to cut to fit; each caller reports warnings its own way (the CLI and eval log them).

use std::sync::Mutex;
use std::time::Instant;

use super::bm25::{Bm25Index, Hit};
use super::dense::{DenseIndex, Result, TextEncoder};
use super::fusion::{fuse_two, FusionRule, FUSION_POOL};
use super::rerank::{reorder, Reranker};
use super::trag::TragIndex;

/// An LLM reranker over the first `depth` dense hits; behind a lock because concurrent
/// evaluation shares one.
pub struct Rerank<'a, 'r> {
    pub reranker: &'a Mutex<&'r mut Reranker>,
    pub depth: usize,
}

/// A ranking method with what it needs, borrowed from the caller (which owns the model files,
/// the index caches and the reranker).
pub enum Ranker<'a, 'r> {
    Bm25(&'a Bm25Index),
    Dense {
        encoder: &'a dyn TextEncoder,
        index: &'a DenseIndex,
        rerank: Option<Rerank<'a, 'r>>,
    },
    /// BM25 and dense, each [`FUSION_POOL`] deep, by reciprocal rank fusion with equal weights.
    Hybrid {
        bm25: &'a Bm25Index,
        encoder: &'a dyn TextEncoder,
        index: &'a DenseIndex,
    },
    /// T-RAG's coarse and fine stages over its own index (the encoder embeds the query the way
    /// the index embedded the tables' linearizations). Ranks the whole of C*, whatever `k`.
    Trag {
        encoder: &'a dyn TextEncoder,
        index: &'a TragIndex,
    },
}

/// One query's ranking and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    /// Best first; scores are the method's own (BM25, cosine, p(yes) for reranked hits, RRF).
    pub hits: Vec<Hit>,
    /// Query encodings (0 or 1).
    pub encode_calls: usize,
    /// Reranker forward passes.
    pub rerank_calls: usize,
    pub encode_ms: f64,
    pub rerank_ms: f64,
    /// What went wrong without stopping the ranking (see the module docs).
    pub warnings: Vec<String>,
    /// T-RAG: the size of the chosen cluster of each view; `hits` is their union C*.
    pub coarse_views: Option<[usize; 3]>,
}

impl Ranker<'_, '_> {
    /// The first `k` hits (at least a reranker's depth when reranking); `document` gives the text
    /// the reranker reads for a table.
    pub fn rank(
        &self,
        query: &str,
        k: usize,
        document: &dyn Fn(usize) -> String,
    ) -> Result<Ranking> {
        let k = k.max(1);
        match self {
            Ranker::Bm25(index) => Ok(Ranking {
                hits: index.search(query, k),
                ..Ranking::default()
            }),
            Ranker::Dense {
                encoder,
                index,
                rerank,
            } => {
                let started = Instant::now();
                let embedding = encoder.embed_query(query)?;
                let mut ranking = Ranking {
                    encode_calls: 1,
                    encode_ms: started.elapsed().as_secs_f64() * 1e3,
                    ..Ranking::default()
                };
                let depth = rerank.as_ref().map_or(0, |r| r.depth);
                ranking.hits = index.search(&embedding, k.max(depth))?;
                if let Some(rerank) = rerank {
                    rerank_head(rerank, query, document, &mut ranking);
                }
                Ok(ranking)
            }
            Ranker::Hybrid {
                bm25,
                encoder,
                index,
            } => {
                let started = Instant::now();
                let embedding = encoder.embed_query(query)?;
                let encode_ms = started.elapsed().as_secs_f64() * 1e3;
                let pool = FUSION_POOL.max(k);
                let semantic: Vec<(usize, f64)> = index
                    .search(&embedding, pool)?
                    .into_iter()
                    .map(|hit| (hit.doc, hit.score))
                    .collect();
                let lexical: Vec<(usize, f64)> = bm25
                    .search(query, pool)
                    .into_iter()
                    .filter(|hit| hit.score > 0.0)
                    .map(|hit| (hit.doc, hit.score))
                    .collect();
                let hits = fuse_two(FusionRule::default(), &lexical, &semantic)
                    .into_iter()
                    .take(k)
                    .map(|fused| Hit {
                        doc: fused.item,
                        score: fused.score,
                    })
                    .collect();
                Ok(Ranking {
                    hits,
                    encode_calls: 1,
                    encode_ms,
                    ..Ranking::default()
                })
            }
            Ranker::Trag { encoder, index } => {
                let started = Instant::now();
                let embedding = encoder.embed_query(query)?;
                let encode_ms = started.elapsed().as_secs_f64() * 1e3;
                let trag = index.search(&embedding);
                Ok(Ranking {
                    hits: trag
                        .hits
                        .into_iter()
                        .map(|(doc, score)| Hit { doc, score })
                        .collect(),
                    encode_calls: 1,
                    encode_ms,
                    coarse_views: Some(trag.view_sizes),
                    ..Ranking::default()
                })
            }
        }
    }
}

/// Reorders the first `rerank.depth` hits by p(yes); on failure leaves them and says why.
fn rerank_head(
    rerank: &Rerank<'_, '_>,
    query: &str,
    document: &dyn Fn(usize) -> String,
    ranking: &mut Ranking,
) {
    let started = Instant::now();
    let head = rerank.depth.min(ranking.hits.len());
    let docs: Vec<usize> = ranking.hits[..head].iter().map(|h| h.doc).collect();
    let texts: Vec<String> = docs.iter().map(|&d| document(d)).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut reranker = match rerank.reranker.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    match reranker.score(query, &texts) {
        Ok(scored) => {
            for (slot, (doc, score)) in reorder(&docs, &scored.scores).into_iter().enumerate() {
                ranking.hits[slot] = Hit { doc, score };
            }
            ranking.rerank_calls = scored.calls;
            if scored.truncated > 0 {
                ranking.warnings.push(format!(
                    "{} of {head} tables cut to fit the reranker's maximum length",
                    scored.truncated
                ));
            }
        }
        Err(error) => ranking
            .warnings
            .push(format!("rerank failed ({error}); dense order kept")),
    }
    ranking.rerank_ms = started.elapsed().as_secs_f64() * 1e3;
}
