//! The evaluated methods and the per-query record each of them produces.
//!
//! Every method is one function from a query to a [`QueryRecord`], so adding one means a
//! [`Method`] variant and a function; the run loop, the stored format and the reports do
//! not change. The record carries the gold data and the scored [`QueryMetrics`], so a run
//! directory's `queries.jsonl` alone is enough to rebuild every summary.

mod ranked;
mod tablerag;
mod tas;
mod trag;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::dataset::EvalQuery;
use super::metrics::{AnswerOutcome, MetricsError, QueryMetrics, QueryOutcome, Verdict};
use crate::agent::sql_qa::sql_qa;
use crate::agent::tablerag::TableRagConfig;
use crate::agent::tas::search::SearchTool;
use crate::agent::tas::{Tas, TasConfig};
pub use crate::agent::QaMode;
use crate::agent::SqlAnswer;
use crate::agent::{
    self, baseline_qa, Agent, AgentConfig, AgentError, CallKind, Llm, LlmResponse, SearchSpace,
    StepKind, TaskType, Trajectory,
};
use crate::retrieve::bm25::{Bm25Builder, Bm25Error, Bm25Index, Hit};
use crate::retrieve::chunks::Chunk;
use crate::retrieve::dense::{DenseError, DenseIndex, TextEncoder};
use crate::retrieve::rerank::Reranker;
use crate::retrieve::trag::TragIndex;

/// Why a query could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Bm25(#[from] Bm25Error),
    #[error(transparent)]
    Dense(#[from] DenseError),
    #[error(
        "unknown method {0:?} (expected one of: tableseek, bm25, dense, rerank, oracle, no-table, tablerag)"
    )]
    UnknownMethod(String),
    #[error("method {0} needs {1}, which the evaluator was not given")]
    NotConfigured(Method, &'static str),
    #[error("query {qid}: gold table {table:?} is not in the corpus")]
    GoldNotInCorpus { qid: String, table: String },
}

/// A way of answering a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The agent: pattern generation, refinement, QA with fallback.
    Tableseek,
    /// BM25 over the table texts, baseline QA on the top-1 table.
    Bm25,
    /// Dense retrieval (cosine of embeddings), baseline QA on the top-1 table.
    Dense,
    /// The dense top-k reordered by an LLM reranker, baseline QA on the new top-1.
    Rerank,
    /// Baseline QA on the gold table: the ceiling for the QA model.
    Oracle,
    /// Baseline QA with no table: what the model knows (or guesses) on its own.
    NoTable,
    /// TableRAG: dense chunk retrieval, sub-questions answered by SQL over the retrieved tables
    /// ([`crate::agent::tablerag`]).
    Tablerag,
    /// BM25 and dense rankings joined by reciprocal rank fusion (no LLM in the ranking),
    /// baseline QA on the top-1 table.
    Hybrid,
    /// T-RAG: clusters per view, their union ranked by personalized PageRank, one graph-aware
    /// QA call over the top tables ([`crate::retrieve::trag`], [`crate::agent::trag_qa`]).
    Trag,
    /// Table-as-Search: a state table of candidate tables × constraints, filled row by row, then
    /// QA on the best row ([`crate::agent::tas`]).
    Tas,
}

impl Method {
    pub const ALL: [Method; 10] = [
        Method::Tableseek,
        Method::Bm25,
        Method::Dense,
        Method::Rerank,
        Method::Oracle,
        Method::NoTable,
        Method::Tablerag,
        Method::Hybrid,
        Method::Trag,
        Method::Tas,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Tableseek => "tableseek",
            Method::Bm25 => "bm25",
            Method::Dense => "dense",
            Method::Rerank => "rerank",
            Method::Oracle => "oracle",
            Method::NoTable => "no-table",
            Method::Tablerag => "tablerag",
            Method::Hybrid => "hybrid",
            Method::Trag => "trag",
            Method::Tas => "tas",
        }
    }

    /// Whether the method embeds tables (or chunks) with a dense encoder.
    pub fn needs_encoder(self) -> bool {
        matches!(
            self,
            Method::Dense | Method::Rerank | Method::Tablerag | Method::Hybrid | Method::Trag
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == wanted)
            .ok_or_else(|| EvalError::UnknownMethod(s.to_string()))
    }
}

