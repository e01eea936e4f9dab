//! The TableSeek loop: pattern generation, refine rounds, answerability check with fallback.
//!
//! One query runs as: the model writes grep patterns → the search space ranks tables by them →
//! refine rounds show the model previews of the top candidates under anonymous ids (`T0`..) and it
//! selects, reranks or regenerates patterns → QA on the chosen tables → fallback QA on the next
//! ranked tables while the model says the evidence is insufficient and the step budget allows.
//! Every LLM call counts as one step; one step is always kept for QA.
//!
//! The loop is decoupled from the engine and from the grep stage through two small traits, [`Llm`]
//! and [`SearchSpace`], so it can be tested with scripted outputs ([`testing`]) and adapted to the
//! real engine and corpus without changes here.
//!
//! Storage metadata never reaches a prompt: the loop only ever renders [`SearchSpace::preview`] and
//! [`SearchSpace::full_text`] and its own anonymous ids; [`SearchSpace::table_id`] goes into the
//! [`Trajectory`] only.
//!
//! ```
//! use tableseek::agent::testing::{MemorySpace, ScriptedLlm};
//! use tableseek::agent::{Agent, AgentConfig};
//!
//! let space = MemorySpace::new([("data/cities.csv", "city,population\nParis,2148000")]);
//! let mut llm = ScriptedLlm::new([
//!     r#"["Paris", "population"]"#,
//!     r#"{"action": "select", "tables": ["T0"]}"#,
//!     "Answer: 2148000",
//! ]);
//! let agent = Agent::new(AgentConfig::builder().max_steps(10).build()?)?;
//! let trajectory = agent.run(&mut llm, &space, "How many people live in Paris?")?;
//! assert_eq!(trajectory.answer, "2148000");
//! assert_eq!(trajectory.final_table.as_deref(), Some("data/cities.csv"));
//! assert_eq!(trajectory.steps, 3);
//! # Ok::<(), tableseek::agent::AgentError>(())
//! ```

mod adapters;
mod config;
mod fit;
pub mod parse;
pub mod prompts;
mod run;
pub mod schemas;
pub mod sql_qa;
pub mod tablerag;
pub mod tas;
pub mod testing;
pub mod trag_qa;
mod trajectory;

use serde::{Deserialize, Serialize};

/// What a call's output must match; see [`schemas`].
pub use crate::engine::Grammar;
pub use adapters::{CorpusSpace, EngineLlm, DEFAULT_MAX_TABLE_CHARS, HYBRID_FUSION};
pub use config::{
    Ablations, AgentConfig, AgentConfigBuilder, Candidates, Evidence, History, OnOff, QaMode,
    SqlAnswer, Strategy, TaskType, LIKELIHOOD_WEIGHT,
};
pub use fit::{fit_tables, PromptBudget};
pub use parse::{QaOutcome, QaVariant, Verdict};
pub use run::{baseline_qa, Agent};
pub use trajectory::{
    Action, CallRecord, CandidateRecord, ChunkRecord, IterationRecord, NoneReason, RoundRecord,
    SeenTable, StepKind, Totals, Trajectory,
};

/// Errors of the agent loop and of the backends it drives.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The LLM backend failed (engine error, exhausted script, ...).
    #[error("LLM backend: {0}")]
    Llm(String),
    /// TableRAG's chunk retrieval failed (the encoder).
    #[error("chunk retrieval: {0}")]
    Retrieval(String),
    /// A configuration value is out of range or two switches contradict each other.
    #[error("invalid agent configuration: {0}")]
    InvalidConfig(String),
    /// The query text is empty or blank.
    #[error("the query is empty")]
    EmptyQuery,
    /// A strategy or evidence name could not be read.
    #[error("cannot parse {what} from {input:?}: {expected}")]
    BadName {
        what: &'static str,
        input: String,
        expected: &'static str,
    },
    /// A backend call failed mid-query; `partial` holds every call made before it, so no work is lost.
    #[error("query aborted at call {call}: {reason}")]
    Aborted {
        call: usize,
        reason: String,
        partial: Box<Trajectory>,
    },
}

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat turn, before the engine applies its chat template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Which stage of the loop issues a request (known before the model answers; the trajectory's
/// [`StepKind`] adds what the model then decided).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    PatternGen,
    Refine,
    Qa,
    QaFallback,
    /// TableRAG's calls ([`tablerag`]).
    Decompose,
    Nl2Sql,
    Compose,
    /// TaS's calls ([`tas`]).
    TasSchema,
    TasExpand,
    TasVerify,
    TasPlan,
}

