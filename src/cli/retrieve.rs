//! `tableseek retrieve`: rank a corpus's tables for each query of a JSONL file with a baseline
//! retriever (dense, dense + LLM rerank, BM25, or hybrid) and write one ranking per line. The
//! rankings are `retrieve::pipeline`'s, the same `eval` runs; a reranker failure keeps the dense
//! order with a warning, as in `eval`.
//!
//! With `--method rerank` the first `--rerank-depth` entries carry the reranker's p(yes) as score,
//! the rest the dense cosine; `calls` counts the query encoding plus one reranker pass per
//! document.
//!
//! Input lines are eval queries `{qid, query, ...}`; `question` (Spider) or `claim` (TabFact) stand in
//! for a missing `query`. When lines carry a `gold_table`, recall at 1/2/3 goes to stderr.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use tableseek::corpus::Corpus;
use tableseek::engine::DeviceMap;
use tableseek::retrieve::bm25::{Bm25Builder, Hit};
use tableseek::retrieve::pipeline::{Ranker, Rerank};

use super::retrievers::{EncoderArgs, RerankArgs};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Cosine similarity of sentence embeddings (all-MiniLM-L6-v2 by default).
    Dense,
    /// BM25 over each table's text.
    Bm25,
    /// The dense top `--rerank-depth` reordered by an LLM's p(yes) (Qwen3-Reranker format).
    Rerank,
    /// BM25 (`--bm25`) and dense rankings joined by reciprocal rank fusion (no LLM).
    Hybrid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bm25Arg {
    /// rank_bm25's BM25Okapi (k1 1.5, b 0.75, epsilon 0.25, no stopwords).
    Okapi,
    /// bm25s's Lucene variant with its English stopwords.
    Lucene,
}

#[derive(Debug, clap::Args)]
pub struct RetrieveArgs {
    #[arg(long, value_enum)]
    pub method: Method,
    /// Corpus directory (or a single table file).
    #[arg(long)]
    pub corpus: PathBuf,
    /// JSONL queries: `qid` and `query` (or `question`, or `claim`); optional `gold_table`.
    #[arg(long)]
    pub queries: PathBuf,
    #[command(flatten)]
    pub encoder: EncoderArgs,
    #[command(flatten)]
    pub rerank: RerankArgs,
    /// Device for the encoder and reranker: cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    #[arg(long, value_enum, default_value_t = Bm25Arg::Okapi)]
    pub bm25: Bm25Arg,
    /// Output JSONL, one ranking per query.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Deserialize)]
struct QueryLine {
    qid: serde_json::Value,
    query: Option<String>,
    question: Option<String>,
    claim: Option<String>,
    gold_table: Option<String>,
}

struct Query {
    qid: serde_json::Value,
    text: String,
    gold_table: Option<String>,
}

#[derive(Serialize)]
struct RunLine<'a> {
    qid: &'a serde_json::Value,
    ranking: Vec<Ranked<'a>>,
    /// Model forward passes spent on this query.
    calls: usize,
    ms: Millis,
}

#[derive(Serialize)]
struct Ranked<'a> {
    table_id: &'a str,
    score: f64,
}

#[derive(Serialize)]
struct Millis {
    encode: f64,
    rerank: f64,
}

