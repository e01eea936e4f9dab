//! The `tableseek` command line: parses arguments and dispatches to the library. Each subcommand
//! group lives in its own file under `src/cli/`.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    keep_freed_memory();
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

/// candle allocates a fresh buffer for every op's output, many above glibc's mmap threshold
/// (32 MiB at most), which glibc maps and unmaps per call, so every op paid page faults and page
/// zeroing again (~20% of MiniLM encoding time in `perf`). Serving all allocations from the heap
/// and never trimming it keeps freed memory in the process for reuse: 1.4x tables/s for MiniLM
/// (`scripts/bench-embed.sh`). The cost is that peak RSS stays resident until exit; model
/// weights are file mappings and are not affected.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters and is called before any thread
        // exists; a rejected value leaves glibc's default in place.
        unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0);
            libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        }
    }
}
