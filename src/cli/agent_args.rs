//! The agent's flags, shared by `ask` and `eval`, and the [`AgentConfig`] they make.

use tableseek::agent::{
    Ablations, AgentConfig, Candidates, Evidence, History, OnOff, QaMode, SqlAnswer, Strategy,
    TaskType,
};

/// The agent's settings, shared by `ask` and `eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    #[arg(long, default_value = "tableqa")]
    pub task: TaskType,
    /// Budget of LLM calls per query (pattern generation, refine rounds, QA and fallback QA).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// nSm: show n candidates, select up to m (5s1, 5s3, 10s1, 10s3, 10s5); rN: rerank N (r3, r5, r10);
    /// lN: the model scores N candidates by query likelihood, blended with the ranking (l5).
    #[arg(long, default_value = "5s1")]
    pub strategy: Strategy,
    /// How much of each candidate refine sees: small, medium, big, full.
    #[arg(long, default_value = "small")]
    pub evidence: Evidence,
    /// Tables QA reads when refinement selected none.
    #[arg(long, default_value_t = 1)]
    pub fallback_tables: usize,
    /// `full` keeps refine rounds in one conversation (more KV reuse); `none` is the paper's.
    #[arg(long, default_value = "none")]
    pub history: History,
    /// New tokens per call; default 8192 for thinking models (Qwen3), 1024 for others.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// For thinking models (Qwen3): true or false; default is the template's.
    #[arg(long)]
    pub enable_thinking: Option<bool>,
    /// Structured decoding: pattern-generation and refine outputs (and fact-verification labels)
    /// are decoded under their JSON schema / grammar, so they always parse; thinking stays free.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub constrain: OnOff,
    /// When a round's patterns match no table, add the query's words and search again (`off`:
    /// the empty result goes back to the model, as in the paper).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub widen_empty: OnOff,
    /// How table questions are answered: `text` (the model reads the table and writes the answer),
    /// `sql` (it writes one SQLite query over the table, under a grammar of SELECTs over its
    /// columns with --constrain on; the answer is the result; one retry on an error; an empty
    /// result falls back to the next table) or `auto` (SQL if the model answers 3 of 4 built-in
    /// SQL probe questions, measured at start-up; else text). Under SQL a claim is tested by a
    /// query that returns 1 when it holds.
    #[arg(long, value_enum, default_value_t = QaMode::Text)]
    pub qa: QaMode,
    /// Under SQL QA: the answer is the result rows' values (`rows`), or one more call words it
    /// from the question, the SQL and the rows (`phrased`).
    #[arg(long, value_enum, default_value_t = SqlAnswer::Rows)]
    pub sql_answer: SqlAnswer,
    /// The ranking behind refine's candidate pool: `grep` (share of patterns, the paper's),
    /// `bm25` (the query's and the patterns' words), or `hybrid` (the two blended, BM25 weighted
    /// 4: `agent::HYBRID_FUSION`). Previews show the patterns' matched rows either way.
    #[arg(long, value_enum, default_value_t = Candidates::Grep)]
    pub candidates: Candidates,
    /// Ablation: from the first ranking straight to QA.
    #[arg(long)]
    pub no_refine: bool,
    /// Ablation: QA once, no fallback to later tables.
    #[arg(long)]
    pub no_fallback: bool,
    /// Ablation: refinement may only select from the first pool.
    #[arg(long)]
    pub no_regenerate: bool,
    /// Ablation: refinement may only regenerate patterns.
    #[arg(long)]
    pub no_select: bool,
    /// Ablation: previews show matched rows only (no head, no schema).
    #[arg(long)]
    pub match_only: bool,
    /// Ablation: QA also sees matched rows only.
    #[arg(long)]
    pub match_only_qa: bool,
}

impl AgentArgs {
    /// `default_max_new_tokens` comes from the loaded model (see `ChatModel::default_max_new_tokens`).
    pub fn config(&self, default_max_new_tokens: usize) -> anyhow::Result<AgentConfig> {
        let ablations = Ablations {
            no_refine: self.no_refine,
            no_fallback: self.no_fallback,
            no_regenerate: self.no_regenerate,
            no_select: self.no_select,
            match_only: self.match_only,
            match_only_qa: self.match_only_qa,
        };
        Ok(AgentConfig::builder()
            .task(self.task)
            .max_steps(self.steps)
            .strategy(self.strategy)
            .evidence(self.evidence)
            .fallback_tables(self.fallback_tables)
            .history(self.history)
            .max_new_tokens(self.max_new_tokens.unwrap_or(default_max_new_tokens))
            .ablations(ablations)
            .widen_empty(self.widen_empty.is_on())
            .qa(self.qa)
            .sql_answer(self.sql_answer)
            .candidates(self.candidates)
            .build()?)
    }
}
