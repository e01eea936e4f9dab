//! Can the model order refine's pool better than the pool's own ranking, when it is asked to
//! score rather than to pick? The default model's refine step selects the first candidate in
//! every query (the hybrid runs of `results/hybrid`), so a generated selection adds nothing.
//! This scores each of the pool's first candidates, from the preview refine shows, two ways:
//! - query likelihood, log p(query | preview): the model reads the preview, then the query
//!   (UPR, Sachan et al. 2022); the query is the same for every candidate of one query, so the
//!   sums compare without normalisation;
//! - with `--judge`, p(yes) of the pointwise yes/no judge (`retrieve::rerank`'s Qwen3-Reranker
//!   format).
//!
//! ```text
//! cargo run --release --example pool_likelihood -- CORPUS_DIR RUN_DIR MODEL OUT.jsonl \
//!     [--depth 5] [--threads N] [--dense DENSE.jsonl] [--judge]
//! ```
//! The pool is `--candidates hybrid`'s, or with `--dense` the three-way blend that
//! `examples/pool_fusion3.rs` chose (pattern share 1, BM25 2, dense 0.5). Writes one line per
//! record: gold tables and, per candidate, the pool score and the model's scores. Run it on
//! tuning queries to choose a rule.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, D};
use tableseek::agent::{Candidates, CorpusSpace, Evidence, SearchSpace};
use tableseek::corpus::{Corpus, LoadOptions as CorpusLoad};
use tableseek::engine::{
    load_tokenizer, DeviceMap, LoadOptions, Model, ModelSpec, QuantizedWeights,
};
use tableseek::eval::read_records;
use tableseek::eval::stats::{paired_bootstrap, wilcoxon_signed_rank, BootstrapOptions};
use tableseek::retrieve::fusion::min_max_blend;
use tableseek::retrieve::rerank::{RerankOptions, Reranker};

#[path = "shared/first_calls.rs"]
mod first_calls;
#[path = "shared/three_way.rs"]
mod three_way;

/// The three-way rule `pool_fusion3` chose on the tuning queries.
const THREE_WAY: [f64; 3] = [1.0, 2.0, 0.5];

