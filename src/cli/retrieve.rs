//! `tableseek retrieve`: rank a corpus's tables for each query of a JSONL file with a baseline
//! retriever (dense MiniLM or BM25) and write one ranking per line.
//!
//! Input lines are eval queries `{qid, query, ...}`; `question` (Spider) or `claim` (TabFact) stand in
//! for a missing `query`. When lines carry a `gold_table`, recall at 1/2/3 goes to stderr.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use tableseek::corpus::Corpus;
use tableseek::engine::DeviceMap;
use tableseek::retrieve::bert::{BertEncoder, EncodeOptions};
use tableseek::retrieve::bm25::{Bm25Builder, Bm25Index, Hit};
use tableseek::retrieve::dense::{CacheStatus, DenseIndex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Cosine similarity of sentence embeddings (all-MiniLM-L6-v2 by default).
    Dense,
    /// BM25 over each table's text.
    Bm25,
    /// Dense retrieval re-ranked by an LLM (not implemented yet).
    Rerank,
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
    /// Sentence-transformers model folder (config.json, model.safetensors, tokenizer.json).
    /// Default: $TABLESEEK_MODELS/all-MiniLM-L6-v2, else models/all-MiniLM-L6-v2.
    #[arg(long)]
    pub embed_model: Option<PathBuf>,
    /// Tokens per text for the encoder, [CLS]/[SEP] included; longer tables are truncated.
    #[arg(long, default_value_t = 256)]
    pub max_length: usize,
    /// Texts per encoder forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Where corpus embeddings are kept between runs.
    #[arg(long, default_value = "runs/cache/embeddings")]
    pub cache_dir: PathBuf,
    /// Embed the corpus afresh and write no cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Device for the encoder: cpu or cuda:N.
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

/// Ranks one query; returns hits, model calls, encode time in ms.
type Ranker<'a> = Box<dyn FnMut(&str) -> anyhow::Result<(Vec<Hit>, usize, f64)> + 'a>;

pub fn run(args: RetrieveArgs) -> anyhow::Result<()> {
    if args.method == Method::Rerank {
        bail!("--method rerank is not implemented yet (dense and bm25 are)");
    }
    let queries = read_queries(&args.queries)?;
    let (corpus, _report) = super::corpus::load(&args.corpus)?;
    if corpus.is_empty() {
        bail!("no tables in {}", args.corpus.display());
    }
    let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();

    // Recall at 3 needs three results even when fewer are written.
    let depth = args.top_k.max(3);
    let encoder;
    let dense;
    let bm25;
    let mut rank: Ranker<'_> = match args.method {
        Method::Dense => {
            encoder = load_encoder(&args)?;
            dense = dense_index(&args, &encoder, &texts)?;
            if dense.truncated() > 0 {
                tracing::warn!(
                    "{} of {} tables are longer than {} tokens; only their start is embedded",
                    dense.truncated(),
                    dense.len(),
                    args.max_length
                );
            }
            let (encoder, dense, k) = (&encoder, &dense, depth);
            Box::new(move |query: &str| {
                let start = Instant::now();
                let embedding = encoder.embed_one(query)?;
                let encode_ms = start.elapsed().as_secs_f64() * 1e3;
                Ok((dense.search(&embedding, k)?, 1, encode_ms))
            })
        }
        Method::Bm25 => {
            let builder = match args.bm25 {
                Bm25Arg::Okapi => Bm25Builder::okapi(),
                Bm25Arg::Lucene => Bm25Builder::lucene().english_stopwords(true),
            };
            bm25 = builder.build(&texts)?;
            let (bm25, k): (&Bm25Index, usize) = (&bm25, depth);
            Box::new(move |query: &str| Ok((bm25.search(query, k), 0, 0.0)))
        }
        Method::Rerank => unreachable!("rejected above"),
    };

    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let mut recall = Recall::default();
    for query in &queries {
        let (hits, calls, encode) = rank(&query.text)?;
        if let Some(gold) = &query.gold_table {
            recall.add(&corpus, gold, &hits);
        }
        let line = RunLine {
            qid: &query.qid,
            ranking: hits
                .iter()
                .take(args.top_k)
                .map(|hit| Ranked {
                    table_id: corpus.id(hit.doc),
                    score: hit.score,
                })
                .collect(),
            calls,
            ms: Millis {
                encode,
                rerank: 0.0,
            },
        };
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    }
    out.flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    recall.report();
    Ok(())
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

fn default_model_dir() -> PathBuf {
    std::env::var_os("TABLESEEK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models"))
        .join("all-MiniLM-L6-v2")
}

fn load_encoder(args: &RetrieveArgs) -> anyhow::Result<BertEncoder> {
    let dir = args.embed_model.clone().unwrap_or_else(default_model_dir);
    let device = DeviceMap::parse(&args.device, None)?;
    let options = EncodeOptions::default()
        .max_length(args.max_length)
        .batch_size(args.batch_size)
        .progress(true);
    BertEncoder::load(&dir, device.first(), options)
        .with_context(|| format!("loading the encoder from {}", dir.display()))
}

fn dense_index(
    args: &RetrieveArgs,
    encoder: &BertEncoder,
    texts: &[&str],
) -> anyhow::Result<DenseIndex> {
    let start = Instant::now();
    let embedded = |index: &DenseIndex, cached: &str| {
        eprintln!(
            "embedded {} tables in {:.1?} ({:.1} tables/s){cached}",
            index.len(),
            start.elapsed(),
            index.len() as f64 / start.elapsed().as_secs_f64(),
        )
    };
    if args.no_cache {
        let index = DenseIndex::build(encoder, texts)?;
        embedded(&index, "");
        return Ok(index);
    }
    let (index, status) = DenseIndex::load_or_build(encoder, texts, &args.cache_dir)?;
    match status {
        CacheStatus::Hit(path) => tracing::info!("embeddings from {}", path.display()),
        CacheStatus::Built(path) | CacheStatus::Rebuilt(path, _) => {
            embedded(&index, &format!("; cached in {}", path.display()))
        }
    }
    Ok(index)
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
