//! `tableseek eval` (resumable evaluation runs), `tableseek report` (rebuild summaries and one
//! comparison table from run directories, or join `--shard` runs) and `tableseek compare` (paired significance tests).

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use tableseek::agent::tablerag::{SqlTables, TableRagConfig};
use tableseek::agent::{Candidates, CorpusSpace, EngineLlm, SqlAnswer, DEFAULT_MAX_TABLE_CHARS};
use tableseek::corpus::{Corpus, LoadOptions};
use tableseek::engine::{parse_bytes, BatchOptions, ChatModel, DeviceMap};
use tableseek::eval::shard::SHARD_KEY;
use tableseek::eval::stats::BootstrapOptions;
use tableseek::eval::{
    compare_runs, load_queries, merge_shards, read_records, render_comparison, render_report,
    resolve_dataset, write_summary, EvalOptions, Evaluator, Method, QaMode, RunConfig, RunDir,
    Shard,
};
use tableseek::retrieve::chunks::{chunk_tables, ChunkOptions};

use super::ask::AgentArgs;
use super::model_args::ModelArgs;
use super::retrievers::{EncoderArgs, RerankArgs};

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// `tabfact-test-1k`, `tabfact-test`, `spider-single-table` (from the shared data dir:
    /// $TABLESEEK_SHARED, else ../shared beside the source tree) or a JSONL file of queries.
    #[arg(long)]
    pub dataset: String,
    /// Directory of tables; defaults to the named dataset's own corpus.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// tableseek, bm25, dense, rerank, oracle, no-table or tablerag.
    #[arg(long)]
    pub method: Method,
    /// TableRAG's settings.
    #[command(flatten)]
    pub tablerag: TableRagArgs,
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

const TABLERAG_MAX_NEW_TOKENS: usize = 256;

#[derive(Debug, clap::Args)]
pub struct TableRagArgs {
    /// TableRAG: most decompose iterations per query.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_iterations: u64,
    /// TableRAG: chunks recalled per retrieval (N).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_recall: u64,
    /// TableRAG: chunks kept for compose and SQL (k).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_top_k: u64,
    /// TableRAG: the SQL reads the tables of the top-k chunks (the paper) or the first
    /// retrieved table only (the paper's code).
    #[arg(long, value_enum, default_value_t = SqlTables::Retrieved)]
    pub tablerag_sql_tables: SqlTables,
    /// TableRAG: one more call that must answer when the iterations run out.
    #[arg(long)]
    pub tablerag_force_answer: bool,
    /// TableRAG: most characters per table chunk (row-aligned, header repeated).
    #[arg(long, default_value_t = ChunkOptions::default().max_chars)]
    pub tablerag_chunk_chars: usize,
    /// TableRAG: NL2SQL retries after a failed query, each shown the error (0: the paper, the
    /// error goes to compose).
    #[arg(long, default_value_t = TableRagConfig::default().sql_retries)]
    pub tablerag_sql_retries: usize,
}

impl TableRagArgs {
    fn config(&self, max_new_tokens: usize) -> TableRagConfig {
        TableRagConfig {
            max_iterations: self.tablerag_iterations as usize,
            recall: self.tablerag_recall as usize,
            top_k: self.tablerag_top_k as usize,
            sql_tables: self.tablerag_sql_tables,
            force_answer: self.tablerag_force_answer,
            max_new_tokens,
            sql_retries: self.tablerag_sql_retries,
            ..TableRagConfig::default()
        }
    }

