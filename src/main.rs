//! The `tableseek` command line: parses arguments and dispatches to the library. Each subcommand
//! group lives in its own file under `src/cli/`.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tableseek::keep_freed_memory();
    exit_quietly_on_closed_pipe();
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

/// Rust ignores SIGPIPE, so `tableseek generate --json | head -c 100` made every later `println!`
/// panic with a backtrace. The default action ends the process quietly, as `cat` or `grep` do;
/// evaluations lose nothing by it (their records are on disk and resumable).
fn exit_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