/// Wall time by stage, in milliseconds. `retrieval` is everything outside the agent's and QA's
/// LLM calls (grep, BM25, and for dense/rerank the whole ranking, `encode` and `rerank` included).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageMs {
    pub retrieval: f64,
    /// Query embedding (dense, rerank).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub encode: f64,
    /// Reranker passes (rerank).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rerank: f64,
    pub pattern_gen: f64,
    pub refine: f64,
    pub qa: f64,
    /// TableRAG's calls by kind.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub decompose: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nl2sql: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compose: f64,
    pub total: f64,
}

fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// What one query cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Agent steps (LLM calls counted against the budget).
    pub steps: usize,
    pub llm_calls: usize,
    /// Encoder forward passes (dense, rerank): one per query, the corpus is embedded once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub encode_calls: usize,
    /// Reranker forward passes (rerank): one per reranked table.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rerank_calls: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub ms: StageMs,
}

/// The gold data a record was scored against, kept so reports need no dataset file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gold {
    pub tables: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Vec<String>>,
}

/// One finished query: one line of `queries.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryRecord {
    pub qid: String,
    pub method: Method,
    pub task: TaskType,
    /// Why the model failed on this query (the record then has no answer and scores as wrong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer, or `supported` / `refuted` for claims.
    pub prediction: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<agent::Verdict>,
    pub final_table: Option<String>,
    /// Tables QA read, in first-read order.
    pub tables_seen: Vec<String>,
    /// The method's retrieval ranking, best first (for the agent: the first grep ranking).
    pub ranking: Vec<String>,
    /// The agent's full trajectory (calls, rounds); absent for single-call baselines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<Trajectory>,
    /// The raw output of a baseline's QA call (the agent's are in its trajectory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qa_output: Option<String>,
    /// T-RAG's coarse stage: the chosen clusters' sizes per view, their union C* (which
    /// `ranking` orders in full), and whether the gold table was in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolRecord>,
    pub gold: Gold,
    pub metrics: QueryMetrics,
    pub cost: Cost,
}

impl QueryRecord {
    /// The per-query score significance tests compare: F1 for table QA, correctness (0/1) for
    /// claims.
    pub fn answer_score(&self) -> Option<f64> {
        self.metrics
            .f1
            .or_else(|| self.metrics.correct.map(|ok| f64::from(u8::from(ok))))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub views: [usize; 3],
    pub union: usize,
    pub gold_in_pool: bool,
}

/// Settings shared by every method.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The agent's settings; `task` is replaced by each query's own.
    pub agent: AgentConfig,
    /// Generation cap of the baselines' QA call.
    pub qa_max_new_tokens: usize,
    /// How many ids of a retrieval ranking are stored.
    pub ranking_depth: usize,
    /// False: every time is recorded as 0, so two runs of the same inputs are byte-identical.
    pub timings: bool,
    /// How many dense candidates the rerank method reorders.
    pub rerank_depth: usize,
    /// How the baseline methods (oracle, bm25, dense, rerank) answer table questions.
    pub qa: QaMode,
    /// TableRAG's settings (`task` is replaced by each query's own).
    pub tablerag: TableRagConfig,
    /// TaS's settings; `task`, `max_steps`, `evidence` and `max_new_tokens` are the agent's.
    pub tas: TasConfig,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            agent: AgentConfig::default(),
            qa_max_new_tokens: 512,
            ranking_depth: 10,
            timings: true,
            rerank_depth: 5,
            qa: QaMode::Text,
            tablerag: TableRagConfig::default(),
            tas: TasConfig::default(),
        }
    }
}

/// The dense and rerank methods' retrievers, built by the caller (which owns the model files
/// and the embedding cache).
struct TragSetup<'e> {
    encoder: &'e dyn TextEncoder,
    index: &'e TragIndex,
}

struct DenseSetup<'e> {
    encoder: &'e dyn TextEncoder,
    /// One row per table, in table order.
    index: &'e DenseIndex,
    reranker: Option<Mutex<&'e mut Reranker>>,
}

