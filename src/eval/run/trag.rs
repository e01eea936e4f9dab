//! The `trag` method: T-RAG's ranking of its pool C* (`retrieve::pipeline`, as `tableseek
//! retrieve --method trag`), then one graph-aware QA call over the top V_final tables with the
//! edge weights among them (`agent::trag_qa`). The record's ranking is the whole of C*, so R@k
//! reads T-RAG's misses (tables outside C*) as the spec says, and `pool` keeps the coarse stage.

use std::time::Instant;

use super::{EvalError, Evaluator, PoolRecord, QueryRecord};
use crate::agent::trag_qa::trag_qa;
use crate::agent::{Llm, SearchSpace};
use crate::eval::dataset::EvalQuery;
use crate::retrieve::pipeline::Ranker;

impl<S: SearchSpace + ?Sized> Evaluator<'_, S> {
    pub(super) fn trag<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let setup = self.trag.as_ref().ok_or(EvalError::NotConfigured(
            self.method,
            "an encoder and a T-RAG index",
        ))?;
        let ranker = Ranker::Trag {
            encoder: setup.encoder,
            index: setup.index,
        };
        let started = Instant::now();
        let ranking = ranker.rank(&query.query, 1, &|table| self.space.full_text(table))?;
        let retrieval_ms = started.elapsed().as_secs_f64() * 1e3;
        let settings = setup.index.settings();
        let shown: Vec<usize> = ranking
            .hits
            .iter()
            .take(settings.v_final.max(1))
            .map(|hit| hit.doc)
            .collect();
        let mut edges = Vec::new();
        for (a, &ta) in shown.iter().enumerate() {
            for (b, &tb) in shown.iter().enumerate().skip(a + 1) {
                let weight = setup.index.similarity(ta, tb);
                if weight >= settings.tau {
                    edges.push((a, b, weight));
                }
            }
        }
        let texts: Vec<String> = shown.iter().map(|&t| self.space.full_text(t)).collect();
        let (outcome, response) = trag_qa(
            llm,
            query.task,
            &query.query,
            &texts,
            &edges,
            self.options.qa_max_new_tokens,
        )?;
        let id = |t: usize| self.space.table_id(t).to_string();
        let ranking_ids: Vec<String> = ranking.hits.iter().map(|hit| id(hit.doc)).collect();
        let gold_in_pool = query
            .gold_tables
            .iter()
            .any(|g| ranking_ids.iter().any(|r| r == g));
        let shown_ids = shown.iter().map(|&t| id(t)).collect();
        let mut record = self.one_call_record(
            query,
            outcome,
            response,
            shown_ids,
            ranking_ids,
            retrieval_ms,
        );
        record.pool = Some(PoolRecord {
            views: ranking.coarse_views.unwrap_or_default(),
            union: record.ranking.len(),
            gold_in_pool,
        });
        record.cost.encode_calls = ranking.encode_calls;
        record.cost.ms.encode = ranking.encode_ms;
        Ok(record)
    }
}
