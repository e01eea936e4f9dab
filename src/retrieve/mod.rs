//! Baseline retrievers on the same engine and device as the agent: BM25, dense (MiniLM or a decoder
//! LLM with last-token pooling), and an LLM reranker (Qwen3-Reranker format) over a dense ranking.

pub mod batch;
pub mod bert;
mod bert_cpu;
pub mod bm25;
pub mod chunks;
pub mod dense;
pub mod encoder;
pub mod fusion;
pub mod llm_embed;
pub mod pipeline;
pub mod rerank;
pub mod trag;
