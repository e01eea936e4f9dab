//! `tableseek eval`: resumable evaluation runs (`eval::RunDir`), one method over a dataset.
//!
//! Over 150 lines because `eval` takes every method's flags (~80 lines) and maps them onto the
//! typed run options (`eval::options`), and `run_eval` wires what each method needs (corpus,
//! encoder and index, TableRAG's chunks, reranker, model, `--qa auto` probe) before handing the
//! run to `RunDir::run_model`. Provenance, options, the query reader and the concurrent engine
//! live in the library.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tableseek::agent::tas::search::SearchTool;
use tableseek::agent::{
    AgentConfig, CorpusSpace, EngineLlm, DEFAULT_MAX_TABLE_CHARS, HYBRID_FUSION,
};
use tableseek::engine::{parse_bytes, DeviceMap};
use tableseek::eval::options::{EmbedOptions, RerankOptions, RunOptions};
use tableseek::eval::{
    load_queries, render_report, resolve_dataset, EvalOptions, Evaluator, Method, ModelDrive,
    RunConfig, RunDir, Shard,
};
use tableseek::retrieve::chunks::chunk_tables;

use super::agent_args::AgentArgs;
use super::model_args::ModelArgs;
use super::retrievers::{EncoderArgs, RerankArgs};
use super::tablerag_args::{TableRagArgs, TABLERAG_MAX_NEW_TOKENS};

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// `tabfact-test-1k`, `tabfact-test`, `spider-single-table` (from the shared data dir:
    /// $TABLESEEK_SHARED, else ../shared beside the source tree) or a JSONL file of queries.
    #[arg(long)]
    pub dataset: String,
    /// Directory of tables; defaults to the named dataset's own corpus.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// tableseek, bm25, dense, rerank, hybrid (BM25 + dense fused, no LLM in the ranking), oracle,
    /// no-table, tablerag, trag (T-RAG) or tas (Table-as-Search).
    #[arg(long)]
    pub method: Method,
    /// TableRAG's settings.
    #[command(flatten)]
    pub tablerag: TableRagArgs,
    #[command(flatten)]
    pub trag: super::trag_args::TragArgs,
    #[command(flatten)]
    pub tas: super::tas_args::TasArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The dense and rerank methods' encoder.
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// The rerank method's reranker.
    #[command(flatten)]
    pub rerank: RerankArgs,
    /// Agent settings (`--task` is ignored: each query carries its own task).
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Longest table text QA reads (characters); the rest is cut at a line end.
    #[arg(long, default_value_t = DEFAULT_MAX_TABLE_CHARS)]
    pub max_table_chars: usize,
    /// Run directory: config.json, queries.jsonl, summary.json, report.md.
    #[arg(long)]
    pub out: PathBuf,
    /// Only the first N queries of the dataset.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Continue the run in --out, skipping finished queries.
    #[arg(long)]
    pub resume: bool,
    /// Record every time, and the prompt tokens served from the prefix cache (they depend on
    /// what ran before or alongside), as 0: two runs, at any --concurrency, compare byte for byte.
    #[arg(long)]
    pub no_timings: bool,
    /// Queries whose agent loops run at once against one batching engine (their decoding steps
    /// share passes over the weights). Records are still written in dataset order, and equal
    /// those of a one-at-a-time run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub concurrency: u64,
    /// KV-cache memory the concurrent sequences may reserve together (e.g. 4GiB, 512MiB); when
    /// it is spent, new sequences wait.
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes)]
    pub kv_memory: usize,
    /// Run only shard K of N (queries K-1, K-1+N, ... of the limited dataset), e.g. from a job
    /// array; `report --merge OUT DIRS...` joins the N shard directories into one run.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
}