    fn chunk_options(&self) -> ChunkOptions {
        ChunkOptions {
            max_chars: self.tablerag_chunk_chars,
            ..ChunkOptions::default()
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Run directories; each gets a fresh summary.json and report.md, and with several a
    /// comparison table is printed. With --merge: the shard runs to join.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Join the `eval --shard K/N` runs given as RUNS into this new run directory (queries in
    /// dataset order, as the unsharded run writes them), then report it.
    #[arg(long, value_name = "OUT")]
    pub merge: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    pub run_a: PathBuf,
    pub run_b: PathBuf,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    #[arg(long, default_value_t = 2024)]
    pub seed: u64,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

fn shared_dir() -> PathBuf {
    std::env::var_os("TABLESEEK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// The revision the binary was built from (see build.rs); failing that, the source checkout's HEAD
/// at run time. Uncommitted changes are not recorded either way.
fn git_revision() -> Option<String> {
    if let Some(built) = option_env!("TABLESEEK_BUILD_REVISION") {
        return Some(built.to_string());
    }
    let output = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn sha256_file(path: &Path, hasher: &mut Sha256) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buffer[..n]);
    }
}

/// The weights' identity: the file's sha256, or for a checkpoint directory the sha256 over its
/// files in name order (names included).
fn model_sha256(model: &ModelArgs) -> anyhow::Result<Option<String>> {
    if model.random_init.is_some() {
        return Ok(None);
    }
    let mut hasher = Sha256::new();
    if model.model.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&model.model)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in files {
            hasher.update(file.file_name().unwrap_or_default().as_encoded_bytes());
            sha256_file(&file, &mut hasher)?;
        }
    } else {
        sha256_file(&model.model, &mut hasher)?;
    }
    Ok(Some(hex::encode(hasher.finalize())))
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
    let dense = matches!(
        args.method,
        Method::Dense | Method::Rerank | Method::Tablerag | Method::Hybrid
    );
    let mut options = serde_json::json!({
            "dataset": dataset,
            "corpus": corpus_dir,
            "method": args.method,
            "model": args.model.model,
            "tokenizer": args.model.tokenizer,
            "random_init": args.model.random_init,
            "device": args.model.placement.device,
            "dtype": args.model.placement.dtype,
            "steps": args.agent.steps,
            "strategy": agent_config.strategy,
            "evidence": agent_config.evidence,
            "fallback_tables": args.agent.fallback_tables,
            "history": agent_config.history,
            "max_new_tokens": args.agent.max_new_tokens,
            "enable_thinking": args.agent.enable_thinking,
            "constrain": args.agent.constrain,
            "ablations": agent_config.ablations,
            "max_table_chars": args.max_table_chars,
            "timings": !args.no_timings,
    });
    // Only where they matter, so configs of other methods stay as they were (resume compares them).
    if args.method == Method::Tableseek {
        options["widen_empty"] = serde_json::json!(args.agent.widen_empty);
    }
    if args.agent.qa != QaMode::Text {
        options["qa"] = serde_json::json!(args.agent.qa);
    }
    if args.agent.sql_answer != SqlAnswer::Rows {
        options["sql_answer"] = serde_json::json!(args.agent.sql_answer);
    }
    if args.agent.candidates != Candidates::Grep {
        options["candidates"] = serde_json::json!(args.agent.candidates);
    }
    if dense {
        options["embed_model"] = serde_json::json!(args.encoder.model_path());
        options["embed_max_length"] = serde_json::json!(args.encoder.max_length);
        options["embed_task"] = serde_json::json!(args.encoder.embed_task);
        options["embed_dim"] = serde_json::json!(args.encoder.embed_dim);
    }
    if args.method == Method::Tablerag {
        let t = &args.tablerag;
        options["tablerag"] = serde_json::json!({
            "iterations": t.tablerag_iterations,
            "recall": t.tablerag_recall,
            "top_k": t.tablerag_top_k,
            "sql_tables": t.tablerag_sql_tables,
            "force_answer": t.tablerag_force_answer,
            "chunk_chars": t.tablerag_chunk_chars,
            "chunk_overlap": t.chunk_options().overlap,
            "sql_retries": t.tablerag_sql_retries,
        });
    }
    if args.method == Method::Rerank {
        options["rerank_model"] = serde_json::json!(args.rerank.model_path());
        options["rerank_depth"] = serde_json::json!(args.rerank.depth());
        options["rerank_instruction"] = serde_json::json!(args.rerank.rerank_instruction);
        options["rerank_max_length"] = serde_json::json!(args.rerank.rerank_max_length);
    }
    if let Some(shard) = args.shard {
        options[SHARD_KEY] = serde_json::json!(shard.info(whole));
    }
    let config = RunConfig {
        tableseek_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: git_revision(),
        model_sha256: model_sha256(&args.model)?,
        options,
        limit: args.limit,
        command_line: std::env::args().collect(),
    };
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
    let (corpus, report) = Corpus::load(&corpus_dir, &LoadOptions::default())
        .with_context(|| format!("loading corpus {}", corpus_dir.display()))?;
    for skipped in &report.skipped {
        tracing::warn!(path = %skipped.path.display(), reason = %skipped.reason, "skipped");
    }
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
        Some(encoder) => {
            let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();
            Some(args.encoder.index(encoder.as_ref(), &texts)?)
        }
        None => None,
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
    let (thinking, constrain) = (args.agent.enable_thinking, args.agent.constrain.is_on());
    fn llm_for(model: &mut ChatModel, thinking: Option<bool>, constrain: bool) -> EngineLlm<'_> {
        EngineLlm::new(model)
            .enable_thinking(thinking)
            .constrain(constrain)
    }
    let summary = if args.concurrency > 1 {
        let batch = BatchOptions {
            kv_budget_bytes: args.kv_memory,
            ..BatchOptions::default()
        };
        let (engine, engine_thread) = model.into_engine(batch)?;
        let mut models = (0..args.concurrency)
            .map(|_| {
                engine
                    .engine_clone()
                    .context("an engine-backed model has handles")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        drop(engine);
        let llms = models
            .iter_mut()
            .map(|m| llm_for(m, thinking, constrain))
            .collect();
        let summary = run_dir.run_concurrent(&evaluator, llms, &queries, on_done)?;
        drop(models);
        let batcher = engine_thread.join()?;
        tracing::info!(
            peak_sequences = batcher.peak_sequences(),
            "concurrent evaluation done"
        );
        summary
    } else {
        let mut llm = llm_for(&mut model, thinking, constrain);
        run_dir.run(&evaluator, &mut llm, &queries, on_done)?
    };
    progress.finish_and_clear();
    println!(
        "{}",
        render_report(&[(&args.out.display().to_string(), &summary)])
    );
    Ok(())
}

pub fn run_report(args: ReportArgs) -> anyhow::Result<()> {
    if let Some(out) = &args.merge {
        let summary = merge_shards(&args.runs, out)?;
        let name = out.display().to_string();
        println!("{}", render_report(&[(name.as_str(), &summary)]));
        return Ok(());
    }
    let mut summaries = Vec::new();
    for dir in &args.runs {
        let records = read_records(dir)?;
        summaries.push((dir.display().to_string(), write_summary(dir, &records)?));
    }
    let rows: Vec<(&str, &_)> = summaries.iter().map(|(n, s)| (n.as_str(), s)).collect();
    println!("{}", render_report(&rows));
    Ok(())
}

pub fn run_compare(args: CompareArgs) -> anyhow::Result<()> {
    let a = read_records(&args.run_a)?;
    let b = read_records(&args.run_b)?;
    let options = BootstrapOptions::default()
        .resamples(args.resamples)
        .seed(args.seed);
    let comparison = compare_runs(&a, &b, &options);
    anyhow::ensure!(
        comparison.common > 0,
        "{} and {} have no query in common",
        args.run_a.display(),
        args.run_b.display()
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!(
            "{}",
            render_comparison(
                &args.run_a.display().to_string(),
                &args.run_b.display().to_string(),
                &comparison
            )
        );
    }
    Ok(())
}