/// TableRAG's chunk index: the encoder, one embedding per chunk, and the chunks.
pub(super) struct ChunkSetup<'e> {
    pub(super) encoder: &'e dyn TextEncoder,
    pub(super) index: &'e DenseIndex,
    pub(super) chunks: &'e [Chunk],
}

/// Runs one method over a search space, query by query.
pub struct Evaluator<'a, S: SearchSpace + ?Sized> {
    method: Method,
    space: &'a S,
    index_of: BTreeMap<String, usize>,
    bm25: Option<Bm25Index>,
    dense: Option<DenseSetup<'a>>,
    chunks: Option<ChunkSetup<'a>>,
    trag: Option<TragSetup<'a>>,
    tableqa_agent: Agent,
    fact_agent: Agent,
    tableqa_tas: Tas,
    fact_tas: Tas,
    options: EvalOptions,
}

impl<'a, S: SearchSpace + ?Sized> Evaluator<'a, S> {
    /// `table_count`: the number of tables in `space` (indices `0..table_count`). BM25 indexes
    /// `space.full_text` of every table, i.e. the text QA reads.
    pub fn new(
        method: Method,
        space: &'a S,
        table_count: usize,
        options: EvalOptions,
    ) -> Result<Self, EvalError> {
        let index_of = (0..table_count)
            .map(|i| (space.table_id(i).to_string(), i))
            .collect();
        let tas_bm25 = method == Method::Tas && options.tas.uses(SearchTool::Bm25);
        let bm25 = if matches!(method, Method::Bm25 | Method::Hybrid) || tas_bm25 {
            let texts: Vec<String> = (0..table_count).map(|i| space.full_text(i)).collect();
            Some(Bm25Builder::okapi().build(&texts)?)
        } else {
            None
        };
        let agent_for = |task| {
            Agent::new(AgentConfig {
                task,
                ..options.agent.clone()
            })
        };
        // The same budget, evidence size and token cap as TableSeek's, so the two compare.
        let tas_for = |task| {
            Tas::new(TasConfig {
                task,
                max_steps: options.agent.max_steps,
                evidence: options.agent.evidence,
                max_new_tokens: options.agent.max_new_tokens,
                ..options.tas.clone()
            })
        };
        Ok(Self {
            method,
            space,
            index_of,
            bm25,
            dense: None,
            chunks: None,
            trag: None,
            tableqa_agent: agent_for(TaskType::Tableqa)?,
            fact_agent: agent_for(TaskType::FactVerification)?,
            tableqa_tas: tas_for(TaskType::Tableqa)?,
            fact_tas: tas_for(TaskType::FactVerification)?,
            options,
        })
    }

    /// The encoder and document embeddings (rows in table order) of the dense and rerank
    /// methods.
    pub fn with_dense(mut self, encoder: &'a dyn TextEncoder, index: &'a DenseIndex) -> Self {
        self.dense = Some(DenseSetup {
            encoder,
            index,
            reranker: None,
        });
        self
    }

    /// TableRAG's chunks and their embeddings (rows in chunk order).
    pub fn with_chunks(
        mut self,
        encoder: &'a dyn TextEncoder,
        index: &'a DenseIndex,
        chunks: &'a [Chunk],
    ) -> Self {
        self.chunks = Some(ChunkSetup {
            encoder,
            index,
            chunks,
        });
        self
    }

    /// T-RAG's encoder and index.
    pub fn with_trag(mut self, encoder: &'a dyn TextEncoder, index: &'a TragIndex) -> Self {
        self.trag = Some(TragSetup { encoder, index });
        self
    }

    /// The rerank method's reranker (after [`Evaluator::with_dense`]).
    pub fn with_reranker(mut self, reranker: &'a mut Reranker) -> Self {
        if let Some(dense) = &mut self.dense {
            dense.reranker = Some(Mutex::new(reranker));
        }
        self
    }

    pub fn method(&self) -> Method {
        self.method
    }

