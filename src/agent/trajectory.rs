//! The per-query record: every call, every round's patterns and candidates, what QA saw, the
//! answer and the totals. Real table ids appear here (for evaluation) and nowhere in a prompt.
//!
//! Everything but the `ms` fields is a function of the inputs; [`Trajectory::zero_timings`] makes
//! two runs byte-identical for comparison.

use serde::{Deserialize, Serialize};

use super::parse::Verdict;
use super::TaskType;

/// What a call turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    PatternGen,
    RefineSelect,
    RefineRegenerate,
    RefineRerank,
    /// Refine by query likelihood ([`Strategy::Likelihood`](super::Strategy)): the candidates
    /// scored, no text generated.
    RefineScore,
    RefineNone,
    Qa,
    QaFallback,
    /// TableRAG: the loop's call that asks a sub-question or answers.
    Decompose,
    /// TableRAG: SQL written for a sub-question.
    #[serde(rename = "nl2sql")]
    Nl2Sql,
    /// TableRAG: the sub-answer from the excerpts and the SQL result.
    Compose,
    /// TaS: the constraints (the state table's columns).
    TasSchema,
    /// TaS: new searches for rows.
    TasExpand,
    /// TaS: one row's pending cells checked against its table.
    TasVerify,
    /// TaS with the LLM planner: the next step.
    TasPlan,
}

impl StepKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [StepKind; 15] = [
        StepKind::PatternGen,
        StepKind::RefineSelect,
        StepKind::RefineRegenerate,
        StepKind::RefineRerank,
        StepKind::RefineScore,
        StepKind::RefineNone,
        StepKind::Qa,
        StepKind::QaFallback,
        StepKind::Decompose,
        StepKind::Nl2Sql,
        StepKind::Compose,
        StepKind::TasSchema,
        StepKind::TasExpand,
        StepKind::TasVerify,
        StepKind::TasPlan,
    ];

    /// The name used in trajectories (`pattern-gen`, `refine-select`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::PatternGen => "pattern-gen",
            StepKind::RefineSelect => "refine-select",
            StepKind::RefineRegenerate => "refine-regenerate",
            StepKind::RefineRerank => "refine-rerank",
            StepKind::RefineScore => "refine-score",
            StepKind::RefineNone => "refine-none",
            StepKind::Qa => "qa",
            StepKind::QaFallback => "qa-fallback",
            StepKind::Decompose => "decompose",
            StepKind::Nl2Sql => "nl2sql",
            StepKind::Compose => "compose",
            StepKind::TasSchema => "tas-schema",
            StepKind::TasExpand => "tas-expand",
            StepKind::TasVerify => "tas-verify",
            StepKind::TasPlan => "tas-plan",
        }
    }
}

impl std::fmt::Display for StepKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a refine call ended refinement without a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoneReason {
    /// No JSON with a recognisable action in the output.
    Unparseable,
    /// The model explicitly chose no action.
    Declined,
    /// It chose tables, but none of the ids was shown this round.
    InvalidIds,
    /// It asked to regenerate without giving usable patterns.
    EmptyPatterns,
    /// It chose tables while the `no_select` ablation is on.
    SelectDisabled,
    /// It regenerated while the `no_regenerate` ablation is on.
    RegenerateDisabled,
}

/// The decision read from a call, with real ids resolved for evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Pattern generation; `from_query` when the output was unusable and query words stood in.
    Patterns {
        patterns: Vec<String>,
        from_query: bool,
    },
    Select {
        shown_ids: Vec<String>,
        table_ids: Vec<String>,
    },
    /// The model's full order of the shown candidates; the first goes to QA.
    Rerank {
        shown_ids: Vec<String>,
        table_ids: Vec<String>,
    },
    Regenerate {
        patterns: Vec<String>,
    },
    #[serde(rename = "none")]
    NoAction {
        reason: NoneReason,
    },
    Answer {
        table_ids: Vec<String>,
        answer: String,
        verdict: Verdict,
    },
    /// TableRAG decompose: the sub-question sent to the tool.
    SubQuery {
        subquery: String,
    },
    /// TableRAG NL2SQL: the tables the query could read (real ids; the call's `sql` holds it).
    Sql {
        table_ids: Vec<String>,
    },
    /// TableRAG compose: the sub-answer returned to the loop.
    SubAnswer {
        answer: String,
    },
    /// TaS schema: the constraints' descriptions; `from_query` when the output was unusable.
    Schema {
        checks: Vec<String>,
        from_query: bool,
    },
    /// TaS expansion: the new pattern lists (repeats of earlier searches dropped).
    Strategies {
        searches: Vec<Vec<String>>,
    },
    /// TaS verification of one row: `constraint: status` for each cell it filled.
    Verify {
        table_id: String,
        cells: Vec<String>,
    },
    /// TaS planner: the step chosen (`check T2`, `search`, `answer`).
    Plan {
        choice: String,
    },
}

/// One LLM call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub kind: StepKind,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub ms: f64,
    /// The raw model output, thinking included.
    pub output: String,
    /// Whether the output was machine-readable in the expected shape.
    pub parsed: bool,
    /// Whether structured decoding shaped the output (`--constrain on` and a grammar for the
    /// call); absent in records written before it existed.
    #[serde(default)]
    pub constrained: bool,
    pub action: Action,
    /// SQL QA: the query this call wrote, its result rows (capped) or its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<super::sql_qa::SqlAttempt>,
}

