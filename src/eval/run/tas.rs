//! The `tas` method: Table-as-Search's loop ([`crate::agent::tas`]) on the run's search space.
//! The record's ranking is TaS's own: the state table's rows as answer synthesis orders them,
//! then the first search's ranking, so R@1 reads the row TaS answers from first.

use super::{EvalError, Evaluator, QueryRecord};
use crate::agent::{Llm, SearchSpace, TaskType};
use crate::eval::dataset::EvalQuery;

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
        let trajectory = tas.run(llm, self.space, &query.query)?;
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
