//! Datasets, the paper's metrics, statistics, resumable runs, reports.
//!
//! - [`metrics`]: per-query retrieval, QA and verification scores and their aggregates, format
//!   robustness, refinement curves.
//! - [`answer`]: SQuAD-style answer normalisation, token F1 and exact match.
//! - [`stats`]: paired significance tests on per-query scores.

pub mod answer;
pub mod metrics;
pub mod stats;

mod special;
