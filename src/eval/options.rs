//! The settings of an evaluation run that can change its records, typed: what `config.json`
//! stores under `options`, and what a resume must find unchanged ([`super::RunConfig`]).
//!
//! One rule keeps old run directories resumable as options are added: a setting is written only
//! where it matters, and only when it differs from the value runs had before it existed
//! ([`RunOptions::omit_unused`]). So a TableSeek run with the default `--candidates grep` stores
//! no `candidates` key, exactly as one made before the flag.

use std::path::PathBuf;

use serde::Serialize;

use super::shard::ShardInfo;
use super::Method;
use crate::agent::tablerag::SqlTables;
use crate::agent::{Ablations, Candidates, Evidence, History, OnOff, QaMode, SqlAnswer, Strategy};
use crate::retrieve::fusion::FusionRule;

/// Every option that affects a query's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOptions {
    pub dataset: PathBuf,
    pub corpus: PathBuf,
    pub method: Method,
    pub model: PathBuf,
    pub tokenizer: Option<PathBuf>,
    pub random_init: Option<String>,
    pub device: String,
    pub dtype: Option<String>,
    pub steps: usize,
    pub strategy: Strategy,
    pub evidence: Evidence,
    pub fallback_tables: usize,
    pub history: History,
    pub max_new_tokens: Option<usize>,
    pub enable_thinking: Option<bool>,
    pub constrain: OnOff,
    pub ablations: Ablations,
    pub max_table_chars: usize,
    pub timings: bool,
    /// TableSeek only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub widen_empty: Option<OnOff>,
    /// Unless text QA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qa: Option<QaMode>,
    /// Unless rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sql_answer: Option<SqlAnswer>,
    /// Unless grep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Candidates>,
    /// With `candidates: hybrid`: how the two rankings are joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_fusion: Option<FusionRule>,
    /// Methods with a dense encoder.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub embed: Option<EmbedOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tablerag: Option<TableRagOptions>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<RerankOptions>,
    /// T-RAG's settings (`trag` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trag: Option<crate::retrieve::trag::TragSettings>,
    /// TaS's settings (`tas` only); `planner: rule` says the loop is rule-driven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tas: Option<crate::agent::tas::TasConfig>,
    /// Shard runs ([`super::shard::SHARD_KEY`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbedOptions {
    pub embed_model: PathBuf,
    pub embed_max_length: Option<usize>,
    pub embed_task: String,
    pub embed_dim: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableRagOptions {
    pub iterations: u64,
    pub recall: u64,
    pub top_k: u64,
    pub sql_tables: SqlTables,
    pub force_answer: bool,
    pub chunk_chars: usize,
    pub chunk_overlap: f64,
    pub sql_retries: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankOptions {
    pub rerank_model: PathBuf,
    pub rerank_depth: usize,
    pub rerank_instruction: String,
    pub rerank_max_length: usize,
}

impl RunOptions {
    /// Drops what the method does not use and what equals the value from before the option
    /// existed (see the module notes).
    pub fn omit_unused(mut self) -> Self {
        let tableseek = self.method == Method::Tableseek;
        if !tableseek {
            self.widen_empty = None;
        }
        if self.qa == Some(QaMode::Text) {
            self.qa = None;
        }
        if self.sql_answer == Some(SqlAnswer::Rows) {
            self.sql_answer = None;
        }
        if self.candidates == Some(Candidates::Grep) {
            self.candidates = None;
        }
        if self.candidates != Some(Candidates::Hybrid) {
            self.candidate_fusion = None;
        }
        let tas_dense = self.method == Method::Tas
            && self
                .tas
                .as_ref()
                .is_some_and(|t| t.uses(crate::agent::tas::search::SearchTool::Dense));
        if !self.method.needs_encoder() && !tas_dense {
            self.embed = None;
        }
        if self.method != Method::Tablerag {
            self.tablerag = None;
        }
        if self.method != Method::Rerank {
            self.rerank = None;
        }
        if self.method != Method::Trag {
            self.trag = None;
        }
        if self.method != Method::Tas {
            self.tas = None;
        }
        self
    }

    /// The JSON `config.json` stores; fails only on a path that is not UTF-8.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tableseek_defaults() -> RunOptions {
        RunOptions {
            dataset: "/work/shared/data/tabfact/test-1k.jsonl".into(),
            corpus: "/work/shared/data/tabfact/tables".into(),
            method: Method::Tableseek,
            model: "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".into(),
            tokenizer: None,
            random_init: None,
            device: "cpu".into(),
            dtype: None,
            steps: 5,
            strategy: "5s1".parse().unwrap(),
            evidence: Evidence::Small,
            fallback_tables: 1,
            history: History::None,
            max_new_tokens: None,
            enable_thinking: None,
            constrain: OnOff::On,
            ablations: Ablations::default(),
            max_table_chars: 16_000,
            timings: true,
            widen_empty: Some(OnOff::On),
            qa: Some(QaMode::Text),
            sql_answer: Some(SqlAnswer::Rows),
            candidates: Some(Candidates::Grep),
            candidate_fusion: Some(FusionRule::default()),
            embed: Some(EmbedOptions {
                embed_model: "models/all-MiniLM-L6-v2".into(),
                embed_max_length: None,
                embed_task: "t".into(),
                embed_dim: None,
            }),
            tablerag: None,
            rerank: None,
            trag: None,
            tas: None,
            shard: None,
        }
    }

    #[test]
    fn default_tableseek_options_match_a_run_made_before_the_newer_flags() {
        // The `options` of results/eval-concurrency/c1/config.json (written by hand-built JSON
        // before typed options, --candidates and the fusion rule): a resume compares these.
        let stored: serde_json::Value = serde_json::from_str(
            r#"{"dataset":"/work/shared/data/tabfact/test-1k.jsonl","corpus":"/work/shared/data/tabfact/tables",
            "method":"tableseek","model":"models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf","tokenizer":null,
            "random_init":null,"device":"cpu","dtype":null,"steps":5,"strategy":"5s1","evidence":"small",
            "fallback_tables":1,"history":"none","max_new_tokens":null,"enable_thinking":null,
            "constrain":"on","ablations":{"no_refine":false,"no_fallback":false,"no_regenerate":false,
            "no_select":false,"match_only":false,"match_only_qa":false},"max_table_chars":16000,
            "timings":true,"widen_empty":"on"}"#,
        )
        .unwrap();
        let typed = tableseek_defaults().omit_unused().to_json().unwrap();
        assert_eq!(typed, stored);
    }

    #[test]
    fn hybrid_candidates_record_their_fusion_and_other_methods_drop_agent_only_keys() {
        let mut options = tableseek_defaults();
        options.candidates = Some(Candidates::Hybrid);
        let json = options.clone().omit_unused().to_json().unwrap();
        assert_eq!(json["candidates"], "hybrid");
        assert_eq!(json["candidate_fusion"]["rule"], "rrf");
        assert!(json.get("embed_model").is_none());

        options.method = Method::Dense;
        let json = options.omit_unused().to_json().unwrap();
        assert!(json.get("widen_empty").is_none());
        assert_eq!(json["embed_model"], "models/all-MiniLM-L6-v2");
    }
}
