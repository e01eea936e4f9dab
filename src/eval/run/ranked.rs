//! The methods that rank tables without the agent (`bm25`, `dense`, `rerank`, `hybrid`): one
//! ranking from `retrieve::pipeline`, the same code `tableseek retrieve` runs, then baseline QA on
//! the top table.

use std::time::Instant;

use super::{EvalError, Evaluator, Method, QueryRecord};
use crate::agent::{Llm, SearchSpace};
use crate::eval::dataset::EvalQuery;
use crate::retrieve::pipeline::{Ranker, Rerank};

impl<'a, S: SearchSpace + ?Sized> Evaluator<'a, S> {
    pub(super) fn ranked<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let ranker = self.ranker()?;
        let started = Instant::now();
        let document = |table: usize| self.space.full_text(table);
        let ranking = ranker.rank(&query.query, self.options.ranking_depth, &document)?;
        for warning in &ranking.warnings {
            tracing::warn!(qid = %query.qid, "{warning}");
        }
        let retrieval_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut record = self.qa_on_ranking(llm, query, &ranking.hits, retrieval_ms)?;
        record.cost.encode_calls = ranking.encode_calls;
        record.cost.rerank_calls = ranking.rerank_calls;
        record.cost.ms.encode = ranking.encode_ms;
        record.cost.ms.rerank = ranking.rerank_ms;
        Ok(record)
    }

    fn ranker(&self) -> Result<Ranker<'_, 'a>, EvalError> {
        let missing = |what| EvalError::NotConfigured(self.method, what);
        let dense = || self.dense.as_ref().ok_or(missing("an encoder and index"));
        let bm25 = || self.bm25.as_ref().ok_or(missing("a BM25 index"));
        Ok(match self.method {
            Method::Bm25 => Ranker::Bm25(bm25()?),
            Method::Dense | Method::Rerank => {
                let setup = dense()?;
                let rerank = match (self.method, &setup.reranker) {
                    (Method::Rerank, None) => return Err(missing("a reranker")),
                    (Method::Rerank, Some(reranker)) => Some(Rerank {
                        reranker,
                        depth: self.options.rerank_depth.max(1),
                    }),
                    _ => None,
                };
                Ranker::Dense {
                    encoder: setup.encoder,
                    index: setup.index,
                    rerank,
                }
            }
            Method::Hybrid => {
                let setup = dense()?;
                Ranker::Hybrid {
                    bm25: bm25()?,
                    encoder: setup.encoder,
                    index: setup.index,
                }
            }
            other => return Err(EvalError::NotConfigured(other, "a ranking of its own")),
        })
    }
}
