//! Agent settings: budget, refine strategy, evidence size, history, ablation switches.
//!
//! Strategy and evidence names are the ones the method spec and the CLI use (`5s1`, `r3`, `small`,
//! ...); they round-trip through [`FromStr`] / [`Display`] and serialize as those strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::AgentError;
/// Evidence sizes belong to the grep stage that cuts previews; the agent only passes them on.
pub use crate::grep::Evidence;

/// What kind of answer the query wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    /// Free-form answer, or "insufficient" when the tables lack the evidence.
    #[default]
    Tableqa,
    /// Supported / refuted, or "cannot verify from this table".
    FactVerification,
}

impl TaskType {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Tableqa => "tableqa",
            TaskType::FactVerification => "fact_verification",
        }
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskType {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "tableqa" | "qa" => Ok(TaskType::Tableqa),
            "fact_verification" | "fact" | "factver" => Ok(TaskType::FactVerification),
            _ => Err(AgentError::BadName {
                what: "task type",
                input: s.to_string(),
                expected: "tableqa or fact_verification",
            }),
        }
    }
}

/// How a refine round lets the model commit to tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `nSm`: show `n` candidates, the model may select up to `m` of them (or regenerate).
    Select { n: usize, m: usize },
    /// `rN`: show `n` candidates, the model reorders them (or regenerates); the top one goes on.
    Rerank { n: usize },
    /// `lN`: the model scores each of the first `n` candidates by query likelihood, log p(query
    /// | preview), and they are reordered by that blended with the ranking's own score
    /// ([`LIKELIHOOD_WEIGHT`]); the top one goes on. No text is generated, so no regenerate.
    Likelihood { n: usize },
}

/// Weight of the query likelihood against the ranking's score when [`Strategy::Likelihood`]
/// reorders candidates (both min-max scaled over the candidates). Chosen on tuning queries
/// disjoint from the reported ones (TabFact test-1k 201-298, TCR 101-160; `results/hybrid`,
/// `examples/pool_likelihood.rs`).
pub const LIKELIHOOD_WEIGHT: f64 = 1.0;

impl Default for Strategy {
    fn default() -> Self {
        Strategy::Select { n: 5, m: 1 }
    }
}

impl Strategy {
    /// The strategies the paper evaluates.
    pub const PAPER: [Strategy; 8] = [
        Strategy::Select { n: 5, m: 1 },
        Strategy::Select { n: 5, m: 3 },
        Strategy::Select { n: 10, m: 1 },
        Strategy::Select { n: 10, m: 3 },
        Strategy::Select { n: 10, m: 5 },
        Strategy::Rerank { n: 3 },
        Strategy::Rerank { n: 5 },
        Strategy::Rerank { n: 10 },
    ];

    /// Candidates shown per refine round.
    pub fn candidates(self) -> usize {
        match self {
            Strategy::Select { n, .. } | Strategy::Rerank { n } | Strategy::Likelihood { n } => n,
        }
    }

    /// Tables one decision may send to QA.
    pub fn max_select(self) -> usize {
        match self {
            Strategy::Select { m, .. } => m,
            Strategy::Rerank { .. } | Strategy::Likelihood { .. } => 1,
        }
    }

    pub fn is_rerank(self) -> bool {
        matches!(self, Strategy::Rerank { .. })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Select { n, m } => write!(f, "{n}s{m}"),
            Strategy::Rerank { n } => write!(f, "r{n}"),
            Strategy::Likelihood { n } => write!(f, "l{n}"),
        }
    }
}

impl FromStr for Strategy {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AgentError::BadName {
            what: "refine strategy",
            input: s.to_string(),
            expected: "nSm with 1 <= m <= n (5s1, 5s3, 10s1, 10s5), rN or lN with N >= 1 (r5, l5)",
        };
        let lower = s.trim().to_ascii_lowercase();
        let strategy = if let Some(n) = lower.strip_prefix('r') {
            Strategy::Rerank {
                n: n.parse().map_err(|_| bad())?,
            }
        } else if let Some(n) = lower.strip_prefix('l') {
            Strategy::Likelihood {
                n: n.parse().map_err(|_| bad())?,
            }
        } else {
            let (n, m) = lower.split_once('s').ok_or_else(bad)?;
            Strategy::Select {
                n: n.parse().map_err(|_| bad())?,
                m: m.parse().map_err(|_| bad())?,
            }
        };
        match strategy {
            Strategy::Select { n, m } if m == 0 || m > n => Err(bad()),
            Strategy::Rerank { n: 0 } | Strategy::Likelihood { n: 0 } => Err(bad()),
            ok => Ok(ok),
        }
    }
}

