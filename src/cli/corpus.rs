//! `tableseek corpus stats|convert`.

use std::io::Write;
use std::path::{Path, PathBuf};

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
    writeln!(out, "tables        {}", stats.tables)?;
    for (format, n) in &stats.by_format {
        writeln!(
            out,
            "  {:<11} {n}",
            serde_json::to_value(format)?.as_str().unwrap_or("?")
        )?;
    }
    writeln!(out, "rows          {}", stats.rows)?;
    writeln!(out, "cells         {}", stats.cells)?;
    writeln!(out, "files         {} ({} bytes)", stats.files, stats.bytes)?;
    writeln!(out, "empty tables  {}", stats.empty_tables)?;
    writeln!(out, "ignored files {}", stats.ignored_files)?;
    writeln!(out, "skipped       {}", stats.skipped.len())?;
    for skipped in &stats.skipped {
        writeln!(out, "  {}: {}", skipped.path, skipped.reason)?;
    }
    writeln!(out, "transcoded    {}", stats.transcoded.len())?;
    for file in &stats.transcoded {
        writeln!(out, "  {}: from {}", file.path, file.encoding)?;
    }
    for warning in &stats.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}

/// Loads with a progress bar and logs what was lost, so every command reports bad input the same way.
pub fn load(dir: &Path) -> anyhow::Result<(Corpus, LoadReport)> {
    let (corpus, report) = Corpus::load(dir, &LoadOptions::default().progress(true))
        .with_context(|| format!("loading {}", dir.display()))?;
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
