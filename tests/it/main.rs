//! One integration-test binary for the whole crate: linking a separate binary per file (each one
//! carrying candle, tokenizers, llguidance and SQLite) cost minutes of CI and gigabytes of disk.
//! Each module is one former test file; run a part with `cargo test --test it <module>::`.

mod agent_support;
mod common;

mod agent_loop;
mod agent_parse;
mod agent_props;
mod agent_switches;
mod agent_tabfact;
mod bad_input;
mod bench_tcr;
mod bm25_props;
mod bm25_tabfact;
mod chat_templates;
mod constrain;

mod corpus_load;
mod corpus_serialize;
mod engine_batch;
mod engine_errors;
mod engine_gguf;
mod engine_moe;
mod engine_parity;
mod engine_plan;
mod engine_qwen25;
mod engine_random;
mod engine_smollm2;
mod eval_datasets;
mod eval_kill;
mod eval_metrics;
mod eval_run;
mod eval_stats;
mod fetch_models;
mod fuzz_regressions;
mod grep_rank;
mod hub_cache;
mod retrieve_bert;
mod retrieve_cli;
mod retrieve_dense;
mod retrieve_qwen3;
mod tokenizer_gguf;
mod tokenizer_hf_parity;
mod tokenizer_json;
