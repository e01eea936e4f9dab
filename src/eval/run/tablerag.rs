//! `--method tablerag`: the TableRAG loop over the evaluator's chunk index, recorded in the
//! agent's trajectory format so `report` and `compare` read it unchanged.

use super::{EvalError, Evaluator};
use crate::agent::tablerag::{self, ChunkHit, ChunkSearch, TableRagConfig};
use crate::agent::{Llm, SearchSpace};
use crate::eval::dataset::EvalQuery;
use crate::eval::run::{ChunkSetup, QueryRecord};

impl ChunkSearch for ChunkSetup<'_> {
    fn search(&self, text: &str, n: usize) -> Result<Vec<ChunkHit>, String> {
        let hits = self
            .index
            .search_text(self.encoder, text, n)
            .map_err(|e| e.to_string())?;
        Ok(hits
            .into_iter()
            .filter_map(|hit| {
                self.chunks.get(hit.doc).map(|chunk| ChunkHit {
                    chunk: hit.doc,
                    table: chunk.table,
                    score: hit.score,
                })
            })
            .collect())
    }

    fn chunk_text(&self, chunk: usize) -> &str {
        self.chunks.get(chunk).map_or("", |c| c.text.as_str())
    }
}

impl<S: SearchSpace + ?Sized> Evaluator<'_, S> {
    pub(super) fn tablerag<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let chunks = self
            .chunks
            .as_ref()
            .ok_or(EvalError::NotConfigured(self.method, "a chunk index"))?;
        let config = TableRagConfig {
            task: query.task,
            ..self.options.tablerag.clone()
        };
        let trajectory = tablerag::run(llm, self.space, chunks, &config, &query.query)?;
        Ok(self.trajectory_record(query, trajectory))
    }
}
