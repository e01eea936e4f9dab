#[derive(Debug, clap::Args)]
pub struct GrepArgs {
    /// Corpus directory.
    pub dir: std::path::PathBuf,
}

pub fn run(args: GrepArgs) -> anyhow::Result<()> {
    anyhow::bail!("grep not implemented yet ({})", args.dir.display())
}