macro_rules! serde_as_string {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_string!(Strategy);

/// Whether refine rounds see the earlier rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum History {
    /// Each refine call is a fresh conversation (shares the instruction prefix only).
    #[default]
    None,
    /// Refine rounds continue one conversation: earlier previews and decisions stay as turns.
    Full,
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            History::None => "none",
            History::Full => "full",
        })
    }
}

impl FromStr for History {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(History::None),
            "full" => Ok(History::Full),
            _ => Err(AgentError::BadName {
                what: "history mode",
                input: s.to_string(),
                expected: "none or full",
            }),
        }
    }
}

/// The paper's ablation switches; all off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Ablations {
    /// Straight from the first ranking to QA.
    pub no_refine: bool,
    /// One QA call, no fallback tables.
    pub no_fallback: bool,
    /// Select only, on the first pool.
    pub no_regenerate: bool,
    /// Regenerate only, until the budget or a refine-none; then QA on the top of the ranking.
    pub no_select: bool,
    /// Previews show matched rows only (no head, no schema).
    pub match_only: bool,
    /// QA also sees matched rows only.
    pub match_only_qa: bool,
}

/// Which ranking fills the candidate pool that refine sees (previews always come from the
/// patterns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Candidates {
    /// The paper's: tables by the share of patterns they contain.
    #[default]
    Grep,
    /// BM25 over the query and the patterns' words.
    Bm25,
    /// The two joined by [`crate::agent::HYBRID_FUSION`] (`retrieve::fusion`): literal evidence
    /// the patterns found, and the query's words where the patterns missed.
    Hybrid,
}

impl Candidates {
    pub fn as_str(self) -> &'static str {
        match self {
            Candidates::Grep => "grep",
            Candidates::Bm25 => "bm25",
            Candidates::Hybrid => "hybrid",
        }
    }
}

/// A switch written `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

/// How QA reads a table for a `tableqa` query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum QaMode {
    /// The model reads the serialized table and writes the answer.
    #[default]
    Text,
    /// The model writes one SQLite query over the top table; the answer is its result
    /// ([`crate::agent::sql_qa`]); a query that fails or returns nothing counts as insufficient
    /// evidence, so the loop falls back to the next table. A claim is tested by a query that
    /// returns 1 when it holds ([`crate::agent::sql_qa::claim_question`]).
    Sql,
    /// SQL when the model passes [`crate::agent::sql_qa::probe`] (measured once, at start-up),
    /// else text. Callers resolve it with [`QaMode::resolve`]; unresolved it reads as text.
    Auto,
}

impl QaMode {
    /// `Auto` decided by the SQL probe on `llm`; other modes as they are. Also returns the probe's
    /// score when it ran.
    pub fn resolve<L: super::Llm + ?Sized>(
        self,
        llm: &mut L,
    ) -> Result<(QaMode, Option<super::sql_qa::ProbeScore>), super::AgentError> {
        if self != QaMode::Auto {
            return Ok((self, None));
        }
        let score = super::sql_qa::probe(llm)?;
        let mode = if score.passes() {
            QaMode::Sql
        } else {
            QaMode::Text
        };
        Ok((mode, Some(score)))
    }
}

/// How SQL QA turns the result rows into the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SqlAnswer {
    /// The values themselves (`, ` within a row, `; ` between rows): no further call.
    #[default]
    Rows,
    /// One more call phrases the answer from the question, the SQL and its rows.
    Phrased,
}

/// Everything that shapes one agent run. Build with [`AgentConfig::builder`] to get validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    pub task: TaskType,
    /// Most LLM calls per query, counting every call; at least 2 (patterns + QA).
    pub max_steps: usize,
    pub strategy: Strategy,
    pub evidence: Evidence,
    /// Tables QA reads when refinement selected nothing (K_fb).
    pub fallback_tables: usize,
    pub history: History,
    /// Generation cap for every call.
    pub max_new_tokens: usize,
    pub ablations: Ablations,
    /// When a round's patterns match no table, search again with the query's content words
    /// added, so refine sees candidates instead of an empty list. Not in the paper (it feeds the
    /// empty result back to the model); small models need it: SmolLM2's constrained patterns
    /// matched nothing in round 0 for 35 of 50 TabFact claims and 41 of 50 Spider questions.
    pub widen_empty: bool,
    /// How QA reads a table for a `tableqa` query.
    pub qa: QaMode,
    /// Under SQL QA: the answer is the rows, or a call phrases it from them.
    pub sql_answer: SqlAnswer,
    /// The ranking behind the candidate pool; recorded here, applied by the search space
    /// ([`super::adapters::CorpusSpace::candidates`]).
    pub candidates: Candidates,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            task: TaskType::default(),
            max_steps: 5,
            strategy: Strategy::default(),
            evidence: Evidence::default(),
            fallback_tables: 1,
            history: History::default(),
            max_new_tokens: 8192,
            ablations: Ablations::default(),
            widen_empty: true,
            qa: QaMode::Text,
            sql_answer: SqlAnswer::Rows,
            candidates: Candidates::Grep,
        }
    }
}