fn main() -> Result<()> {
    let mut positional = Vec::new();
    let (mut depth, mut dense, mut judge) = (5usize, None, false);
    let (mut rule, mut against) = (None, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--depth" => depth = args.next().context("--depth N")?.parse()?,
            "--threads" => {
                let threads = args.next().context("--threads N")?;
                std::env::set_var("RAYON_NUM_THREADS", &threads);
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads.parse()?)
                    .build_global()?;
            }
            "--dense" => dense = Some(PathBuf::from(args.next().context("--dense FILE")?)),
            "--judge" => judge = true,
            "--rule" => rule = Some(args.next().context("--rule W")?.parse::<f64>()?),
            "--against" => against.push(PathBuf::from(args.next().context("--against PATH")?)),
            "--summarize" => {
                let file = PathBuf::from(args.next().context("--summarize FILE")?);
                let (mut rule, mut against) = (None, Vec::new());
                while let Some(arg) = args.next() {
                    match arg.as_str() {
                        "--rule" => rule = Some(args.next().context("--rule W")?.parse()?),
                        "--against" => {
                            against.push(PathBuf::from(args.next().context("--against PATH")?))
                        }
                        other => bail!("unknown argument {other}"),
                    }
                }
                return summarize_file(&file, rule, &against);
            }
            _ => positional.push(arg),
        }
    }
    let [corpus_dir, run_dir, model_path, out_path] = positional.as_slice() else {
        bail!("usage: pool_likelihood CORPUS_DIR RUN_DIR MODEL OUT.jsonl [--depth N] [--threads N] [--dense FILE] [--judge]");
    };
    let (corpus, _) = Corpus::load(&PathBuf::from(corpus_dir), &CorpusLoad::default())
        .with_context(|| format!("loading {corpus_dir}"))?;
    let cases = first_calls::cases(&PathBuf::from(run_dir))?;
    let dense = dense
        .map(|path| three_way::dense_rankings(&path))
        .transpose()?;
    let model_path = PathBuf::from(model_path);
    let devices = DeviceMap::parse("cpu", None)?;
    let options = LoadOptions {
        quantized: QuantizedWeights::DenseWithQ8Decode,
        ..LoadOptions::default()
    };
    let load = || Model::load_with(&ModelSpec::Path(model_path.clone()), &devices, &options);
    let model = load()?;
    let tokenizer = load_tokenizer(&model_path, None)?;
    // The whole output head, once: only the query's positions are projected through it.
    let all_ids: Vec<u32> = (0..model.vocab_size() as u32).collect();
    let head = model.head_rows(&all_ids)?;
    let hybrid = CorpusSpace::new(&corpus).candidates(Candidates::Hybrid)?;
    let spaces = three_way::Spaces::new(&corpus)?;
    let mut judge = match judge {
        true => Some(Reranker::new(
            load()?,
            load_tokenizer(&model_path, None)?,
            RerankOptions::default(),
        )?),
        false => None,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(out_path)?);
    let mut scored: Vec<(&first_calls::Case, Vec<Scored>)> = Vec::new();
    let started = Instant::now();
    let mut tokens_run = 0usize;
    for (n, case) in cases.iter().enumerate() {
        let pool: Vec<(usize, f64)> = match &dense {
            Some(dense) => {
                let ranking = dense.get(&case.qid).cloned().unwrap_or_default();
                let sides = spaces.sides(&case.query, &case.patterns, &ranking);
                three_way::blend(&sides, THREE_WAY)
            }
            None => hybrid
                .rank(&case.query, &case.patterns)
                .into_iter()
                .map(|r| (r.table, r.score))
                .collect(),
        };
        let pool = &pool[..depth.min(pool.len())];
        let previews: Vec<String> = pool
            .iter()
            .map(|&(table, _)| hybrid.preview(table, &case.patterns, Evidence::Small, false))
            .collect();
        let judged = match judge.as_mut() {
            Some(judge) => {
                let texts: Vec<&str> = previews.iter().map(String::as_str).collect();
                judge.score(&case.query, &texts)?.scores
            }
            None => Vec::new(),
        };
        let lead = match case.query.trim_end().ends_with('?') {
            true => "A question this table answers:",
            false => "A statement this table verifies:",
        };
        let query_ids = tokenizer.encode(&format!(" {}", case.query.trim()), false)?;
        let mut cands = Vec::new();
        let mut rows = Vec::new();
        for (i, (&(table, pool_score), preview)) in pool.iter().zip(&previews).enumerate() {
            let prefix = format!(
                "<|im_start|>user\nHere is a table.\n\n{}\n<|im_end|>\n<|im_start|>assistant\n{lead}",
                preview.trim_end()
            );
            let mut ids = tokenizer.encode(&prefix, true)?;
            let start = ids.len();
            ids.extend(&query_ids);
            tokens_run += ids.len();
            let hidden = model.forward_hidden(&ids[..ids.len() - 1], &mut model.new_cache())?;
            let hidden = hidden.narrow(0, start - 1, ids.len() - start)?;
            let logits = hidden.to_dtype(DType::F32)?.matmul(&head.t()?)?;
            let logp: Vec<Vec<f32>> = candle_nn::ops::log_softmax(&logits, D::Minus1)?.to_vec2()?;
            let ql_sum: f64 = (start..ids.len())
                .map(|pos| f64::from(logp[pos - start][ids[pos] as usize]))
                .sum();
            let mut cand = serde_json::json!({
                "table_id": corpus.id(table),
                "pool_score": pool_score,
                "ql_sum": ql_sum,
                "prompt_tokens": ids.len(),
            });
            if let Some(p_yes) = judged.get(i) {
                cand["p_yes"] = serde_json::json!(p_yes);
            }
            cands.push(cand);
            rows.push(Scored {
                table_id: corpus.id(table).to_string(),
                pool: pool_score,
                likelihood: ql_sum,
                p_yes: judged.get(i).copied(),
            });
        }
        let line = serde_json::json!({ "qid": case.qid, "gold": case.gold, "candidates": cands });
        writeln!(out, "{line}")?;
        out.flush()?;
        scored.push((case, rows));
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "{}/{} {secs:.1}s, {:.0} tok/s",
            n + 1,
            cases.len(),
            tokens_run as f64 / secs
        );
    }
    summarize(&scored);
    if let Some(weight) = rule {
        compare_rule(&scored, weight, &against)?;
    }
    Ok(())
}

/// R@1 of `pool + weight · likelihood`, and the paired tests `compare` runs (bootstrap,
/// Wilcoxon) against the first-ranked tables of each reference: an eval run directory or a
/// `retrieve` output file.
fn compare_rule(
    scored: &[(&first_calls::Case, Vec<Scored>)],
    weight: f64,
    against: &[PathBuf],
) -> Result<()> {
    let ours: Vec<f64> = scored
        .iter()
        .map(|(case, rows)| {
            let blended = blend_scores(rows, weight);
            let best =
                (0..rows.len()).min_by(|&a, &b| blended[b].total_cmp(&blended[a]).then(a.cmp(&b)));
            f64::from(u8::from(
                best.is_some_and(|i| case.gold.contains(&rows[i].table_id)),
            ))
        })
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!("rule: pool + {weight} likelihood, R@1 {:.3}", mean(&ours));
    for path in against {
        let firsts = first_ranked(path)?;
        let theirs: Vec<f64> = scored
            .iter()
            .map(|(case, _)| {
                let hit = firsts.get(&case.qid).is_some_and(|t| case.gold.contains(t));
                f64::from(u8::from(hit))
            })
            .collect();
        let boot = paired_bootstrap(&theirs, &ours, &BootstrapOptions::default())?;
        let wilcoxon = wilcoxon_signed_rank(&theirs, &ours)?;
        let wins = ours.iter().zip(&theirs).filter(|(o, t)| o > t).count();
        let losses = ours.iter().zip(&theirs).filter(|(o, t)| o < t).count();
        println!(
            "  vs {}: R@1 {:.3}, difference {:+.3}, {wins} won / {losses} lost, p bootstrap {:.4}, p Wilcoxon {:.4}",
            path.display(),
            mean(&theirs),
            mean(&ours) - mean(&theirs),
            boot.p_value,
            wilcoxon.p_value
        );
    }
    Ok(())
}

