use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Tables loaded per format, skipped files with reasons, rows, cells, bytes.
    Stats {
        dir: std::path::PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: CorpusCommand) -> anyhow::Result<()> {
    match cmd {
        CorpusCommand::Stats { dir, .. } => {
            anyhow::bail!("corpus stats not implemented yet ({})", dir.display())
        }
    }
}