/// One request to the LLM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmRequest {
    pub messages: Vec<ChatMessage>,
    pub max_new_tokens: usize,
    pub kind: CallKind,
    /// The shape the output must have ([`schemas`]); a backend that can decode under a grammar
    /// applies it, others may ignore it (the parser still reads free output).
    pub constraint: Option<Grammar>,
}

/// The model's reply with the accounting the trajectory keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmResponse {
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens served from a reused KV-cache prefix.
    pub cached_tokens: usize,
    /// Wall time of the call in milliseconds.
    pub ms: f64,
    /// Whether the request's constraint shaped the output (false when there was none, the
    /// backend ignores constraints, or decoding under it gave up).
    pub constrained: bool,
}

/// What the agent needs from an LLM (the engine adapter implements it; tests use
/// [`testing::ScriptedLlm`]). Decoding is expected to be greedy, so a query's run is deterministic.
pub trait Llm {
    fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError>;

    /// The prompt's size under this backend's tokenizer and chat template, against the most
    /// that leaves `max_new_tokens` of room in its context window; the agent cuts table text
    /// until it fits ([`fit_tables`]). `tokens` may be an upper bound when that bound fits.
    /// `None` (the default): no window to respect.
    fn measure(
        &mut self,
        _messages: &[ChatMessage],
        _max_new_tokens: usize,
    ) -> Option<PromptBudget> {
        None
    }

    /// Tokens of `text` alone (no template); `None` when the backend does not count.
    fn count_tokens(&mut self, _text: &str) -> Option<usize> {
        None
    }

    /// log p(`continuation` | `prompt`) summed over the continuation's tokens, with `prompt`
    /// read as raw model text (its special tokens as such); `None` when the backend cannot
    /// score text (the [`Strategy::Likelihood`] refine needs it).
    fn continuation_logprob(
        &mut self,
        _prompt: &str,
        _continuation: &str,
    ) -> Option<Result<Scored, AgentError>> {
        None
    }
}

/// A continuation's score ([`Llm::continuation_logprob`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub logprob: f64,
    /// Tokens run: prompt and continuation.
    pub tokens: usize,
}

/// `&mut L` and `Box<L>` are backends too: every method forwards.
macro_rules! forward_llm {
    ($backend:ty) => {
        impl<L: Llm + ?Sized> Llm for $backend {
            fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError> {
                (**self).chat(request)
            }

            fn measure(
                &mut self,
                messages: &[ChatMessage],
                max_new_tokens: usize,
            ) -> Option<PromptBudget> {
                (**self).measure(messages, max_new_tokens)
            }

            fn count_tokens(&mut self, text: &str) -> Option<usize> {
                (**self).count_tokens(text)
            }

            fn continuation_logprob(
                &mut self,
                prompt: &str,
                continuation: &str,
            ) -> Option<Result<Scored, AgentError>> {
                (**self).continuation_logprob(prompt, continuation)
            }
        }
    };
}

forward_llm!(&mut L);
forward_llm!(Box<L>);

/// One entry of a ranking: a table index of the search space and its pattern score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RankedTable {
    pub table: usize,
    pub score: f64,
}

/// What the agent needs from the corpus + grep stage.
pub trait SearchSpace {
    /// Tables ordered by score for `query` searched with `patterns`, best first; ties in a
    /// deterministic order. Tables that match nothing may be left out.
    fn rank(&self, query: &str, patterns: &[String]) -> Vec<RankedTable>;
    /// A structure-preserving preview: the table's head plus rows matched by `patterns`, sized by
    /// `evidence`; with `match_only` the matched rows alone (also what QA reads under the
    /// `match_only_qa` ablation). Must contain no ids, paths or titles.
    fn preview(
        &self,
        table: usize,
        patterns: &[String],
        evidence: Evidence,
        match_only: bool,
    ) -> String;
    /// The whole table as QA reads it. Must contain no ids, paths or titles.
    fn full_text(&self, table: usize) -> String;
    /// The real table id, for the trajectory only: never rendered into a prompt.
    fn table_id(&self, table: usize) -> &str;
    /// The parsed table, for QA that loads it into SQL ([`sql_qa`]); `None` where the space
    /// holds text only.
    fn table(&self, _table: usize) -> Option<&crate::corpus::Table> {
        None
    }
}