/// Each query's first-ranked table, from an eval run directory or a `retrieve` output file.
fn first_ranked(path: &std::path::Path) -> Result<std::collections::BTreeMap<String, String>> {
    if path.is_dir() {
        return Ok(read_records(path)?
            .into_iter()
            .filter_map(|r| Some((r.qid, r.ranking.first()?.clone())))
            .collect());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)?;
        if let (Some(qid), Some(first)) = (
            value["qid"].as_str(),
            value["ranking"][0]["table_id"].as_str(),
        ) {
            out.insert(qid.to_string(), first.to_string());
        }
    }
    Ok(out)
}

fn blend_scores(rows: &[Scored], weight: f64) -> Vec<f64> {
    let pool: Vec<f64> = rows.iter().map(|r| r.pool).collect();
    let model: Vec<f64> = rows.iter().map(|r| r.likelihood).collect();
    min_max_blend(&pool, &model, weight)
}

/// The summary of an earlier output file, without running the model again.
fn summarize_file(path: &std::path::Path, rule: Option<f64>, against: &[PathBuf]) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let (mut cases, mut scores) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)?;
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| Some(s.as_str()?.to_string()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let case = first_calls::Case {
            qid: value["qid"].as_str().context("qid")?.to_string(),
            query: String::new(),
            patterns: Vec::new(),
            gold: strings(&value["gold"]),
        };
        let rows = value["candidates"]
            .as_array()
            .context("candidates")?
            .iter()
            .map(|c| {
                Ok(Scored {
                    table_id: c["table_id"].as_str().context("table_id")?.to_string(),
                    pool: c["pool_score"].as_f64().context("pool_score")?,
                    likelihood: c["ql_sum"].as_f64().context("ql_sum")?,
                    p_yes: c["p_yes"].as_f64(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        cases.push(case);
        scores.push(rows);
    }
    let scored: Vec<_> = cases.iter().zip(scores).collect();
    summarize(&scored);
    if let Some(weight) = rule {
        compare_rule(&scored, weight, against)?;
    }
    Ok(())
}

/// Which of a candidate's model scores a summary row reads.
type ModelScore = fn(&Scored) -> Option<f64>;

/// One pool candidate's scores.
struct Scored {
    table_id: String,
    pool: f64,
    likelihood: f64,
    p_yes: Option<f64>,
}

/// R@1 and R@3 of the pool's own order and of reorderings by the model's scores: alone, and
/// blended with the pool score (both min-max scaled per query, the model's weighted `w`).
fn summarize(scored: &[(&first_calls::Case, Vec<Scored>)]) {
    let rate = |score: &dyn Fn(&[Scored]) -> Vec<f64>| -> (f64, f64) {
        let (mut at1, mut at3) = (0, 0);
        for (case, rows) in scored {
            let scores = score(rows);
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            let head: Vec<&str> = order.iter().map(|&i| rows[i].table_id.as_str()).collect();
            let (one, three) = case.hits(&head);
            at1 += one;
            at3 += three;
        }
        let n = scored.len().max(1) as f64;
        (at1 as f64 / n, at3 as f64 / n)
    };
    let print =
        |name: &str, (at1, at3): (f64, f64)| println!("{name:<28} R@1 {at1:.3}  R@3 {at3:.3}");
    println!("queries: {}", scored.len());
    print(
        "pool order",
        rate(&|rows| rows.iter().map(|r| r.pool).collect()),
    );
    let models: [(&str, ModelScore); 2] = [
        ("likelihood", |r| Some(r.likelihood)),
        ("judge p(yes)", |r| r.p_yes),
    ];
    for (name, get) in models {
        if scored
            .iter()
            .any(|(_, rows)| rows.iter().any(|r| get(r).is_none()))
        {
            continue;
        }
        let model = |rows: &[Scored]| -> Vec<f64> { rows.iter().filter_map(get).collect() };
        print(&format!("{name} alone"), rate(&model));
        for w in [0.25, 0.5, 1.0, 2.0, 4.0] {
            print(
                &format!("pool + {w} {name}"),
                rate(&|rows| {
                    let pool: Vec<f64> = rows.iter().map(|r| r.pool).collect();
                    min_max_blend(&pool, &model(rows), w)
                }),
            );
        }
    }
}
