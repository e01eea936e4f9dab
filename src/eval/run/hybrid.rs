//! `--method hybrid`: BM25 and dense retrieval joined by reciprocal rank fusion, the strongest
//! ranking here with no LLM in it, so the LLM's share of TableSeek's gain shows on its own.

use std::time::Instant;

use super::{EvalError, Evaluator, QueryRecord};
use crate::agent::{Llm, SearchSpace};
use crate::eval::dataset::EvalQuery;
use crate::retrieve::bm25::Hit;
use crate::retrieve::fusion::{reciprocal_rank_fusion, RankedList, DEFAULT_RRF_K, FUSION_POOL};

impl<S: SearchSpace + ?Sized> Evaluator<'_, S> {
    pub(super) fn hybrid<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let setup = self.dense.as_ref().ok_or(EvalError::NotConfigured(
            self.method,
            "an encoder and index",
        ))?;
        let bm25 = self
            .bm25
            .as_ref()
            .ok_or(EvalError::NotConfigured(self.method, "a BM25 index"))?;
        let started = Instant::now();
        let embedding = setup.encoder.embed_query(&query.query)?;
        let encode_ms = started.elapsed().as_secs_f64() * 1e3;
        let pool = FUSION_POOL.max(self.options.ranking_depth);
        let dense: Vec<usize> = setup
            .index
            .search(&embedding, pool)?
            .into_iter()
            .map(|hit| hit.doc)
            .collect();
        let lexical: Vec<usize> = bm25
            .search(&query.query, pool)
            .into_iter()
            .filter(|hit| hit.score > 0.0)
            .map(|hit| hit.doc)
            .collect();
        let lists = [
            RankedList {
                items: &lexical,
                weight: 1.0,
            },
            RankedList {
                items: &dense,
                weight: 1.0,
            },
        ];
        let hits: Vec<Hit> = reciprocal_rank_fusion(&lists, DEFAULT_RRF_K)
            .into_iter()
            .map(|fused| Hit {
                doc: fused.item,
                score: fused.score,
            })
            .collect();
        let retrieval_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut record = self.qa_on_ranking(llm, query, &hits, retrieval_ms)?;
        record.cost.encode_calls = 1;
        record.cost.ms.encode = encode_ms;
        Ok(record)
    }
}