impl CallRecord {
    /// The record of a call from the backend's response and what was read from it.
    pub(crate) fn new(
        kind: StepKind,
        response: super::LlmResponse,
        parsed: bool,
        action: Action,
        sql: Option<super::sql_qa::SqlAttempt>,
    ) -> Self {
        Self {
            kind,
            prompt_tokens: response.prompt_tokens,
            cached_tokens: response.cached_tokens,
            ms: response.ms,
            output: response.text,
            parsed,
            constrained: response.constrained,
            action,
            sql,
        }
    }
}

/// One ranked candidate of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateRecord {
    /// The anonymous id the model saw (`T0`..).
    pub shown_id: String,
    pub table_id: String,
    pub score: f64,
}

/// One pattern set and the candidates it ranked on top (round 0 = the first patterns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub patterns: Vec<String>,
    /// TaS: the text tool that ranked this round (`patterns` then holds its text); grep when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub candidates: Vec<CandidateRecord>,
    /// The model's patterns matched nothing and the query's words were added (`widen_empty`);
    /// `patterns` holds the widened list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub widened: bool,
    /// `--history full`: the earlier rounds' conversation no longer left room for this round's
    /// previews, so this round's refine prompt started a fresh conversation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub history_restarted: bool,
}

/// A table QA read, with the verdict of that call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeenTable {
    pub table_id: String,
    /// Index into `calls`.
    pub call: usize,
    pub verdict: Verdict,
}

/// A retrieved chunk of a TableRAG iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub chunk: usize,
    pub table_id: String,
    /// The anonymous id the model saw the table under.
    pub shown_id: String,
    pub score: f64,
}

/// One TableRAG iteration that asked a sub-question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub subquery: String,
    /// The top-k chunks compose read.
    pub chunks: Vec<ChunkRecord>,
    /// S^t: the tables the SQL could read, real ids in rank order.
    pub sql_tables: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_error: Option<String>,
    /// Result rows of a query that ran (capped at the guard's row limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_rows: Option<usize>,
    pub answer: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub steps: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub ms: f64,
}

/// Everything one query did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The caller's id for the query, if it sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_id: Option<String>,
    pub query: String,
    pub task: TaskType,
    /// The last QA answer; for fact verification `supported` or `refuted` (a claim no table could
    /// verify counts as refuted, as in the paper's baselines).
    pub answer: String,
    /// The last QA verdict; `None` when QA never ran (nothing ranked).
    pub verdict: Option<Verdict>,
    /// The first table of the last QA call.
    pub final_table: Option<String>,
    pub tables_seen: Vec<SeenTable>,
    pub steps: usize,
    pub calls: Vec<CallRecord>,
    pub rounds: Vec<RoundRecord>,
    /// TableRAG's iterations (empty for the TableSeek agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iterations: Vec<IterationRecord>,
    /// TableRAG ran out of iterations without an answer ("task incompletion").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// TaS's state table, its snapshots and counts (absent for the other methods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tas: Option<super::tas::TasRecord>,
    pub totals: Totals,
}

impl Trajectory {
    pub(crate) fn new(query: &str, task: TaskType) -> Self {
        Self {
            query_id: None,
            query: query.to_string(),
            task,
            answer: String::new(),
            verdict: None,
            final_table: None,
            tables_seen: Vec::new(),
            steps: 0,
            calls: Vec::new(),
            rounds: Vec::new(),
            iterations: Vec::new(),
            incomplete: false,
            tas: None,
            totals: Totals::default(),
        }
    }

    pub(crate) fn push_call(&mut self, call: CallRecord) {
        self.totals.steps += 1;
        self.totals.prompt_tokens += call.prompt_tokens;
        self.totals.cached_tokens += call.cached_tokens;
        self.totals.ms += call.ms;
        self.steps = self.totals.steps;
        self.calls.push(call);
    }

    /// Records a call without SQL.
    pub(crate) fn record(
        &mut self,
        kind: StepKind,
        response: super::LlmResponse,
        parsed: bool,
        action: Action,
    ) {
        self.push_call(CallRecord::new(kind, response, parsed, action, None));
    }

    /// A backend failure mid-query, carrying every call made so far so no work is lost.
    pub(crate) fn abort(&self, error: &super::AgentError) -> super::AgentError {
        super::AgentError::Aborted {
            call: self.calls.len(),
            reason: error.to_string(),
            partial: Box::new(self.clone()),
        }
    }

    /// Sets every figure that depends on scheduling rather than on the inputs to zero: times, and
    /// prompt tokens served from the prefix cache (which depend on what ran before or alongside:
    /// queries that run at once cannot reuse each other's prefixes yet). The answers, tokens and
    /// every other field are equal between runs of the same inputs, at any concurrency.
    pub fn zero_timings(&mut self) {
        for call in &mut self.calls {
            call.ms = 0.0;
            call.cached_tokens = 0;
            if let Some(sql) = &mut call.sql {
                sql.ms = 0.0;
            }
        }
        self.totals.ms = 0.0;
        self.totals.cached_tokens = 0;
        if let Some(tas) = &mut self.tas {
            tas.zero_timings();
        }
    }

    /// Did QA read this table at any call (R@all)?
    pub fn saw_table(&self, table_id: &str) -> bool {
        self.tables_seen.iter().any(|t| t.table_id == table_id)
    }
}
