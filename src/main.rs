//! The `tableseek` command line: parses arguments and dispatches to the library. Each subcommand
//! group lives in its own file under `src/cli/`.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tableseek::keep_freed_memory();
    let args = cli::Cli::parse();
    cli::init_tracing(args.verbose);
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
