//! `tableseek bench build-tcr`: build a TCR-style sibling benchmark from SQLite databases.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use tableseek::bench::{build_tcr, TcrOptions};

use super::corpus::FormatArg;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Sibling groups (row/column subsets, renamed schemas, reformatted values) from SQLite tables
    /// and single-table questions with gold SQL; keeps questions only one variant can answer.
    BuildTcr(BuildTcrArgs),
}

#[derive(Debug, clap::Args)]
pub struct BuildTcrArgs {
    /// Directory of SQLite databases (`<db>.sqlite`, or Spider's `<db>/<db>.sqlite`).
    #[arg(long)]
    pub db: PathBuf,
    /// JSONL questions `{qid, db_id, question, sql, table}` (Spider's spider_single_table.jsonl).
    #[arg(long)]
    pub questions: PathBuf,
    /// New (or empty) output directory: corpus/, queries.jsonl, tables.jsonl, manifest.json.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Variants per sibling group: `LO..HI` (inclusive) or one number.
    #[arg(long, default_value = "3..5", value_parser = parse_range)]
    pub siblings: (usize, usize),
    /// Most rows per variant.
    #[arg(long, default_value_t = 80)]
    pub rows: usize,
    /// Corpus file format; `mixed` picks CSV, Markdown or HTML per table from the seed.
    #[arg(long, value_enum, default_value = "mixed")]
    pub format: FormatArg,
}

fn parse_range(text: &str) -> Result<(usize, usize), String> {
    let parse = |s: &str| s.trim().parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
    match text.split_once("..") {
        Some((lo, hi)) => Ok((parse(lo)?, parse(hi.trim_start_matches('='))?)),
        None => parse(text).map(|n| (n, n)),
    }
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::BuildTcr(args) => build(args),
    }
}

fn build(args: BuildTcrArgs) -> anyhow::Result<()> {
    let options = TcrOptions {
        seed: args.seed,
        siblings: args.siblings,
        rows: args.rows,
        serialization: args.format.serialization(args.seed),
        progress: std::io::stderr().is_terminal(),
    };
    let bench = build_tcr(&args.db, &args.questions, &options).with_context(|| {
        format!(
            "building from {} and {}",
            args.db.display(),
            args.questions.display()
        )
    })?;
    bench
        .write(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let m = &bench.manifest;
    let types: Vec<String> = m
        .question_types
        .iter()
        .map(|(t, n)| format!("{} {n}", t.name()))
        .collect();
    let dropped: Vec<String> = m.dropped.iter().map(|(r, n)| format!("{r}: {n}")).collect();
    eprintln!(
        "kept {} of {} questions ({}); {} groups ({} with questions), {} tables, {} corpus bytes -> {}",
        m.questions_kept,
        m.questions_read,
        types.join(", "),
        m.groups,
        m.groups_with_questions,
        m.tables,
        m.corpus_bytes,
        args.out.display()
    );
    if !dropped.is_empty() {
        eprintln!("dropped: {}", dropped.join("; "));
    }
    Ok(())
}