fn shared_dir() -> PathBuf {
    std::env::var_os("TABLESEEK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// The typed options of this run (`eval::options` drops what does not apply).
fn run_options(
    args: &EvalArgs,
    agent: &AgentConfig,
    dataset: PathBuf,
    corpus: PathBuf,
    whole: usize,
) -> RunOptions {
    RunOptions {
        dataset,
        corpus,
        method: args.method,
        model: args.model.model.clone(),
        tokenizer: args.model.tokenizer.clone(),
        random_init: args.model.random_init.clone(),
        device: args.model.placement.device.clone(),
        dtype: args.model.placement.dtype.clone(),
        steps: args.agent.steps,
        strategy: agent.strategy,
        evidence: agent.evidence,
        fallback_tables: args.agent.fallback_tables,
        history: agent.history,
        max_new_tokens: args.agent.max_new_tokens,
        enable_thinking: args.agent.enable_thinking,
        constrain: args.agent.constrain,
        ablations: agent.ablations,
        max_table_chars: args.max_table_chars,
        timings: !args.no_timings,
        widen_empty: Some(args.agent.widen_empty),
        qa: Some(args.agent.qa),
        sql_answer: Some(args.agent.sql_answer),
        candidates: Some(args.agent.candidates),
        candidate_fusion: Some(HYBRID_FUSION),
        embed: Some(EmbedOptions {
            embed_model: args.encoder.model_path(),
            embed_max_length: args.encoder.max_length,
            embed_task: args.encoder.embed_task.clone(),
            embed_dim: args.encoder.embed_dim,
        }),
        tablerag: Some(args.tablerag.run_options()),
        rerank: Some(RerankOptions {
            rerank_model: args.rerank.model_path(),
            rerank_depth: args.rerank.depth(),
            rerank_instruction: args.rerank.rerank_instruction.clone(),
            rerank_max_length: args.rerank.rerank_max_length,
        }),
        trag: Some(args.trag.settings()),
        tas: Some(args.tas.config()),
        shard: args.shard.map(|shard| shard.info(whole)),
    }
    .omit_unused()
}

pub fn run_eval(args: EvalArgs) -> anyhow::Result<()> {
    let agent_config = args.agent.config(1)?;
    let (dataset, default_corpus) = resolve_dataset(&args.dataset, &shared_dir());
    let corpus_dir = args
        .corpus
        .clone()
        .or(default_corpus)
        .context("--corpus is required for a dataset given as a file")?;
    let mut queries = load_queries(&dataset)?;
    if let Some(limit) = args.limit {
        queries.truncate(limit);
    }
    let whole = queries.len();
    if let Some(shard) = args.shard {
        queries = shard.select(&queries);
    }
    let dense = args.method.needs_encoder()
        || (args.method == Method::Tas && args.tas.config().uses(SearchTool::Dense));
    let options = run_options(&args, &agent_config, dataset, corpus_dir.clone(), whole);
    let weights = args
        .model
        .random_init
        .is_none()
        .then_some(args.model.model.as_path());
    let config = RunConfig::for_this_process(options.to_json()?, weights, args.limit)?;
    // Open (and check) the run directory before the slow corpus and model loading.
    let mut run_dir = RunDir::open(&args.out, &config, args.resume)?;
    let pending = queries
        .iter()
        .filter(|q| !run_dir.is_finished(&q.qid))
        .count();
    tracing::info!(
        total = queries.len(),
        finished = queries.len() - pending,
        "starting"
    );
    let (corpus, _report) = super::corpus::load(&corpus_dir)?;
    anyhow::ensure!(!corpus.is_empty(), "no tables in {}", corpus_dir.display());
    let missing = queries
        .iter()
        .filter(|q| corpus.index_of(q.gold_table()).is_none())
        .count();
    if missing > 0 {
        tracing::warn!(missing, "queries whose gold table is not in the corpus");
    }
    let devices = DeviceMap::parse(&args.model.placement.device, None)?;
    let encoder = if dense {
        Some(
            args.encoder
                .load(&devices, std::io::stderr().is_terminal())?,
        )
    } else {
        None
    };
    let chunks = match args.method {
        Method::Tablerag => chunk_tables(
            (0..corpus.len()).map(|i| corpus.table(i)),
            &args.tablerag.chunk_options(),
        ),
        _ => Vec::new(),
    };
    let index = match &encoder {
        Some(encoder) if args.method == Method::Tablerag => {
            let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
            eprintln!("{} chunks of {} tables", chunks.len(), corpus.len());
            Some(args.encoder.index(encoder.as_ref(), &texts)?)
        }
        Some(_) if args.method == Method::Trag => None,
        Some(encoder) => {
            let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();
            Some(args.encoder.index(encoder.as_ref(), &texts)?)
        }
        None => None,
    };
    let trag = match &encoder {
        Some(encoder) if args.method == Method::Trag => {
            Some(args.trag.index(&corpus, encoder.as_ref(), &args.encoder)?)
        }
        _ => None,
    };
    let mut reranker = match args.method {
        Method::Rerank => Some(args.rerank.load(&devices)?),
        _ => None,
    };
    let mut model = args.model.load()?;
    let max_new_tokens = args
        .agent
        .max_new_tokens
        .unwrap_or(model.default_max_new_tokens());
    let qa = {
        let mut probe = EngineLlm::new(&mut model)
            .enable_thinking(args.agent.enable_thinking)
            .constrain(args.agent.constrain.is_on());
        super::ask::resolve_qa(args.agent.qa, &mut probe)?
    };
    let mut agent = args.agent.config(model.default_max_new_tokens())?;
    agent.qa = qa;
    let options = EvalOptions {
        agent,
        qa_max_new_tokens: max_new_tokens,
        timings: !args.no_timings,
        rerank_depth: args.rerank.depth(),
        qa,
        // NL2SQL and compose write a query or a sentence: 256 tokens unless told otherwise.
        tablerag: args
            .tablerag
            .config(args.agent.max_new_tokens.unwrap_or(TABLERAG_MAX_NEW_TOKENS)),
        tas: args.tas.config(),
        ..EvalOptions::default()
    };
    let space = CorpusSpace::new(&corpus)
        .max_table_chars(args.max_table_chars)
        .candidates(args.agent.candidates)?;
    let mut evaluator = Evaluator::new(args.method, &space, corpus.len(), options)?;
    if let (Some(encoder), Some(index)) = (&encoder, &index) {
        evaluator = match args.method {
            Method::Tablerag => evaluator.with_chunks(encoder.as_ref(), index, &chunks),
            _ => evaluator.with_dense(encoder.as_ref(), index),
        };
    }
    if let (Some(encoder), Some(trag)) = (&encoder, &trag) {
        evaluator = evaluator.with_trag(encoder.as_ref(), trag);
    }
    if let Some(reranker) = reranker.as_mut() {
        evaluator = evaluator.with_reranker(reranker);
    }
    let progress = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(pending as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} queries  {per_sec}  eta {eta}  {msg}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let on_done = |record: &tableseek::eval::QueryRecord| {
        progress.set_message(record.qid.clone());
        progress.inc(1);
    };
    let drive = ModelDrive {
        concurrency: usize::try_from(args.concurrency).unwrap_or(usize::MAX),
        kv_budget_bytes: args.kv_memory,
        enable_thinking: args.agent.enable_thinking,
        constrain: args.agent.constrain.is_on(),
    };
    let summary = run_dir.run_model(&evaluator, model, drive, &queries, on_done)?;
    progress.finish_and_clear();
    println!(
        "{}",
        render_report(&[(&args.out.display().to_string(), &summary)])
    );
    Ok(())
}
