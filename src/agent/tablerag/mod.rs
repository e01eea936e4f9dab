//! TableRAG as a method (`--method tablerag`): retrieve table chunks, let the model split the
//! question into sub-questions, answer each by SQL over the retrieved tables plus the chunk
//! text, until the model answers (`../shared/method/tablerag.md`).
//!
//! One query: chunk retrieval with the question seeds the loop with the top table (shown whole);
//! each iteration is a decompose call (a sub-question, or the final answer from the second
//! iteration on), then for a sub-question: chunk retrieval (top `recall`, keep `top_k`), NL2SQL
//! over the schemas of those chunks' tables (one in-memory SQLite database, read-only, time- and
//! row-limited), and a compose call that reconciles the SQL result with the excerpts. At most
//! three LLM calls per iteration, `max_iterations` iterations.
//!
//! The loop sees the corpus through [`SearchSpace`] (tables, texts, ids for the trajectory
//! only) and the chunk index through [`ChunkSearch`], so it runs on scripted models and fake
//! indexes in tests. Tables appear in prompts only under per-query anonymous ids (`T0`, `T1`, ...),
//! which are also their SQL names.

pub mod prompts;
#[cfg(test)]
mod tests;

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::parse::{strip_thinking, Verdict};
use super::sql_qa::{extract_sql, SqlAttempt};
use super::trajectory::{
    Action, CallRecord, CandidateRecord, ChunkRecord, IterationRecord, NoneReason, RoundRecord,
    SeenTable, StepKind, Trajectory,
};
use super::{
    AgentError, CallKind, ChatMessage, Llm, LlmRequest, LlmResponse, SearchSpace, TaskType,
};
use crate::engine::Grammar;
use crate::sql::{Database, QueryLimits};
use prompts::{Decision, SqlEvidence};

/// A retrieved chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkHit {
    pub chunk: usize,
    /// The chunk's table (a [`SearchSpace`] index).
    pub table: usize,
    pub score: f64,
}

/// The chunk index TableRAG retrieves from.
pub trait ChunkSearch {
    /// The `n` chunks most relevant to `text`, best first (deterministic ties).
    fn search(&self, text: &str, n: usize) -> Result<Vec<ChunkHit>, String>;
    fn chunk_text(&self, chunk: usize) -> &str;
}

/// Which tables the SQL of an iteration may read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SqlTables {
    /// The tables of the iteration's top-k chunks, in rank order (the paper).
    #[default]
    Retrieved,
    /// The table the loop was seeded with (the paper's released code).
    First,
}

/// TableRAG's settings (defaults: the paper's, but for one SQL retry: `sql_retries`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRagConfig {
    pub task: TaskType,
    pub max_iterations: usize,
    /// Chunks recalled per retrieval (N).
    pub recall: usize,
    /// Chunks kept for compose and for the SQL tables (k).
    pub top_k: usize,
    pub sql_tables: SqlTables,
    /// After the last iteration without an answer, one more decompose call that must answer.
    pub force_answer: bool,
    /// Generation cap of the NL2SQL and compose calls.
    pub max_new_tokens: usize,
    /// NL2SQL calls after a query that failed, each shown the error (the paper: 0, the error
    /// goes to compose; SQL QA elsewhere in tableseek retries once).
    #[serde(default)]
    pub sql_retries: usize,
}

impl Default for TableRagConfig {
    fn default() -> Self {
        Self {
            task: TaskType::Tableqa,
            max_iterations: 5,
            recall: 30,
            top_k: 3,
            sql_tables: SqlTables::Retrieved,
            force_answer: false,
            max_new_tokens: 256,
            sql_retries: 1,
        }
    }
}

/// Result rows the model sees, and the characters they may take.
const SHOWN_ROWS: usize = 50;
const SHOWN_CHARS: usize = 4000;
/// Rows a query may return before the guard stops it (the model is told "more than").
const ROW_CAP: usize = 10_000;
/// Longest sub-answer kept from a compose call, in characters.
const SUB_ANSWER_CHARS: usize = 500;

