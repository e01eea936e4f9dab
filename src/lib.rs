//! tableseek: find the table that answers a question inside a large, messy table corpus, and
//! answer it, with the language models running in this process (candle, CPU or CUDA).
//!
//! Data flows `corpus` → `grep` → `agent` → `eval`; the `engine` is a service that the agent and the
//! retrievers call. See `ARCHITECTURE.md` for the map.

pub mod agent;
pub mod bench;
mod calendar;
pub mod corpus;
pub mod engine;
pub mod eval;
pub mod grep;
pub mod provenance;
pub mod retrieve;
pub mod sql;

/// candle allocates a fresh buffer for every op's output, many above glibc's mmap threshold
/// (32 MiB at most), which glibc maps and unmaps per call, so every op paid page faults and page
/// zeroing again (~20% of MiniLM encoding time in `perf`). Serving all allocations from the heap
/// and never trimming it keeps freed memory in the process for reuse: 1.4x tables/s for MiniLM
/// (`scripts/bench-embed.sh`). The cost is that peak RSS stays resident until exit; model
/// weights are file mappings and are not affected.
///
/// Process-wide: call it first in `main`, before any thread starts (the CLI and the examples do).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters, under glibc's own lock; a rejected
        // value leaves glibc's default in place.
        unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0);
            libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        }
    }
}
