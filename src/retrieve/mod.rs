//! Baseline retrievers (dense, rerank, BM25) on the same engine and device as the agent.

pub mod bert;
pub mod bm25;
pub mod dense;