/// Runs TableRAG on one query.
pub fn run<L: Llm + ?Sized, S: SearchSpace + ?Sized>(
    llm: &mut L,
    space: &S,
    chunks: &dyn ChunkSearch,
    config: &TableRagConfig,
    query: &str,
) -> Result<Trajectory, AgentError> {
    if query.trim().is_empty() {
        return Err(AgentError::EmptyQuery);
    }
    if config.max_iterations == 0 || config.top_k == 0 || config.recall < config.top_k {
        return Err(AgentError::InvalidConfig(format!(
            "TableRAG needs max_iterations >= 1 and recall >= top_k >= 1 (got {}, {}, {})",
            config.max_iterations, config.recall, config.top_k
        )));
    }
    let mut run = Run {
        llm,
        space,
        chunks,
        config,
        trajectory: Trajectory::new(query, config.task),
        shown: Vec::new(),
        seen: Vec::new(),
    };
    run.run(query)?;
    Ok(run.trajectory)
}

struct Run<'a, L: Llm + ?Sized, S: SearchSpace + ?Sized> {
    llm: &'a mut L,
    space: &'a S,
    chunks: &'a dyn ChunkSearch,
    config: &'a TableRagConfig,
    trajectory: Trajectory,
    /// Table indices in the order they were first shown: `T{i}` is `shown[i]`.
    shown: Vec<usize>,
    /// Tables whose content or schema a call read, with that call's index.
    seen: Vec<(usize, usize)>,
}

/// What one sub-question's SQL step did.
struct SqlStep {
    tables: Vec<String>,
    attempt: Option<SqlAttempt>,
    result: String,
}

