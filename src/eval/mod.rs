//! Datasets, the paper's metrics, statistics, resumable runs, reports.
