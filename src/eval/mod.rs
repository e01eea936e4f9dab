//! Datasets, the paper's metrics, statistics, resumable runs, reports.
//!
//! - [`dataset`]: the JSONL query format and the TabFact adapter.
//! - [`run`]: the evaluated methods ([`Method`]) and the per-query [`QueryRecord`].
//! - [`rundir`]: resumable run directories (`config.json`, `queries.jsonl`, `summary.json`,
//!   `report.md`, `plots/`).
//! - [`shard`]: `--shard K/N` (a deterministic 1/N of a dataset) and merging shard runs.
//! - [`report`]: summaries, the main-results table, paired comparisons of two runs.
//! - [`plots`]: the SVG plots of a run (time by stage, calls per query, top-1 by round, score by
//!   format), drawn with plotters.
//! - [`metrics`]: per-query retrieval, QA and verification scores and their aggregates, format
//!   robustness, refinement curves.
//! - [`answer`]: SQuAD-style answer normalisation, token F1 and exact match.
//! - [`stats`]: paired significance tests on per-query scores.

pub mod answer;
pub mod dataset;
pub mod metrics;
pub mod options;
pub mod plots;
pub mod report;
pub mod run;
pub mod rundir;
pub mod shard;
pub mod stats;

mod special;

pub use dataset::{
    load_queries, load_ranking_queries, resolve_dataset, DatasetError, EvalQuery, RankingQuery,
};
pub use report::{compare_runs, render_comparison, render_report, Comparison, Summary};
pub use run::{EvalError, EvalOptions, Evaluator, Method, QaMode, QueryRecord};
pub use rundir::{read_records, write_summary, ModelDrive, RunConfig, RunDir, RunError};
pub use shard::{merge as merge_shards, MergeError, Shard};
