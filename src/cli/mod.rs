use clap::{Parser, Subcommand};

mod agent_args;
mod ask;
mod bench;
mod corpus;
mod eval;
mod generate;
mod grep;
mod inspect;
mod model_args;
mod report;
mod retrieve;
mod retrievers;
mod tablerag_args;
mod tas_args;
mod trag_args;

#[derive(Debug, Parser)]
#[command(
    name = "tableseek",
    version,
    about = "Find the table that answers a question, and answer it."
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(flatten)]
    pub corpus_limits: corpus::CorpusLimits,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and convert table corpora.
    #[command(subcommand)]
    Corpus(corpus::CorpusCommand),
    /// Rank the tables of a corpus by the share of patterns they contain, with previews.
    Grep(grep::GrepArgs),
    /// Find the table that answers a question (or verifies a claim) and answer it.
    Ask(ask::AskArgs),
    /// One greedy reply from a chat model (scriptable; --json prints ids and counters).
    Generate(generate::GenerateArgs),
    /// Talk to a model interactively.
    Chat(generate::ChatArgs),
    /// Rank tables for a file of queries with a baseline retriever (dense, rerank or BM25).
    Retrieve(retrieve::RetrieveArgs),
    /// Run a method over a dataset into a resumable run directory.
    // Boxed: the encoder and reranker flags make it far larger than the other variants.
    Eval(Box<eval::EvalArgs>),
    /// Rebuild summary.json and report.md of run directories from their queries.jsonl.
    Report(report::ReportArgs),
    /// Paired significance tests between two runs over their common queries.
    Compare(report::CompareArgs),
    /// A model's facts and memory plan (weights per device, KV per 1k tokens, the context that
    /// fits), read from its headers without loading weights.
    Inspect(inspect::InspectArgs),
    /// Build benchmarks (TCR-style sibling groups from SQLite databases).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

pub fn run(mut cli: Cli) -> anyhow::Result<()> {
    model_args::init_threads(cli.command.model_args().and_then(|model| model.threads))?;
    cli.command.resolve_model_ids()?;
    corpus::set_limits(&cli.corpus_limits);
    match cli.command {
        Command::Corpus(cmd) => corpus::run(cmd),
        Command::Grep(args) => grep::run(args),
        Command::Ask(args) => ask::run(args),
        Command::Generate(args) => generate::run_generate(args),
        Command::Chat(args) => generate::run_chat(args),
        Command::Retrieve(args) => retrieve::run(args),
        Command::Eval(args) => eval::run_eval(*args),
        Command::Report(args) => report::run_report(args),
        Command::Compare(args) => report::run_compare(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Bench(cmd) => bench::run(cmd),
    }
}

impl Command {
    /// Model flags naming `ORG/NAME[@REVISION][:QUANT]` become paths in the local Hugging Face
    /// cache, before anything else reads them.
    fn resolve_model_ids(&mut self) -> anyhow::Result<()> {
        match self {
            Command::Ask(args) => args.model.resolve(),
            Command::Generate(args) => args.model.resolve(),
            Command::Chat(args) => args.model.resolve(),
            Command::Eval(args) => {
                args.model.resolve()?;
                args.encoder.resolve()?;
                args.rerank.resolve()
            }
            Command::Retrieve(args) => {
                args.encoder.resolve()?;
                args.rerank.resolve()
            }
            _ => Ok(()),
        }
    }

    fn model_args(&self) -> Option<&model_args::ModelArgs> {
        match self {
            Command::Ask(args) => Some(&args.model),
            Command::Generate(args) => Some(&args.model),
            Command::Chat(args) => Some(&args.model),
            Command::Eval(args) => Some(&args.model),
            _ => None,
        }
    }
}