pub fn run(args: RetrieveArgs) -> anyhow::Result<()> {
    let queries = read_queries(&args.queries)?;
    let (corpus, _report) = super::corpus::load(&args.corpus)?;
    if corpus.is_empty() {
        bail!("no tables in {}", args.corpus.display());
    }
    let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();
    let devices = DeviceMap::parse(&args.device, None)?;

    // Recall at 3 needs three results even when fewer are written.
    let depth = args.top_k.max(3);
    let needs_dense = args.method != Method::Bm25;
    let encoder = match needs_dense {
        true => Some(args.encoder.load(&devices, true)?),
        false => None,
    };
    let dense = match &encoder {
        Some(encoder) => Some(args.encoder.index(encoder.as_ref(), &texts)?),
        None => None,
    };
    let bm25 = match args.method {
        Method::Bm25 | Method::Hybrid => Some(bm25_builder(args.bm25).build(&texts)?),
        _ => None,
    };
    let mut reranker = match args.method {
        Method::Rerank => Some(args.rerank.load(&devices)?),
        _ => None,
    };
    let reranker = reranker.as_mut().map(std::sync::Mutex::new);
    let ranker = match (args.method, &encoder, &dense, &bm25) {
        (Method::Bm25, _, _, Some(bm25)) => Ranker::Bm25(bm25),
        (Method::Hybrid, Some(encoder), Some(index), Some(bm25)) => Ranker::Hybrid {
            bm25,
            encoder: encoder.as_ref(),
            index,
        },
        (Method::Dense | Method::Rerank, Some(encoder), Some(index), _) => Ranker::Dense {
            encoder: encoder.as_ref(),
            index,
            rerank: reranker.as_ref().map(|reranker| Rerank {
                reranker,
                depth: args.rerank.depth(),
            }),
        },
        _ => bail!("--method {:?}: its retrievers did not load", args.method),
    };
    let document = |table: usize| texts[table].to_string();

    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let mut recall = Recall::default();
    let mut totals = (0.0, 0.0);
    for query in &queries {
        let ranking = ranker.rank(&query.text, depth, &document)?;
        for warning in &ranking.warnings {
            tracing::warn!(qid = %query.qid, "{warning}");
        }
        if let Some(gold) = &query.gold_table {
            recall.add(&corpus, gold, &ranking.hits);
        }
        totals.0 += ranking.encode_ms;
        totals.1 += ranking.rerank_ms;
        let line = RunLine {
            qid: &query.qid,
            ranking: ranking
                .hits
                .iter()
                .take(args.top_k)
                .map(|hit| Ranked {
                    table_id: corpus.id(hit.doc),
                    score: hit.score,
                })
                .collect(),
            calls: ranking.encode_calls + ranking.rerank_calls,
            ms: Millis {
                encode: ranking.encode_ms,
                rerank: ranking.rerank_ms,
            },
        };
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    }
    out.flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    recall.report();
    if !queries.is_empty() && args.method != Method::Bm25 {
        let n = queries.len() as f64;
        eprintln!(
            "ms per query: encode {:.1}, rerank {:.1} ({} queries)",
            totals.0 / n,
            totals.1 / n,
            queries.len()
        );
    }
    Ok(())
}

fn bm25_builder(variant: Bm25Arg) -> Bm25Builder {
    match variant {
        Bm25Arg::Okapi => Bm25Builder::okapi(),
        Bm25Arg::Lucene => Bm25Builder::lucene().english_stopwords(true),
    }
}

fn read_queries(path: &Path) -> anyhow::Result<Vec<Query>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut queries = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let parsed: QueryLine = serde_json::from_str(&line).with_context(at)?;
        let Some(text) = parsed.query.or(parsed.question).or(parsed.claim) else {
            bail!("{}: no `query`, `question` or `claim` field", at());
        };
        queries.push(Query {
            qid: parsed.qid,
            text,
            gold_table: parsed.gold_table,
        });
    }
    Ok(queries)
}

/// Hits at ranks 1, 2, 3 over the queries that name a gold table.
#[derive(Default)]
struct Recall {
    hits: [usize; 3],
    queries: usize,
    unknown_gold: usize,
}

impl Recall {
    fn add(&mut self, corpus: &Corpus, gold: &str, ranking: &[Hit]) {
        self.queries += 1;
        let Some(gold) = corpus.index_of(gold) else {
            self.unknown_gold += 1;
            return;
        };
        if let Some(rank) = ranking.iter().take(3).position(|hit| hit.doc == gold) {
            for hit in &mut self.hits[rank..] {
                *hit += 1;
            }
        }
    }

    fn report(&self) {
        if self.queries == 0 {
            return;
        }
        let r = self.hits.map(|h| h as f64 / self.queries as f64);
        eprintln!(
            "R@1 {:.3}  R@2 {:.3}  R@3 {:.3}  ({} queries with a gold table)",
            r[0], r[1], r[2], self.queries
        );
        if self.unknown_gold > 0 {
            tracing::warn!(
                "{} gold tables are not in the corpus (counted as misses)",
                self.unknown_gold
            );
        }
    }
}