    /// Answers and scores one query.
    pub fn run_query<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let started = Instant::now();
        let result =
            match self.method {
                Method::Tableseek => self.tableseek(llm, query),
                Method::Bm25 | Method::Dense | Method::Rerank | Method::Hybrid => {
                    self.ranked(llm, query)
                }
                Method::Oracle => {
                    let gold = query.gold_table();
                    let table = self.index_of.get(gold).copied().ok_or_else(|| {
                        EvalError::GoldNotInCorpus {
                            qid: query.qid.clone(),
                            table: gold.to_string(),
                        }
                    })?;
                    self.baseline(llm, query, vec![table], 0.0)
                }
                Method::NoTable => self.baseline(llm, query, Vec::new(), 0.0),
                Method::Tablerag => self.tablerag(llm, query),
                Method::Trag => self.trag(llm, query),
                Method::Tas => self.tas(llm, query),
            };
        // A model failure is this query's outcome, not the run's: stopping would make every
        // resume fail on the same query.
        let mut record = match result {
            Ok(record) => record,
            Err(EvalError::Agent(error)) => self.failed(query, error),
            Err(other) => return Err(other),
        };
        let cost = &mut record.cost;
        if self.options.timings {
            cost.ms.total = started.elapsed().as_secs_f64() * 1e3;
            if matches!(
                self.method,
                Method::Tableseek | Method::Tablerag | Method::Tas
            ) {
                let llm_ms = cost.ms.pattern_gen
                    + cost.ms.refine
                    + cost.ms.qa
                    + cost.ms.decompose
                    + cost.ms.nl2sql
                    + cost.ms.compose;
                cost.ms.retrieval = (cost.ms.total - llm_ms).max(0.0);
            }
        } else {
            cost.ms = StageMs::default();
            cost.cached_tokens = 0;
            if let Some(trajectory) = &mut record.trajectory {
                trajectory.zero_timings();
            }
        }
        record.metrics = score(query, &record)?;
        Ok(record)
    }

    fn tableseek<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
    ) -> Result<QueryRecord, EvalError> {
        let agent = match query.task {
            TaskType::Tableqa => &self.tableqa_agent,
            TaskType::FactVerification => &self.fact_agent,
        };
        let trajectory = agent.run(llm, self.space, &query.query)?;
        Ok(self.trajectory_record(query, trajectory))
    }

    pub(super) fn trajectory_record(
        &self,
        query: &EvalQuery,
        mut trajectory: Trajectory,
    ) -> QueryRecord {
        trajectory.query_id = Some(query.qid.clone());
        let mut cost = Cost {
            steps: trajectory.steps,
            llm_calls: trajectory.calls.len(),
            prompt_tokens: trajectory.totals.prompt_tokens,
            cached_tokens: trajectory.totals.cached_tokens,
            ..Cost::default()
        };
        for call in &trajectory.calls {
            let stage = match call.kind {
                StepKind::PatternGen => &mut cost.ms.pattern_gen,
                StepKind::Qa | StepKind::QaFallback => &mut cost.ms.qa,
                StepKind::Decompose => &mut cost.ms.decompose,
                StepKind::Nl2Sql => &mut cost.ms.nl2sql,
                StepKind::Compose => &mut cost.ms.compose,
                // TaS: planning (schema, expansion, planner) is its pattern generation, and
                // verifying rows is its refinement.
                StepKind::TasSchema | StepKind::TasExpand | StepKind::TasPlan => {
                    &mut cost.ms.pattern_gen
                }
                StepKind::TasVerify => &mut cost.ms.refine,
                StepKind::RefineSelect
                | StepKind::RefineRegenerate
                | StepKind::RefineRerank
                | StepKind::RefineScore
                | StepKind::RefineNone => &mut cost.ms.refine,
            };
            *stage += call.ms;
        }
        let mut tables_seen: Vec<String> = Vec::new();
        for seen in &trajectory.tables_seen {
            if !tables_seen.contains(&seen.table_id) {
                tables_seen.push(seen.table_id.clone());
            }
        }
        let ranking = trajectory
            .rounds
            .first()
            .map(|round| {
                round
                    .candidates
                    .iter()
                    .take(self.options.ranking_depth)
                    .map(|c| c.table_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        QueryRecord {
            qid: query.qid.clone(),
            method: self.method,
            task: query.task,
            error: None,
            prediction: trajectory.answer.clone(),
            verdict: trajectory.verdict,
            final_table: trajectory.final_table.clone(),
            tables_seen,
            ranking,
            trajectory: Some(trajectory),
            qa_output: None,
            pool: None,
            gold: gold(query),
            metrics: placeholder_metrics(),
            cost,
        }
    }

    /// The record of a query whose model call failed: what was done before the failure (the
    /// agent's partial trajectory), no answer, and the reason.
    fn failed(&self, query: &EvalQuery, error: AgentError) -> QueryRecord {
        tracing::warn!(qid = %query.qid, %error, "query failed; recorded without an answer");
        let message = error.to_string();
        let mut record = match error {
            AgentError::Aborted { partial, .. } => {
                let mut record = self.trajectory_record(query, *partial);
                record.prediction.clear();
                record.verdict = None;
                record
            }
            _ => QueryRecord {
                qid: query.qid.clone(),
                method: self.method,
                task: query.task,
                error: None,
                prediction: String::new(),
                verdict: None,
                final_table: None,
                tables_seen: Vec::new(),
                ranking: Vec::new(),
                trajectory: None,
                qa_output: None,
                pool: None,
                gold: gold(query),
                metrics: placeholder_metrics(),
                cost: Cost::default(),
            },
        };
        record.error = Some(message);
        record
    }

    /// The baselines' tail: QA on the top hit, the ranking recorded to the run's depth.
    fn qa_on_ranking<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
        hits: &[Hit],
        retrieval_ms: f64,
    ) -> Result<QueryRecord, EvalError> {
        let mut record = self.baseline(
            llm,
            query,
            hits.first().map(|hit| hit.doc).into_iter().collect(),
            retrieval_ms,
        )?;
        record.ranking = hits
            .iter()
            .take(self.options.ranking_depth.max(1))
            .map(|hit| self.space.table_id(hit.doc).to_string())
            .collect();
        Ok(record)
    }

    /// One baseline QA call on `tables` (may be empty).
    fn baseline<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
        tables: Vec<usize>,
        retrieval_ms: f64,
    ) -> Result<QueryRecord, EvalError> {
        if self.options.qa == QaMode::Sql {
            if let Some(&first) = tables.first() {
                if let Some(table) = self.space.table(first) {
                    return self.baseline_sql(llm, query, first, table, retrieval_ms);
                }
            }
        }
        let texts: Vec<String> = tables.iter().map(|&t| self.space.full_text(t)).collect();
        let (outcome, response) = baseline_qa(
            llm,
            query.task,
            &query.query,
            &texts,
            self.options.qa_max_new_tokens,
        )?;
        let ids: Vec<String> = tables
            .iter()
            .map(|&t| self.space.table_id(t).to_string())
            .collect();
        Ok(self.one_call_record(query, outcome, response, ids.clone(), ids, retrieval_ms))
    }

    /// The record of a method that answers in one QA call: the top of `ranking` is its final
    /// table, `tables_seen` what the call read.
    fn one_call_record(
        &self,
        query: &EvalQuery,
        outcome: agent::QaOutcome,
        response: LlmResponse,
        tables_seen: Vec<String>,
        ranking: Vec<String>,
        retrieval_ms: f64,
    ) -> QueryRecord {
        QueryRecord {
            qid: query.qid.clone(),
            method: self.method,
            task: query.task,
            error: None,
            prediction: outcome.answer,
            verdict: Some(outcome.verdict),
            final_table: ranking.first().cloned(),
            tables_seen,
            ranking,
            trajectory: None,
            qa_output: Some(response.text),
            pool: None,
            gold: gold(query),
            metrics: placeholder_metrics(),
            cost: Cost {
                steps: 1,
                llm_calls: 1,
                prompt_tokens: response.prompt_tokens,
                cached_tokens: response.cached_tokens,
                ms: StageMs {
                    retrieval: retrieval_ms,
                    qa: response.ms,
                    ..StageMs::default()
                },
                ..Cost::default()
            },
        }
    }
}

