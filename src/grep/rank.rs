//! Scoring all tables against a pattern set and ordering them.

use rayon::prelude::*;

use super::PatternSet;
use crate::corpus::Corpus;

/// One table's grep result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Index into the corpus.
    pub table: usize,
    /// Share of patterns that occur in the table, in `[0, 1]`; 0 when there are no patterns.
    pub score: f32,
    /// Indices into [`PatternSet::patterns`] of the patterns that occur, ascending.
    pub matched: Vec<usize>,
}

/// Every table of the corpus, by score descending; ties by corpus index ascending. The order is a
/// function of the corpus and the patterns alone, however rayon schedules the work.
pub fn rank(corpus: &Corpus, patterns: &PatternSet) -> Vec<Hit> {
    let total = patterns.len();
    let mut hits: Vec<Hit> = (0..corpus.len())
        .into_par_iter()
        .map(|table| {
            let matched = if total == 0 {
                Vec::new()
            } else {
                patterns.matches(corpus.text(table))
            };
            let score = if total == 0 {
                0.0
            } else {
                matched.len() as f32 / total as f32
            };
            Hit {
                table,
                score,
                matched,
            }
        })
        .collect();
    // Scores are exact ratios of small integers computed the same way, so equal counts compare equal.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.table.cmp(&b.table)));
    hits
}
