//! The three pool rankings of the fusion examples (pattern share, BM25 over the query and the
//! patterns, MiniLM dense over the query) and the min-max blend that fuses them.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use tableseek::agent::{Candidates, CorpusSpace, SearchSpace};
use tableseek::corpus::Corpus;
use tableseek::retrieve::fusion::min_max_scaled;

/// A dense ranking as `retrieve` writes it: table ids and cosines, best first.
pub type DenseRanking = Vec<(String, f64)>;

/// `tableseek retrieve --method dense` output, by query id.
pub fn dense_rankings(path: &Path) -> Result<BTreeMap<String, DenseRanking>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)?;
        let qid = value["qid"].as_str().context("qid")?.to_string();
        let ranking = value["ranking"]
            .as_array()
            .context("ranking")?
            .iter()
            .filter_map(|hit| {
                Some((
                    hit["table_id"].as_str()?.to_string(),
                    hit["score"].as_f64()?,
                ))
            })
            .collect();
        out.insert(qid, ranking);
    }
    Ok(out)
}

/// The grep and BM25 spaces of one corpus, as `CorpusSpace` ranks them.
pub struct Spaces<'c> {
    corpus: &'c Corpus,
    grep: CorpusSpace<'c>,
    bm25: CorpusSpace<'c>,
}

impl<'c> Spaces<'c> {
    pub fn new(corpus: &'c Corpus) -> Result<Self> {
        Ok(Self {
            corpus,
            grep: CorpusSpace::new(corpus),
            bm25: CorpusSpace::new(corpus).candidates(Candidates::Bm25)?,
        })
    }

    /// Pattern share, BM25 and dense, each as (table index, score), at most 100 deep.
    pub fn sides(
        &self,
        query: &str,
        patterns: &[String],
        dense: &DenseRanking,
    ) -> [Vec<(usize, f64)>; 3] {
        let scored = |space: &CorpusSpace<'_>| -> Vec<(usize, f64)> {
            space
                .rank(query, patterns)
                .into_iter()
                .take(100)
                .map(|r| (r.table, r.score))
                .collect()
        };
        let dense = dense
            .iter()
            .filter_map(|(id, s)| Some((self.corpus.index_of(id)?, *s)))
            .collect();
        [scored(&self.grep), scored(&self.bm25), dense]
    }
}

/// Each side's scores min-max scaled over its own list, weighted and summed; best first, ties
/// by table index.
pub fn blend(sides: &[Vec<(usize, f64)>; 3], weights: [f64; 3]) -> Vec<(usize, f64)> {
    let mut score: BTreeMap<usize, f64> = BTreeMap::new();
    for (side, weight) in sides.iter().zip(weights) {
        if weight > 0.0 {
            let scores: Vec<f64> = side.iter().map(|x| x.1).collect();
            for (&(item, _), s) in side.iter().zip(min_max_scaled(&scores)) {
                *score.entry(item).or_default() += weight * s;
            }
        }
    }
    let mut order: Vec<(usize, f64)> = score.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    order
}
