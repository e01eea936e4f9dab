//! The `tas` method: Table-as-Search's loop ([`crate::agent::tas`]) on the run's search space,
//! with the run's BM25 index and dense encoder as its text search tools.
//! The record's ranking is TaS's own: the state table's rows as answer synthesis orders them,
//! then the first expansion's fused ranking, so R@1 reads the row TaS answers from first.

use super::{EvalError, Evaluator, QueryRecord};
use crate::agent::tas::search::{SearchTool, TextSearch, TextTools};
use crate::agent::{Llm, SearchSpace, TaskType};
use crate::eval::dataset::EvalQuery;
use crate::retrieve::pipeline::Ranker;

/// A retrieval pipeline ranker as a TaS text tool.
struct PipelineTool<'r, 'a, 'b> {
    ranker: Ranker<'a, 'b>,
    qid: &'r str,
}

impl TextSearch for PipelineTool<'_, '_, '_> {
    fn search(&self, text: &str, depth: usize) -> Result<Vec<usize>, String> {
        // Text tools rank with no document reader: neither BM25 nor dense without a reranker
        // reads documents at query time.
        let ranking = self
            .ranker
            .rank(text, depth, &|_| String::new())
            .map_err(|e| e.to_string())?;
        for warning in &ranking.warnings {
            tracing::warn!(qid = %self.qid, "TaS search: {warning}");
        }
        // BM25 pads a short ranking with score-0 tables in corpus order (`Bm25Index::search`);
        // those match no query word, so they are no candidates (as in `CorpusSpace`'s BM25 pool).
        let keep_zero = !matches!(self.ranker, Ranker::Bm25(_));
        Ok(ranking
            .hits
            .into_iter()
            .filter(|hit| keep_zero || hit.score > 0.0)
            .map(|hit| hit.doc)
            .collect())
    }
}

impl<S: SearchSpace + ?Sized> Evaluator<'_, S> {
    pub(super) fn tas<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let tas = match query.task {
            TaskType::Tableqa => &self.tableqa_tas,
            TaskType::FactVerification => &self.fact_tas,
        };
        let config = tas.config();
        let bm25 = match (&self.bm25, config.uses(SearchTool::Bm25)) {
            (Some(index), true) => Some(PipelineTool {
                ranker: Ranker::Bm25(index),
                qid: &query.qid,
            }),
            (None, true) => return Err(EvalError::NotConfigured(self.method, "a BM25 index")),
            _ => None,
        };
        let dense = match (&self.dense, config.uses(SearchTool::Dense)) {
            (Some(setup), true) => Some(PipelineTool {
                ranker: Ranker::Dense {
                    encoder: setup.encoder,
                    index: setup.index,
                    rerank: None,
                },
                qid: &query.qid,
            }),
            (None, true) => {
                return Err(EvalError::NotConfigured(
                    self.method,
                    "an encoder and index (TaS's dense tool)",
                ))
            }
            _ => None,
        };
        let tools = TextTools {
            bm25: bm25.as_ref().map(|t| t as &dyn TextSearch),
            dense: dense.as_ref().map(|t| t as &dyn TextSearch),
        };
        let trajectory = tas.run_with(llm, self.space, tools, &query.query)?;
        let ranking: Option<Vec<String>> = trajectory.tas.as_ref().map(|t| {
            t.ranking
                .iter()
                .take(self.options.ranking_depth)
                .cloned()
                .collect()
        });
        let mut record = self.trajectory_record(query, trajectory);
        if let Some(ranking) = ranking {
            record.ranking = ranking;
        }
        Ok(record)
    }
}
