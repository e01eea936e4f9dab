//! `tableseek report` (rebuild summaries and one comparison table from run directories, or join
//! `--shard` runs) and `tableseek compare` (paired significance tests between two runs).

use std::path::PathBuf;

use tableseek::eval::stats::BootstrapOptions;
use tableseek::eval::{
    compare_runs, merge_shards, read_records, render_comparison, render_report, write_summary,
};

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
