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
pub mod retrieve;
