//! `tableseek corpus stats|convert`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};

use tableseek::corpus::export::{export, CorpusStats};
use tableseek::corpus::{Corpus, LoadOptions, LoadReport, Serialization, TextFormat};

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Tables loaded per format, skipped files with reasons, rows, cells, bytes.
    Stats {
        dir: PathBuf,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write every table of DIR to OUT in one format (or a seeded mix of three).
    Convert {
        dir: PathBuf,
        #[arg(long, value_enum)]
        format: FormatArg,
        /// Seed of the `mixed` assignment.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Transpose every table first (its first column becomes the header).
        #[arg(long)]
        transpose: bool,
        #[arg(long)]
        out: PathBuf,
    },
}

/// A serialization chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Csv,
    Markdown,
    Html,
    Mixed,
}

impl FormatArg {
    pub fn serialization(self, seed: u64) -> Serialization {
        match self {
            FormatArg::Csv => Serialization::Fixed(TextFormat::Csv),
            FormatArg::Markdown => Serialization::Fixed(TextFormat::Markdown),
            FormatArg::Html => Serialization::Fixed(TextFormat::Html),
            FormatArg::Mixed => Serialization::Mixed { seed },
        }
    }
}

pub fn run(cmd: CorpusCommand) -> anyhow::Result<()> {
    match cmd {
        CorpusCommand::Stats { dir, json } => stats(&dir, json),
        CorpusCommand::Convert {
            dir,
            format,
            seed,
            transpose,
            out,
        } => convert(&dir, format.serialization(seed), transpose, &out),
    }
}

fn stats(dir: &Path, json: bool) -> anyhow::Result<()> {
    let (corpus, report) = load(dir)?;
    let stats = CorpusStats::of(&corpus, &report);
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &stats)?;
        writeln!(out)?;
        return Ok(());
    }
    write!(out, "{stats}")?;
    Ok(())
}

/// What any command may load, set once from the global flags.
#[derive(Debug, Clone, clap::Args)]
pub struct CorpusLimits {
    /// Skip (and report) a table whose cells take more than this, e.g. `64MiB`.
    #[arg(long, global = true, value_parser = parse_size, default_value = "64MiB")]
    pub max_table_bytes: u64,
    /// Refuse a corpus whose table files take more than this, e.g. `8GiB` (default: half of the
    /// memory available; the corpus is held in memory).
    #[arg(long, global = true, value_parser = parse_size)]
    pub max_corpus_bytes: Option<u64>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    tableseek::engine::parse_bytes(text).map(|bytes| bytes as u64)
}

static LIMITS: OnceLock<CorpusLimits> = OnceLock::new();

pub fn set_limits(limits: &CorpusLimits) {
    // Set once per process, before any command runs; a second call changes nothing.
    let _ = LIMITS.set(limits.clone());
}

/// Loads with a progress bar and logs what was lost, so every command reports bad input the same way.
pub fn load(dir: &Path) -> anyhow::Result<(Corpus, LoadReport)> {
    let mut options = LoadOptions::default().progress(true);
    if let Some(limits) = LIMITS.get() {
        options = options
            .max_table_bytes(limits.max_table_bytes)
            .max_corpus_bytes(limits.max_corpus_bytes);
    }
    let (corpus, report) =
        Corpus::load(dir, &options).with_context(|| format!("loading {}", dir.display()))?;
    for skipped in &report.skipped {
        tracing::warn!("skipped {}: {}", skipped.path.display(), skipped.reason);
    }
    for warning in &report.warnings {
        tracing::warn!("{warning}");
    }
    Ok((corpus, report))
}

fn convert(
    dir: &Path,
    serialization: Serialization,
    transposed: bool,
    out: &Path,
) -> anyhow::Result<()> {
    let (corpus, report) = load(dir)?;
    let written = export(&corpus, serialization, transposed, out)?;
    eprintln!(
        "wrote {} tables to {} ({} skipped, {} empty)",
        written,
        out.display(),
        report.skipped.len(),
        report.empty_tables
    );
    Ok(())
}
