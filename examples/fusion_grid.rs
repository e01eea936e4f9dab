//! Chooses the fusion rule of `--candidates hybrid` without running the model again: for each
//! record of a TableSeek run directory, the patterns its first call wrote are ranked by the grep
//! stage and BM25 as `CorpusSpace` does, and every rule of a grid is scored by R@1 and R@3 of the
//! pool's head. With the default model the refine step selects the pool's first table (see
//! `results/hybrid/README.md`), so the head's recall is what the method's R@1 will be.
//!
//! ```text
//! cargo run --release --example fusion_grid -- CORPUS_DIR RUN_DIR [CORPUS_DIR RUN_DIR ...]
//! ```
//! Run it on tuning queries disjoint from the ones the method is reported on.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tableseek::agent::{Candidates, CorpusSpace, SearchSpace};
use tableseek::corpus::{Corpus, LoadOptions};
use tableseek::retrieve::fusion::{FusionRule, DEFAULT_RRF_K};

const BM25_WEIGHTS: [f64; 9] = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 1e6];

fn rules() -> Vec<(String, FusionRule)> {
    let mut rules = Vec::new();
    for k in [DEFAULT_RRF_K, 10.0] {
        for w in BM25_WEIGHTS {
            rules.push((
                format!("rrf k={k} bm25 w={w}"),
                FusionRule::Rrf {
                    k,
                    weights: [1.0, w],
                },
            ));
        }
    }
    for w in BM25_WEIGHTS {
        rules.push((
            format!("blend bm25 w={w}"),
            FusionRule::Blend { weights: [1.0, w] },
        ));
    }
    rules
}

#[path = "shared/first_calls.rs"]
mod first_calls;
use first_calls::cases;

fn main() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() || !args.len().is_multiple_of(2) {
        bail!("usage: fusion_grid CORPUS_DIR RUN_DIR [CORPUS_DIR RUN_DIR ...]");
    }
    let rules = rules();
    // rule -> per set (R@1, R@3)
    let mut table: Vec<Vec<(f64, f64)>> = vec![Vec::new(); rules.len()];
    let mut set_names = Vec::new();
    for pair in args.chunks(2) {
        let (corpus, _) = Corpus::load(&pair[0], &LoadOptions::default())
            .with_context(|| format!("loading {}", pair[0].display()))?;
        let cases = cases(&pair[1])?;
        set_names.push(format!("{} ({})", pair[1].display(), cases.len()));
        let mut space = Some(CorpusSpace::new(&corpus).candidates(Candidates::Hybrid)?);
        for (row, (_, rule)) in rules.iter().enumerate() {
            let current = space.take().context("space")?.hybrid_fusion(*rule);
            let (mut at1, mut at3) = (0usize, 0usize);
            for case in &cases {
                let ranking = current.rank(&case.query, &case.patterns);
                let head: Vec<&str> = ranking
                    .iter()
                    .take(3)
                    .map(|r| current.table_id(r.table))
                    .collect();
                let (one, three) = case.hits(&head);
                at1 += one;
                at3 += three;
            }
            let n = cases.len().max(1) as f64;
            table[row].push((at1 as f64 / n, at3 as f64 / n));
            space = Some(current);
        }
    }
    for (i, name) in set_names.iter().enumerate() {
        println!("set {i}: {name}");
    }
    for ((name, _), sets) in rules.iter().zip(&table) {
        let cells: Vec<String> = sets
            .iter()
            .map(|(a, b)| format!("{a:.3} / {b:.3}"))
            .collect();
        let mean = sets.iter().map(|(a, _)| a).sum::<f64>() / sets.len() as f64;
        println!("{name:<28} {}  mean R@1 {mean:.3}", cells.join("   "));
    }
    Ok(())
}