impl<S: SearchSpace + ?Sized> Evaluator<'_, S> {
    /// Baseline SQL QA on the top table: its `qa_output` is the attempts (SQL, rows, errors) as
    /// JSON; a question no query answered has an empty prediction.
    fn baseline_sql<L: Llm + ?Sized>(
        &self,
        llm: &mut L,
        query: &EvalQuery,
        table_index: usize,
        table: &crate::corpus::Table,
        retrieval_ms: f64,
    ) -> Result<QueryRecord, EvalError> {
        let claim = query.task == TaskType::FactVerification;
        let question = if claim {
            agent::sql_qa::claim_question(&query.query)
        } else {
            query.query.clone()
        };
        let outcome = sql_qa(
            llm,
            &question,
            table,
            self.options.qa_max_new_tokens,
            CallKind::Qa,
            !claim && self.options.agent.sql_answer == SqlAnswer::Phrased,
        )?;
        // A claim no query tested counts as refuted, as the baseline's text prompt says.
        let (prediction, verdict) = if claim {
            let label = outcome
                .attempts
                .last()
                .and_then(|a| a.claim_verdict())
                .unwrap_or(agent::Verdict::Refuted);
            (agent::parse::fact_answer(label).to_string(), label)
        } else if outcome.parsed {
            (outcome.answer.clone(), agent::Verdict::Answered)
        } else {
            // No query ran: the evidence stays unread, as an insufficient-evidence answer.
            (outcome.answer.clone(), agent::Verdict::Insufficient)
        };
        let id = self.space.table_id(table_index).to_string();
        let sum = |f: fn(&LlmResponse) -> f64| outcome.responses.iter().map(f).sum::<f64>();
        Ok(QueryRecord {
            qid: query.qid.clone(),
            method: self.method,
            task: query.task,
            error: None,
            prediction,
            verdict: Some(verdict),
            final_table: Some(id.clone()),
            tables_seen: vec![id.clone()],
            ranking: vec![id],
            trajectory: None,
            qa_output: Some(serde_json::to_string(&outcome.attempts).unwrap_or_default()),
            pool: None,
            gold: gold(query),
            metrics: placeholder_metrics(),
            cost: Cost {
                steps: outcome.responses.len(),
                llm_calls: outcome.responses.len(),
                prompt_tokens: sum(|r| r.prompt_tokens as f64) as usize,
                cached_tokens: sum(|r| r.cached_tokens as f64) as usize,
                ms: StageMs {
                    retrieval: retrieval_ms,
                    qa: sum(|r| r.ms),
                    ..StageMs::default()
                },
                ..Cost::default()
            },
        })
    }
}

