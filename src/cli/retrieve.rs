//! `tableseek retrieve`: rank a corpus's tables for each query of a JSONL file with a baseline
//! retriever (dense, dense + LLM rerank, BM25, hybrid, or T-RAG) and write one ranking per line. The
//! rankings are `retrieve::pipeline`'s, the same `eval` runs; a reranker failure keeps the dense
//! order with a warning, as in `eval`.
//!
//! With `--method rerank` the first `--rerank-depth` entries carry the reranker's p(yes) as score,
//! the rest the dense cosine; `calls` counts the query encoding plus one reranker pass per
//! document.
//!
//! Queries are read by `eval::load_ranking_queries` (any eval dataset, or lines with just a `qid`
//! and a `query`, `claim` or `question`); where they name a gold table, recall at 1/2/3 goes to
//! stderr (`retrieve::batch`).

use std::path::PathBuf;

use anyhow::{bail, Context};

use tableseek::engine::DeviceMap;
use tableseek::eval::load_ranking_queries;
use tableseek::retrieve::batch::{rank_batch, BatchQuery};
use tableseek::retrieve::bm25::Bm25Preset;
use tableseek::retrieve::pipeline::{Ranker, Rerank};

use super::retrievers::{EncoderArgs, RerankArgs};
use super::trag_args::TragArgs;

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
    /// T-RAG: the best cluster per view (semantic, structural, lexical) unioned, ranked by
    /// personalized PageRank; stderr adds R@10/20/50 and how often the gold table is in the pool.
    Trag,
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
    #[command(flatten)]
    pub trag: TragArgs,
    /// Device for the encoder and reranker: cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    #[arg(long, value_enum, default_value_t = Bm25Preset::Okapi)]
    pub bm25: Bm25Preset,
    /// Output JSONL, one ranking per query.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(args: RetrieveArgs) -> anyhow::Result<()> {
    let queries = load_ranking_queries(&args.queries)?;
    let (corpus, _report) = super::corpus::load(&args.corpus)?;
    if corpus.is_empty() {
        bail!("no tables in {}", args.corpus.display());
    }
    let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();
    let devices = DeviceMap::parse(&args.device, None)?;

    let needs_dense = args.method != Method::Bm25;
    let encoder = match needs_dense {
        true => Some(args.encoder.load(&devices, true)?),
        false => None,
    };
    let dense = match (&encoder, args.method) {
        (_, Method::Trag) | (None, _) => None,
        (Some(encoder), _) => Some(args.encoder.index(encoder.as_ref(), &texts)?),
    };
    let trag = match (&encoder, args.method) {
        (Some(encoder), Method::Trag) => {
            Some(args.trag.index(&corpus, encoder.as_ref(), &args.encoder)?)
        }
        _ => None,
    };
    let bm25 = match args.method {
        Method::Bm25 | Method::Hybrid => Some(args.bm25.builder().build(&texts)?),
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
        (Method::Trag, Some(encoder), _, _) => match &trag {
            Some(index) => Ranker::Trag {
                encoder: encoder.as_ref(),
                index,
            },
            None => bail!("--method trag: its index did not build"),
        },
        _ => bail!("--method {:?}: its retrievers did not load", args.method),
    };
    let batch: Vec<BatchQuery<'_>> = queries
        .iter()
        .map(|q| BatchQuery {
            qid: &q.qid,
            text: &q.query,
            gold: q.gold_tables.first().map(String::as_str),
        })
        .collect();
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let summary = rank_batch(&ranker, &corpus, &batch, args.top_k, &mut out)
        .with_context(|| format!("ranking into {}", args.out.display()))?;
    let report = summary.describe(args.method != Method::Bm25);
    if !report.is_empty() {
        eprintln!("{report}");
    }
    Ok(())
}
