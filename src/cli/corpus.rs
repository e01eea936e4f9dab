//! `tableseek corpus stats|convert`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use serde::Serialize;

use tableseek::corpus::{
    serialize, transpose, Corpus, LoadOptions, LoadReport, Serialization, SourceFormat, TextFormat,
};

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

#[derive(Serialize)]
struct Stats {
    tables: usize,
    skipped: Vec<SkippedJson>,
    by_format: BTreeMap<SourceFormat, usize>,
    rows: usize,
    cells: usize,
    bytes: u64,
    files: usize,
    empty_tables: usize,
    ignored_files: usize,
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct SkippedJson {
    path: String,
    reason: String,
}

fn stats(dir: &Path, json: bool) -> anyhow::Result<()> {
    let (corpus, report) = load(dir)?;
    let mut by_format = BTreeMap::new();
    let (mut rows, mut cells) = (0, 0);
    for table in corpus.tables() {
        *by_format.entry(table.source_format).or_insert(0) += 1;
        rows += table.rows.len();
        cells += table.header.len() + table.rows.iter().map(Vec::len).sum::<usize>();
    }
    let stats = Stats {
        tables: corpus.len(),
        skipped: report
            .skipped
            .iter()
            .map(|s| SkippedJson {
                path: s.path.display().to_string(),
                reason: s.reason.clone(),
            })
            .collect(),
        by_format,
        rows,
        cells,
        bytes: report.bytes,
        files: report.files,
        empty_tables: report.empty_tables,
        ignored_files: report.ignored.len(),
        warnings: report.warnings.clone(),
    };
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
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = BTreeSet::new();
    for table in corpus.tables() {
        let table = if transposed {
            transpose(table)
        } else {
            table.clone()
        };
        let format = serialization.format_for(&table);
        let mut name = output_name(&table.id, format);
        if !written.insert(name.clone()) {
            // Two inputs with the same stem (`a.csv`, `a.md`): keep the full id for the later one.
            name = format!("{}.{}", table.id.replace('#', "__"), extension(format));
            written.insert(name.clone());
        }
        let path = out.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, serialize(&table, format))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "wrote {} tables to {} ({} skipped, {} empty)",
        written.len(),
        out.display(),
        report.skipped.len(),
        report.empty_tables
    );
    Ok(())
}

fn extension(format: TextFormat) -> &'static str {
    match format {
        TextFormat::Csv => "csv",
        TextFormat::Markdown => "md",
        TextFormat::Html => "html",
    }
}

/// `dir/t.csv` → `dir/t.md`; `t.jsonl#7` → `t__7.md`. The last extension goes only when it is a table
/// format's, so `x.html.csv` keeps its stem `x.html`.
fn output_name(id: &str, format: TextFormat) -> String {
    let (path, fragment) = match id.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (id, None),
    };
    let stem = match path.rsplit_once('.') {
        Some((stem, ext))
            if !stem.is_empty()
                && !ext.contains('/')
                && [
                    "csv", "tsv", "tab", "md", "markdown", "html", "htm", "json", "jsonl", "ndjson",
                ]
                .contains(&ext.to_ascii_lowercase().as_str()) =>
        {
            stem
        }
        _ => path,
    };
    let fragment = fragment
        .map(|f| format!("__{}", f.replace(['/', '\\'], "_")))
        .unwrap_or_default();
    format!("{stem}{fragment}.{}", extension(format))
}
