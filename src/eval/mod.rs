//! Datasets, the paper's metrics, statistics, resumable runs, reports.
//!
//! - [`metrics`]: per-query retrieval, QA and verification scores and their aggregates, format
//!   robustness, refinement curves.
//! - [`stats`]: paired significance tests on per-query scores.

pub mod stats;

mod special;