fn gold(query: &EvalQuery) -> Gold {
    Gold {
        tables: query.gold_tables.clone(),
        answers: query.answers.clone(),
        label: query.label,
        group: query.group_tables.clone(),
    }
}

/// Filled in by [`score`] once the record is complete.
fn placeholder_metrics() -> QueryMetrics {
    QueryMetrics {
        r_at_1: false,
        r_at_3: false,
        r_at_5: false,
        r_all: None,
        r_final: None,
        gr_at_1: None,
        gr_all: None,
        gr_final: None,
        f1: None,
        em: None,
        correct: None,
        label: None,
    }
}

/// Scores a record against its query's gold data. An unverifiable claim has no verdict and
/// counts as wrong.
fn score(query: &EvalQuery, record: &QueryRecord) -> Result<QueryMetrics, MetricsError> {
    let answer = match query.task {
        TaskType::Tableqa => AnswerOutcome::TableQa {
            prediction: record.prediction.clone(),
            gold_answers: query.answers.clone(),
        },
        TaskType::FactVerification => AnswerOutcome::FactVerification {
            prediction: match record.verdict {
                Some(agent::Verdict::Supported) => Some(Verdict::Supported),
                Some(agent::Verdict::Refuted) => Some(Verdict::Refuted),
                _ => None,
            },
            gold: Verdict::from_label(query.label.unwrap_or(-1))?,
        },
    };
    QueryOutcome {
        gold_table: query.gold_table().to_string(),
        group: query.group_tables.clone(),
        ranking: record.ranking.clone(),
        tables_seen: Some(record.tables_seen.clone()),
        final_table: record.final_table.clone(),
        answer: Some(answer),
    }
    .metrics(0)
}
