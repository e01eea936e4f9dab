//! Benchmark builders. [`tcr`] builds a TCR-Bench-style sibling benchmark from SQLite databases and
//! single-table questions with gold SQL (Spider's layout): every table a question touches becomes a
//! group of variants that differ in rows, columns, schema names and value formats; a question is kept
//! only when exactly one variant holds the evidence for its answer.
//!
//! The output directory holds `corpus/` (one file per variant, loadable with [`crate::corpus`]),
//! `queries.jsonl` in the eval format ([`crate::eval::EvalQuery`] plus TCR fields), `tables.jsonl`
//! (how each variant was made) and `manifest.json` (seed, counts, source hashes).

mod group;
mod sql;
pub mod tcr;
pub mod variants;

use std::path::PathBuf;

pub use tcr::{
    build_tcr, Manifest, QuestionType, TableRecord, TcrBench, TcrOptions, TcrQuery, TcrTable,
};
pub use variants::{ColumnFormat, Dictionaries, NamingStyle};

/// Errors of the benchmark builders.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// The in-memory copy of a variant could not be built (a bug or a value SQLite rejects).
    #[error("variant {id}: {source}")]
    Variant {
        id: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("no SQLite databases (*.sqlite, *.sqlite3, *.db) under {}", .0.display())]
    NoDatabases(PathBuf),
    #[error("{} exists and is not empty; choose a new output directory", .0.display())]
    OutputNotEmpty(PathBuf),
    #[error("invalid options: {0}")]
    Options(String),
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
}