impl<L: Llm + ?Sized, S: SearchSpace + ?Sized> Run<'_, L, S> {
    fn run(&mut self, query: &str) -> Result<(), AgentError> {
        let task = self.config.task;
        let hits = self.search(query)?;
        let ranking = tables_in_order(&hits);
        let seed = ranking.first().copied();
        let seed_text = seed.map(|t| (self.shown_id(t), self.space.full_text(t)));
        self.trajectory.rounds.push(RoundRecord {
            tool: None,
            patterns: Vec::new(),
            candidates: ranking
                .iter()
                .map(|&t| CandidateRecord {
                    shown_id: if Some(t) == seed {
                        "T0".into()
                    } else {
                        String::new()
                    },
                    table_id: self.space.table_id(t).to_string(),
                    score: hits.iter().find(|h| h.table == t).map_or(0.0, |h| h.score),
                })
                .collect(),
            widened: false,
            history_restarted: false,
        });
        let mut messages = vec![
            ChatMessage::system(prompts::decompose_system(task)),
            ChatMessage::user(prompts::decompose_user(
                task,
                seed_text
                    .as_ref()
                    .map(|(id, text)| (id.as_str(), text.as_str())),
                query,
            )),
        ];
        if let Some(seed) = seed {
            self.seen.push((seed, 0));
        }
        let mut answer = None;
        for iteration in 0..self.config.max_iterations {
            let first = iteration == 0;
            let (response, text, decision) = self.decompose(&messages, !first, false)?;
            match decision {
                Decision::Answer { answer: a, verdict } if !first => {
                    self.record_answer(response, &a, verdict);
                    answer = Some((a, verdict));
                    break;
                }
                Decision::SubQuery(subquery) => {
                    let action = Action::SubQuery {
                        subquery: subquery.clone(),
                    };
                    self.record(StepKind::Decompose, response, true, action, None);
                    let sub_answer = self.solve(&subquery)?;
                    messages.push(ChatMessage::assistant(text));
                    messages.push(ChatMessage::user(prompts::subquery_result(&sub_answer)));
                }
                // An answer before any sub-question (the paper's code refuses it) or a reply of
                // neither shape: a note, and the iteration is spent.
                decision => {
                    let reason = if matches!(decision, Decision::Unreadable) {
                        NoneReason::Unparseable
                    } else {
                        NoneReason::Declined
                    };
                    self.record(
                        StepKind::Decompose,
                        response,
                        false,
                        Action::NoAction { reason },
                        None,
                    );
                    messages.push(ChatMessage::assistant(text));
                    messages.push(ChatMessage::user(prompts::format_note(first)));
                }
            }
        }
        if answer.is_none() {
            self.trajectory.incomplete = true;
            if self.config.force_answer {
                messages.push(ChatMessage::user(prompts::FORCE_ANSWER));
                let (response, _, decision) = self.decompose(&messages, true, true)?;
                match decision {
                    Decision::Answer { answer: a, verdict } => {
                        self.record_answer(response, &a, verdict);
                        answer = Some((a, verdict));
                    }
                    _ => {
                        let action = Action::NoAction {
                            reason: NoneReason::Unparseable,
                        };
                        self.record(StepKind::Decompose, response, false, action, None);
                    }
                }
            }
        }
        let (answer, verdict) = match answer {
            Some((answer, verdict)) => (answer, Some(verdict)),
            None => (String::new(), None),
        };
        self.trajectory.answer = answer;
        self.trajectory.verdict = verdict;
        self.trajectory.final_table = self.final_table(seed);
        let seen_verdict = verdict.unwrap_or(match task {
            TaskType::Tableqa => Verdict::Insufficient,
            TaskType::FactVerification => Verdict::Unverifiable,
        });
        self.trajectory.tables_seen = self
            .seen
            .iter()
            .map(|&(table, call)| SeenTable {
                table_id: self.space.table_id(table).to_string(),
                call,
                verdict: seen_verdict,
            })
            .collect();
        Ok(())
    }

    /// The table of the last query that ran: the first shown id its SQL names, else the seed.
    fn final_table(&self, seed: Option<usize>) -> Option<String> {
        let named = self.trajectory.iterations.iter().rev().find_map(|it| {
            it.sql_rows?;
            let sql = it.sql.as_deref()?.to_ascii_uppercase();
            let words: Vec<&str> = sql
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            let mut first: Option<(usize, usize)> = None;
            for (i, &table) in self.shown.iter().enumerate() {
                let id = format!("T{i}");
                if let Some(at) = words.iter().position(|w| *w == id) {
                    if first.is_none_or(|(best, _)| at < best) {
                        first = Some((at, table));
                    }
                }
            }
            first.map(|(_, table)| table)
        });
        named.or(seed).map(|t| self.space.table_id(t).to_string())
    }

    /// One decompose call: the response, its text without thinking, and what it decided.
    fn decompose(
        &mut self,
        messages: &[ChatMessage],
        allow_answer: bool,
        answer_only: bool,
    ) -> Result<(LlmResponse, String, Decision), AgentError> {
        let task = self.config.task;
        let grammar = prompts::decompose_grammar(task, allow_answer, answer_only);
        let response = self.call(
            CallKind::Decompose,
            messages,
            prompts::DECOMPOSE_TOKENS,
            Some(grammar),
        )?;
        let text = strip_thinking(&response.text);
        let decision = prompts::parse_decision(&text, task);
        Ok((response, text, decision))
    }

    fn record_answer(&mut self, response: LlmResponse, answer: &str, verdict: Verdict) {
        let action = Action::Answer {
            table_ids: Vec::new(),
            answer: answer.to_string(),
            verdict,
        };
        self.record(StepKind::Decompose, response, true, action, None);
    }

    fn search(&self, text: &str) -> Result<Vec<ChunkHit>, AgentError> {
        self.chunks
            .search(text, self.config.recall)
            .map_err(AgentError::Retrieval)
    }

    fn shown_id(&mut self, table: usize) -> String {
        let i = match self.shown.iter().position(|&t| t == table) {
            Some(i) => i,
            None => {
                self.shown.push(table);
                self.shown.len() - 1
            }
        };
        format!("T{i}")
    }

    /// One sub-question: retrieval, SQL over the retrieved tables, compose.
    fn solve(&mut self, subquery: &str) -> Result<String, AgentError> {
        let hits: Vec<ChunkHit> = self
            .search(subquery)?
            .into_iter()
            .take(self.config.top_k)
            .collect();
        let sql_tables = match self.config.sql_tables {
            SqlTables::Retrieved => tables_in_order(&hits),
            SqlTables::First => self.shown.first().copied().into_iter().collect(),
        };
        let chunk_records: Vec<ChunkRecord> = hits
            .iter()
            .map(|hit| ChunkRecord {
                chunk: hit.chunk,
                table_id: self.space.table_id(hit.table).to_string(),
                shown_id: self.shown_id(hit.table),
                score: hit.score,
            })
            .collect();
        let sql_step = if sql_tables.is_empty() {
            None
        } else {
            Some(self.sql_step(subquery, &sql_tables)?)
        };
        let excerpts: Vec<(String, &str)> = chunk_records
            .iter()
            .zip(&hits)
            .map(|(record, hit)| (record.shown_id.clone(), self.chunks.chunk_text(hit.chunk)))
            .collect();
        let evidence = sql_step.as_ref().map(|step| SqlEvidence {
            tables: &step.tables,
            sql: step
                .attempt
                .as_ref()
                .map(|a| a.sql.as_str())
                .filter(|s| !s.is_empty()),
            result: &step.result,
        });
        let prompt = prompts::compose(subquery, &excerpts, evidence.as_ref());
        let response = self.call(
            CallKind::Compose,
            &[ChatMessage::user(prompt)],
            self.config.max_new_tokens,
            None,
        )?;
        let answer: String = strip_thinking(&response.text)
            .trim()
            .chars()
            .take(SUB_ANSWER_CHARS)
            .collect();
        let action = Action::SubAnswer {
            answer: answer.clone(),
        };
        self.record(
            StepKind::Compose,
            response,
            !answer.is_empty(),
            action,
            None,
        );
        let attempt = sql_step.as_ref().and_then(|s| s.attempt.as_ref());
        self.trajectory.iterations.push(IterationRecord {
            subquery: subquery.to_string(),
            chunks: chunk_records,
            sql_tables: sql_tables
                .iter()
                .map(|&t| self.space.table_id(t).to_string())
                .collect(),
            sql: attempt.map(|a| a.sql.clone()).filter(|s| !s.is_empty()),
            sql_error: attempt.and_then(|a| a.error.clone()),
            sql_rows: attempt.filter(|a| a.error.is_none()).map(|a| a.rows.len()),
            answer: answer.clone(),
        });
        Ok(answer)
    }

    /// NL2SQL over `tables` (loaded under their shown ids) and the query's execution; every
    /// failure is text for compose, never an error of the run.
    fn sql_step(&mut self, subquery: &str, tables: &[usize]) -> Result<SqlStep, AgentError> {
        let mut loaded = Vec::new();
        let mut skipped = Vec::new();
        for &t in tables {
            let id = self.shown_id(t);
            match self.space.table(t) {
                Some(table) if !table.header.is_empty() => loaded.push((table, id)),
                _ => skipped.push(id),
            }
        }
        let ids: Vec<String> = loaded.iter().map(|(_, id)| id.clone()).collect();
        let pairs: Vec<(&crate::corpus::Table, &str)> =
            loaded.iter().map(|(t, id)| (*t, id.as_str())).collect();
        let database = if pairs.is_empty() {
            Err(format!("no loadable table among {}", skipped.join(", ")))
        } else {
            Database::new(&pairs).map_err(|e| format!("the tables could not be loaded: {e}"))
        };
        let database = match database {
            Ok(db) => db,
            Err(error) => {
                return Ok(SqlStep {
                    tables: ids,
                    attempt: None,
                    result: error,
                })
            }
        };
        let schemas: Vec<String> = database
            .relations()
            .iter()
            .zip(&loaded)
            .map(|(relation, (table, _))| prompts::schema_json(relation, table).to_string())
            .collect();
        let names: Vec<String> = database
            .relations()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let prompt = prompts::nl2sql(&schemas.join("\n"), &names, subquery);
        let call = self.trajectory.calls.len();
        for &t in tables {
            self.seen.push((t, call));
        }
        // One SELECT over one of these relations, naming only its columns (with --constrain
        // on; the adapter drops the grammar otherwise).
        let grammar = Grammar::Lark(crate::sql::grammar::select_grammar_over(
            database.relations(),
        ));
        let mut messages = vec![ChatMessage::user(prompt)];
        let limits = QueryLimits {
            max_rows: ROW_CAP,
            ..QueryLimits::default()
        };
        let table_ids: Vec<String> = tables
            .iter()
            .map(|&t| self.space.table_id(t).to_string())
            .collect();
        let mut attempt_no = 0;
        let (attempt, result_text) = loop {
            let response = self.call(
                CallKind::Nl2Sql,
                &messages,
                self.config.max_new_tokens,
                Some(grammar.clone()),
            )?;
            let reply = strip_thinking(&response.text);
            let started = Instant::now();
            let (sql, result) = match extract_sql(&reply) {
                Some(sql) => {
                    let result = database.query(&sql, &limits).map_err(|e| e.to_string());
                    (sql, result)
                }
                None => (
                    String::new(),
                    Err("the reply holds no SELECT query".to_string()),
                ),
            };
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let (attempt, result_text) = match result {
                Ok(result) => {
                    let text = render_rows(&result.columns, &result.rows, result.truncated);
                    let mut rows = result.rows;
                    let truncated = result.truncated || rows.len() > SHOWN_ROWS;
                    rows.truncate(SHOWN_ROWS);
                    let attempt = SqlAttempt {
                        sql,
                        rows,
                        truncated,
                        error: None,
                        ms,
                    };
                    (attempt, text)
                }
                Err(error) => {
                    let attempt = SqlAttempt {
                        sql,
                        rows: Vec::new(),
                        truncated: false,
                        error: Some(error.clone()),
                        ms,
                    };
                    (attempt, format!("the query failed: {error}"))
                }
            };
            let parsed = attempt.error.is_none();
            let action = Action::Sql {
                table_ids: table_ids.clone(),
            };
            self.record(
                StepKind::Nl2Sql,
                response,
                parsed,
                action,
                Some(attempt.clone()),
            );
            if parsed || attempt_no >= self.config.sql_retries {
                break (attempt, result_text);
            }
            attempt_no += 1;
            messages.push(ChatMessage::assistant(reply));
            messages.push(ChatMessage::user(format!(
                "The query failed: {}\nWrite a corrected SQLite query. Return only the SQL.",
                attempt.error.as_deref().unwrap_or("")
            )));
        };
        Ok(SqlStep {
            tables: ids,
            attempt: Some(attempt),
            result: result_text,
        })
    }

    fn call(
        &mut self,
        kind: CallKind,
        messages: &[ChatMessage],
        max_new_tokens: usize,
        constraint: Option<Grammar>,
    ) -> Result<LlmResponse, AgentError> {
        let request = LlmRequest {
            messages: messages.to_vec(),
            max_new_tokens,
            kind,
            constraint,
        };
        self.llm
            .chat(&request)
            .map_err(|error| self.trajectory.abort(&error))
    }

    fn record(
        &mut self,
        kind: StepKind,
        response: LlmResponse,
        parsed: bool,
        action: Action,
        sql: Option<SqlAttempt>,
    ) {
        self.trajectory
            .push_call(CallRecord::new(kind, response, parsed, action, sql));
    }
}

/// The tables of `hits`, first occurrence order.
fn tables_in_order(hits: &[ChunkHit]) -> Vec<usize> {
    let mut tables = Vec::new();
    for hit in hits {
        if !tables.contains(&hit.table) {
            tables.push(hit.table);
        }
    }
    tables
}

/// Result rows as the model reads them: a header line, up to [`SHOWN_ROWS`] rows within
/// [`SHOWN_CHARS`], and how many rows there were.
fn render_rows(columns: &[String], rows: &[Vec<Option<String>>], truncated: bool) -> String {
    if rows.is_empty() {
        return "no rows".to_string();
    }
    let mut text = columns.join(" | ");
    let mut shown = 0;
    for row in rows.iter().take(SHOWN_ROWS) {
        let line: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("NULL")).collect();
        let line = line.join(" | ");
        if text.len() + line.len() + 1 > SHOWN_CHARS {
            break;
        }
        text.push('\n');
        text.push_str(&line);
        shown += 1;
    }
    let total = if truncated {
        format!("more than {ROW_CAP} rows")
    } else {
        format!("{} rows", rows.len())
    };
    if shown < rows.len() || truncated {
        format!("{text}\n({total}; the first {shown} shown)")
    } else {
        format!("{text}\n({total})")
    }
}
