//! Would a third ranking help `--candidates hybrid`? For each record of a TableSeek run
//! directory, the patterns of its first call are ranked by the grep stage and by BM25 (as
//! `CorpusSpace` does), a dense ranking of the same query is read from a `tableseek retrieve
//! --method dense` output, and every rule of a grid of three-way fusions is scored by R@1 and R@3
//! of the pool's head (the refine step of the default model selects the head: see
//! `examples/fusion_grid.rs`).
//!
//! ```text
//! cargo run --release --example pool_fusion3 -- CORPUS_DIR RUN_DIR DENSE.jsonl [CORPUS_DIR RUN_DIR DENSE.jsonl ...]
//! ```
//! Run it on tuning queries only.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tableseek::corpus::{Corpus, LoadOptions};
use tableseek::retrieve::fusion::{reciprocal_rank_fusion, RankedList, DEFAULT_RRF_K};

const WEIGHTS: [f64; 5] = [0.0, 0.5, 1.0, 2.0, 4.0];

#[derive(Clone, Copy)]
enum Rule {
    Rrf([f64; 3]),
    /// Each side's scores min-max scaled over its own list, then weighted and summed.
    Blend([f64; 3]),
}

fn rules() -> Vec<(String, Rule)> {
    let mut rules = Vec::new();
    for wb in WEIGHTS {
        for wd in WEIGHTS {
            rules.push((format!("rrf 1/{wb}/{wd}"), Rule::Rrf([1.0, wb, wd])));
            rules.push((format!("blend 1/{wb}/{wd}"), Rule::Blend([1.0, wb, wd])));
        }
    }
    rules.push(("dense alone".into(), Rule::Rrf([0.0, 0.0, 1.0])));
    rules.push(("bm25 alone".into(), Rule::Rrf([0.0, 1.0, 0.0])));
    rules
}

#[path = "shared/first_calls.rs"]
mod first_calls;
use first_calls::Case;
#[path = "shared/three_way.rs"]
mod three_way;
use three_way::{blend, dense_rankings, DenseRanking, Spaces};

fn cases(run: &Path, dense: &Path) -> Result<Vec<(Case, DenseRanking)>> {
    let dense = dense_rankings(dense)?;
    Ok(first_calls::cases(run)?
        .into_iter()
        .map(|case| {
            let ranking = dense.get(&case.qid).cloned().unwrap_or_default();
            (case, ranking)
        })
        .collect())
}

fn fuse(rule: Rule, sides: &[Vec<(usize, f64)>; 3]) -> Vec<usize> {
    match rule {
        Rule::Rrf(weights) => {
            let items: Vec<Vec<usize>> = sides
                .iter()
                .map(|s| s.iter().map(|x| x.0).collect())
                .collect();
            let lists: Vec<RankedList<'_>> = items
                .iter()
                .zip(weights)
                .filter(|(_, w)| *w > 0.0)
                .map(|(items, weight)| RankedList { items, weight })
                .collect();
            reciprocal_rank_fusion(&lists, DEFAULT_RRF_K)
                .into_iter()
                .map(|f| f.item)
                .collect()
        }
        Rule::Blend(weights) => blend(sides, weights).into_iter().map(|x| x.0).collect(),
    }
}

fn main() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() || !args.len().is_multiple_of(3) {
        bail!("usage: pool_fusion3 CORPUS_DIR RUN_DIR DENSE.jsonl [...]");
    }
    let rules = rules();
    let mut table: Vec<Vec<(f64, f64)>> = vec![Vec::new(); rules.len()];
    for set in args.chunks(3) {
        let (corpus, _) = Corpus::load(&set[0], &LoadOptions::default())
            .with_context(|| format!("loading {}", set[0].display()))?;
        let cases = cases(&set[1], &set[2])?;
        println!("set: {} ({})", set[1].display(), cases.len());
        let spaces = Spaces::new(&corpus)?;
        let sides: Vec<[Vec<(usize, f64)>; 3]> = cases
            .iter()
            .map(|(case, dense)| spaces.sides(&case.query, &case.patterns, dense))
            .collect();
        for (row, (_, rule)) in rules.iter().enumerate() {
            let (mut at1, mut at3) = (0usize, 0usize);
            for ((case, _), sides) in cases.iter().zip(&sides) {
                let head: Vec<&str> = fuse(*rule, sides)
                    .into_iter()
                    .take(3)
                    .map(|t| corpus.id(t))
                    .collect();
                let (one, three) = case.hits(&head);
                at1 += one;
                at3 += three;
            }
            let n = cases.len().max(1) as f64;
            table[row].push((at1 as f64 / n, at3 as f64 / n));
        }
    }
    let mut rows: Vec<(f64, f64, String)> = rules
        .iter()
        .zip(&table)
        .map(|((name, _), sets)| {
            let cells: Vec<String> = sets
                .iter()
                .map(|(a, b)| format!("{a:.3} / {b:.3}"))
                .collect();
            let n = sets.len() as f64;
            let r1 = sets.iter().map(|(a, _)| a).sum::<f64>() / n;
            let r3 = sets.iter().map(|(_, b)| b).sum::<f64>() / n;
            (
                r1,
                r3,
                format!(
                    "{name:<20} {}  mean R@1 {r1:.3} R@3 {r3:.3}",
                    cells.join("   ")
                ),
            )
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    for (_, _, line) in rows {
        println!("{line}");
    }
    Ok(())
}
