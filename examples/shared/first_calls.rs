//! What the pool-fusion examples read from a TableSeek run directory: each record's query, gold
//! tables, and the patterns its first call wrote.

use std::path::Path;

use anyhow::{bail, Context, Result};
use tableseek::agent::Action;
use tableseek::eval::read_records;

pub struct Case {
    // fusion_grid reads records in order; only pool_fusion3 joins another file by qid.
    #[allow(dead_code)]
    pub qid: String,
    pub query: String,
    pub patterns: Vec<String>,
    pub gold: Vec<String>,
}

pub fn cases(run: &Path) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for record in read_records(run).with_context(|| format!("reading {}", run.display()))? {
        let Some(trajectory) = record.trajectory else {
            bail!("{}: record {} has no trajectory", run.display(), record.qid)
        };
        let patterns = trajectory.calls.iter().find_map(|call| match &call.action {
            Action::Patterns { patterns, .. } => Some(patterns.clone()),
            _ => None,
        });
        cases.push(Case {
            qid: record.qid.clone(),
            query: trajectory.query.clone(),
            patterns: patterns.unwrap_or_default(),
            gold: record.gold.tables.clone(),
        });
    }
    Ok(cases)
}

impl Case {
    /// Whether a gold table is the first of `head`, and among its first 3.
    pub fn hits(&self, head: &[&str]) -> (usize, usize) {
        let hit = |n: usize| {
            head.iter()
                .take(n)
                .any(|id| self.gold.iter().any(|g| g == id))
        };
        (usize::from(hit(1)), usize::from(hit(3)))
    }
}
