//! `tableseek grep`: rank a corpus by the share of patterns each table contains, with previews.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::corpus::FormatArg;
use tableseek::grep::{preview, rank, Evidence, PatternSet, PreviewOptions};

#[derive(Debug, clap::Args)]
pub struct GrepArgs {
    /// Corpus directory (or a single table file).
    pub dir: PathBuf,
    /// A case-insensitive regex; invalid ones are matched literally. Repeat for several.
    #[arg(short = 'p', long = "pattern", required = true)]
    pub patterns: Vec<String>,
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// small (1 row per pattern, 5 in all), medium (2/10), big (3/15), full (whole table).
    #[arg(long, default_value_t = Evidence::Small)]
    pub evidence: Evidence,
    /// Previews with matched rows only (no head, no header).
    #[arg(long)]
    pub match_only: bool,
    /// Search every table in this serialization instead of its own format.
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Seed of `--format mixed`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    patterns: &'a [String],
    results: Vec<Result<'a>>,
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Result<'a> {
    rank: usize,
    table_id: &'a str,
    score: f32,
    matched_patterns: Vec<&'a str>,
    preview: String,
}

pub fn run(args: GrepArgs) -> anyhow::Result<()> {
    let patterns = PatternSet::compile(&args.patterns);
    for warning in patterns.warnings() {
        tracing::warn!("{warning}");
    }
    let (corpus, _report) = super::corpus::load(&args.dir)?;
    let corpus = match args.format {
        Some(format) => corpus.reserialized(format.serialization(args.seed)),
        None => corpus,
    };
    let opts = PreviewOptions::for_evidence(args.evidence).match_only(args.match_only);
    // Tables that match no pattern are not results, however few tables match.
    let results: Vec<Result<'_>> = rank(&corpus, &patterns)
        .into_iter()
        .filter(|hit| hit.score > 0.0)
        .take(args.top_k)
        .enumerate()
        .map(|(i, hit)| Result {
            rank: i + 1,
            table_id: corpus.id(hit.table),
            score: hit.score,
            matched_patterns: hit
                .matched
                .iter()
                .map(|&p| patterns.patterns()[p].as_str())
                .collect(),
            preview: preview(&corpus, hit.table, &patterns, &opts),
        })
        .collect();

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        let output = Output {
            patterns: patterns.patterns(),
            results,
            warnings: patterns.warnings(),
        };
        serde_json::to_writer(&mut out, &output)?;
        writeln!(out)?;
    } else {
        for result in &results {
            writeln!(
                out,
                "{}. {:.3}  {}  [{}]",
                result.rank,
                result.score,
                result.table_id,
                result.matched_patterns.join(", ")
            )?;
            for line in result.preview.lines() {
                writeln!(out, "    {line}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