impl AgentConfig {
    pub fn builder() -> AgentConfigBuilder {
        AgentConfigBuilder::default()
    }

    /// Rejects settings the loop cannot honour; deserialized configs should pass through here too.
    pub fn validate(&self) -> Result<(), AgentError> {
        let bad = |msg: &str| Err(AgentError::InvalidConfig(msg.to_string()));
        if self.max_steps < 2 {
            return bad("max_steps must be at least 2: one call for patterns, one kept for QA");
        }
        if self.fallback_tables == 0 {
            return bad("fallback_tables must be at least 1");
        }
        if self.max_new_tokens == 0 {
            return bad("max_new_tokens must be at least 1");
        }
        match self.strategy {
            Strategy::Select { n, m } if m == 0 || m > n => {
                return bad("strategy nSm needs 1 <= m <= n");
            }
            Strategy::Rerank { n: 0 } => return bad("strategy rN needs N >= 1"),
            Strategy::Likelihood { n: 0 } => return bad("strategy lN needs N >= 1"),
            _ => {}
        }
        let a = &self.ablations;
        if a.no_select && a.no_regenerate && !a.no_refine {
            return bad(
                "no_select together with no_regenerate leaves refinement no action; use no_refine",
            );
        }
        Ok(())
    }
}

/// Builder for [`AgentConfig`]; `build` validates.
#[derive(Debug, Clone, Default)]
pub struct AgentConfigBuilder {
    config: AgentConfig,
}

impl AgentConfigBuilder {
    pub fn task(mut self, task: TaskType) -> Self {
        self.config.task = task;
        self
    }

    pub fn max_steps(mut self, max_steps: usize) -> Self {
        self.config.max_steps = max_steps;
        self
    }

    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    pub fn evidence(mut self, evidence: Evidence) -> Self {
        self.config.evidence = evidence;
        self
    }

    pub fn fallback_tables(mut self, k: usize) -> Self {
        self.config.fallback_tables = k;
        self
    }

    pub fn history(mut self, history: History) -> Self {
        self.config.history = history;
        self
    }

    pub fn max_new_tokens(mut self, max_new_tokens: usize) -> Self {
        self.config.max_new_tokens = max_new_tokens;
        self
    }

    pub fn ablations(mut self, ablations: Ablations) -> Self {
        self.config.ablations = ablations;
        self
    }

    pub fn widen_empty(mut self, on: bool) -> Self {
        self.config.widen_empty = on;
        self
    }

    pub fn sql_answer(mut self, sql_answer: SqlAnswer) -> Self {
        self.config.sql_answer = sql_answer;
        self
    }

    pub fn qa(mut self, qa: QaMode) -> Self {
        self.config.qa = qa;
        self
    }

    pub fn candidates(mut self, candidates: Candidates) -> Self {
        self.config.candidates = candidates;
        self
    }

    pub fn no_refine(mut self, on: bool) -> Self {
        self.config.ablations.no_refine = on;
        self
    }

    pub fn no_fallback(mut self, on: bool) -> Self {
        self.config.ablations.no_fallback = on;
        self
    }

    pub fn no_regenerate(mut self, on: bool) -> Self {
        self.config.ablations.no_regenerate = on;
        self
    }

    pub fn no_select(mut self, on: bool) -> Self {
        self.config.ablations.no_select = on;
        self
    }

    pub fn match_only(mut self, on: bool) -> Self {
        self.config.ablations.match_only = on;
        self
    }

    pub fn match_only_qa(mut self, on: bool) -> Self {
        self.config.ablations.match_only_qa = on;
        self
    }

    pub fn build(self) -> Result<AgentConfig, AgentError> {
        self.config.validate()?;
        Ok(self.config)
    }
}
