//! Table-as-Search (TaS) on a table corpus (`../shared/method/table-as-search.md`): the search
//! state is a table of candidate tables × the query's constraints, whose pending cells are the
//! work left to do.
//!
//! One query runs as: a schema call lists the constraints, each with grep patterns → the state
//! table is created ([`state`], in-memory SQLite) → the first row expansion ranks tables by all
//! constraint patterns, by the query's own words, and by the query through each text tool (BM25,
//! dense: [`search`]), and appends the best unseen `per_search` of each, in the order of their
//! fused rank (no call: the schema call wrote those patterns) → then, until the budget keeps one call
//! for the answer: verify one row with pending cells (one call per row: its pending constraints
//! and its table's preview under their patterns), or, when nothing is pending and no row meets
//! every constraint, an expansion call writes `searches` new pattern lists → the answer is
//! TableSeek's QA on the best row's table (most `yes`, fewest `no`, first found), falling back to
//! the next rows while the model says the evidence is insufficient and calls are left.
//!
//! The planner is rule-based by default, as the spec says for small models (a 135M or 0.5B model
//! cannot steer the loop); `TasPlanner::Llm` asks the model for each step instead and falls back
//! to the rule when its output is unusable. Every call counts against `max_steps`, one is kept
//! for the answer, and the rows' operations run in a fixed order, so a query is deterministic.
//! The state table is written into the trajectory after every operation.

pub mod prompts;
pub mod search;
pub mod state;

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use self::prompts::{Constraint, PlanChoice};
use self::search::{fused_order, fused_ranking, Search, SearchTool, TextTools, TEXT_SEARCH_DEPTH};
use self::state::{CellStatus, StateError, StateRow, StateTable};
use super::fit::fit_tables;
use super::parse::{self, QaVariant, Verdict};
use super::prompts::{PromptOptions, Prompts, ShownTable};
use super::run::query_patterns;
use super::trajectory::{Action, CandidateRecord, RoundRecord, SeenTable, StepKind, Trajectory};
use super::{
    schemas, AgentError, CallKind, ChatMessage, Evidence, Grammar, Llm, LlmRequest, LlmResponse,
    SearchSpace, Strategy, TaskType,
};

/// Who picks each step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TasPlanner {
    /// The spec's rules: verify while rows are pending, expand when none matches, answer on a
    /// full match or when one call is left.
    #[default]
    Rule,
    /// One planner call per step (verify a row, search, answer); unusable output falls back to
    /// the rule.
    Llm,
}

impl std::str::FromStr for TasPlanner {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "rule" => Ok(TasPlanner::Rule),
            "llm" => Ok(TasPlanner::Llm),
            _ => Err(AgentError::BadName {
                what: "a TaS planner",
                input: s.to_string(),
                expected: "rule or llm",
            }),
        }
    }
}

/// TaS's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TasConfig {
    pub task: TaskType,
    /// S_max: every call counts, as in TableSeek; one is kept for the answer.
    pub max_steps: usize,
    /// n: pattern lists per row expansion.
    pub searches: usize,
    /// m: unseen tables appended from each list's ranking.
    pub per_search: usize,
    /// Most constraint columns the schema call may write.
    pub max_constraints: usize,
    pub planner: TasPlanner,
    /// How rows are found: grep always (the space's ranker under pattern lists), BM25 and dense
    /// over the query in the first expansion when listed.
    #[serde(default = "grep_only")]
    pub tools: Vec<SearchTool>,
    /// How many matched rows a verification preview shows.
    pub evidence: Evidence,
    pub max_new_tokens: usize,
}

impl Default for TasConfig {
    fn default() -> Self {
        Self {
            task: TaskType::default(),
            max_steps: 10,
            searches: 2,
            per_search: 2,
            max_constraints: 5,
            planner: TasPlanner::Rule,
            tools: grep_only(),
            evidence: Evidence::default(),
            max_new_tokens: 512,
        }
    }
}

fn grep_only() -> Vec<SearchTool> {
    vec![SearchTool::Grep]
}

impl TasConfig {
    /// Whether the first expansion searches with `tool`.
    pub fn uses(&self, tool: SearchTool) -> bool {
        self.tools.contains(&tool)
    }

    pub fn validate(&self) -> Result<(), AgentError> {
        if self.max_steps < 2 {
            return Err(AgentError::InvalidConfig(format!(
                "TaS needs at least 2 steps (schema and answer), got {}",
                self.max_steps
            )));
        }
        if self.searches == 0 || self.per_search == 0 || self.max_constraints == 0 {
            return Err(AgentError::InvalidConfig(
                "TaS's searches, per-search tables and constraints must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Why the loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A row meets every constraint.
    FullMatch,
    /// Nothing pending, and no search found a new table.
    Saturated,
    /// One call was left (the answer's).
    Budget,
    /// The planner chose to answer.
    Planner,
}

/// A state-table operation, as logged in the trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    Create,
    Append,
    Update,
    Answer,
}

/// The state table after one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub operation: Operation,
    /// The call that led to it (index into `calls`); `None` for the first expansion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<usize>,
    /// Time of the SQLite operation itself.
    pub ms: f64,
    pub rows: Vec<StateRow>,
}

/// TaS's part of a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TasRecord {
    pub planner: TasPlanner,
    pub constraints: Vec<Constraint>,
    /// The schema call's output was unusable and the query's words stood in as one constraint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub schema_from_query: bool,
    pub snapshots: Vec<Snapshot>,
    pub stop: Option<StopReason>,
    pub rows_added: usize,
    pub cells_filled: usize,
    pub cells_pending: usize,
    /// The call after which a row first met every constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_full_match_call: Option<usize>,
    /// The method's ranking (real ids): the rows as answer synthesis orders them, then the
    /// first search's ranking.
    pub ranking: Vec<String>,
}

impl TasRecord {
    /// The last snapshot's rows.
    pub fn final_rows(&self) -> &[StateRow] {
        self.snapshots.last().map_or(&[], |s| &s.rows)
    }

    pub fn zero_timings(&mut self) {
        for snapshot in &mut self.snapshots {
            snapshot.ms = 0.0;
        }
    }
}

/// Runs TaS with one configuration over any number of queries.
#[derive(Debug, Clone)]
pub struct Tas {
    config: TasConfig,
    qa_prompts: Prompts,
}

impl Tas {
    pub fn new(config: TasConfig) -> Result<Self, AgentError> {
        config.validate()?;
        let qa_prompts = Prompts::new(&PromptOptions {
            task: config.task,
            strategy: Strategy::default(),
            refine: false,
            allow_select: false,
            allow_regenerate: false,
        });
        Ok(Self { config, qa_prompts })
    }

    pub fn config(&self) -> &TasConfig {
        &self.config
    }

    /// Answers one query with the grep tool alone; see [`Tas::run_with`].
    pub fn run<L: Llm + ?Sized, S: SearchSpace + ?Sized>(
        &self,
        llm: &mut L,
        space: &S,
        query: &str,
    ) -> Result<Trajectory, AgentError> {
        self.run_with(llm, space, TextTools::default(), query)
    }

    /// Answers one query; `tools` holds a ranker for every text tool of the configuration. On a
    /// backend failure the error carries the partial trajectory.
    pub fn run_with<L: Llm + ?Sized, S: SearchSpace + ?Sized>(
        &self,
        llm: &mut L,
        space: &S,
        tools: TextTools<'_>,
        query: &str,
    ) -> Result<Trajectory, AgentError> {
        tools.check(&self.config.tools)?;
        if query.trim().is_empty() {
            return Err(AgentError::EmptyQuery);
        }
        let mut trajectory = Trajectory::new(query, self.config.task);
        trajectory.tas = Some(TasRecord {
            planner: self.config.planner,
            constraints: Vec::new(),
            schema_from_query: false,
            snapshots: Vec::new(),
            stop: None,
            rows_added: 0,
            cells_filled: 0,
            cells_pending: 0,
            first_full_match_call: None,
            ranking: Vec::new(),
        });
        let mut run = TasRun {
            config: &self.config,
            qa_prompts: &self.qa_prompts,
            llm,
            space,
            tools,
            query,
            trajectory,
            state: StateTable::new().map_err(state_error)?,
            rows: Vec::new(),
            attempted: Vec::new(),
            searches: Vec::new(),
            first_searches: 0,
        };
        run.execute()?;
        let t = &run.trajectory;
        debug!(steps = t.steps, verdict = ?t.verdict, "TaS query done");
        Ok(run.trajectory)
    }
}

fn state_error(error: StateError) -> AgentError {
    AgentError::Llm(format!("TaS state table: {error}"))
}

/// One query's state.
struct TasRun<'a, L: ?Sized, S: ?Sized> {
    config: &'a TasConfig,
    qa_prompts: &'a Prompts,
    llm: &'a mut L,
    space: &'a S,
    tools: TextTools<'a>,
    query: &'a str,
    trajectory: Trajectory,
    state: StateTable,
    /// Row → table index in the search space.
    rows: Vec<usize>,
    /// Rows a verification call was spent on (a row is verified once; cells the model left
    /// unanswered stay pending).
    attempted: Vec<usize>,
    /// Every search so far, in the order run.
    searches: Vec<Search>,
    /// How many of `searches` the first expansion ran.
    first_searches: usize,
}

impl<L: Llm + ?Sized, S: SearchSpace + ?Sized> TasRun<'_, L, S> {
    fn tas(&mut self) -> &mut TasRecord {
        self.trajectory
            .tas
            .as_mut()
            .expect("TaS trajectories carry a TaS record from the start")
    }

    fn constraints(&self) -> &[Constraint] {
        self.trajectory
            .tas
            .as_ref()
            .map_or(&[], |t| t.constraints.as_slice())
    }

    fn steps(&self) -> usize {
        self.trajectory.calls.len()
    }

    fn remaining(&self) -> usize {
        self.config.max_steps.saturating_sub(self.steps())
    }

    fn execute(&mut self) -> Result<(), AgentError> {
        self.schema()?;
        let started = Instant::now();
        let constraints = self.constraints().len();
        self.state.create(constraints).map_err(state_error)?;
        self.snapshot(Operation::Create, None, started)?;
        let constraint_patterns = dedup(
            self.constraints()
                .iter()
                .flat_map(|c| c.patterns.iter().cloned())
                .collect(),
        );
        let words = query_patterns(self.query);
        let mut first = vec![(SearchTool::Grep, constraint_patterns)];
        if words != first[0].1 {
            first.push((SearchTool::Grep, words));
        }
        for &tool in &self.config.tools {
            if tool != SearchTool::Grep {
                first.push((tool, vec![self.query.to_string()]));
            }
        }
        self.expand_with(first, None)?;
        self.first_searches = self.searches.len();
        let stop = self.orchestrate()?;
        self.tas().stop = Some(stop);
        self.answer()?;
        let rows = self.state.snapshot().map_err(state_error)?;
        let pending = rows.iter().map(|r| r.count(CellStatus::Pending)).sum();
        let ranking = self.final_ranking()?;
        let tas = self.tas();
        tas.cells_pending = pending;
        tas.ranking = ranking;
        Ok(())
    }

    /// The loop between the first expansion and the answer.
    fn orchestrate(&mut self) -> Result<StopReason, AgentError> {
        loop {
            if self.remaining() <= 1 {
                return Ok(StopReason::Budget);
            }
            let rows = self.state.snapshot().map_err(state_error)?;
            if rows.iter().any(StateRow::is_full_match) {
                return Ok(StopReason::FullMatch);
            }
            let unverified: Vec<usize> = self
                .state
                .pending_rows()
                .map_err(state_error)?
                .into_iter()
                .filter(|row| !self.attempted.contains(row))
                .collect();
            let rule = match unverified.first() {
                Some(&row) => PlanChoice::Check(row),
                // An expansion is worth a call only if a verification and the answer still fit.
                None if self.remaining() >= 3 => PlanChoice::Search,
                None => return Ok(StopReason::Budget),
            };
            let choice = match self.config.planner {
                TasPlanner::Rule => rule,
                TasPlanner::Llm => {
                    let choice = self.plan(&rows, &unverified, rule)?;
                    if self.remaining() <= 1 {
                        return Ok(StopReason::Budget);
                    }
                    choice
                }
            };
            match choice {
                PlanChoice::Check(row) => self.verify(row)?,
                PlanChoice::Search => {
                    if !self.expand()? {
                        return Ok(StopReason::Saturated);
                    }
                }
                PlanChoice::Answer => return Ok(StopReason::Planner),
            }
        }
    }

    fn call(
        &mut self,
        kind: CallKind,
        messages: Vec<ChatMessage>,
        constraint: Option<Grammar>,
        max_new_tokens: usize,
    ) -> Result<LlmResponse, AgentError> {
        let request = LlmRequest {
            messages,
            max_new_tokens,
            kind,
            constraint,
        };
        self.llm
            .chat(&request)
            .map_err(|error| self.trajectory.abort(&error))
    }

    fn record(&mut self, kind: StepKind, response: LlmResponse, parsed: bool, action: Action) {
        self.trajectory.record(kind, response, parsed, action);
    }

    /// A structured call's token cap: what its JSON needs, at most the run's cap.
    fn json_tokens(&self) -> usize {
        self.config.max_new_tokens.min(512)
    }

    fn schema(&mut self) -> Result<(), AgentError> {
        let max = self.config.max_constraints;
        let messages = prompts::schema(self.config.task, self.query, max);
        let tokens = self.json_tokens();
        let response = self.call(
            CallKind::TasSchema,
            messages,
            Some(prompts::schema_grammar(max)),
            tokens,
        )?;
        let (constraints, from_query) = match prompts::parse_schema(&response.text, max) {
            Some(constraints) => (constraints, false),
            None => {
                warn!(
                    query = self.query,
                    "TaS schema unusable; the query's words stand in"
                );
                let check = match self.config.task {
                    TaskType::Tableqa => "holds the answer to the question",
                    TaskType::FactVerification => "holds the evidence for the claim",
                };
                let constraint = Constraint {
                    check: check.to_string(),
                    patterns: query_patterns(self.query),
                };
                (vec![constraint], true)
            }
        };
        let action = Action::Schema {
            checks: constraints.iter().map(|c| c.check.clone()).collect(),
            from_query,
        };
        self.record(StepKind::TasSchema, response, !from_query, action);
        let tas = self.tas();
        tas.constraints = constraints;
        tas.schema_from_query = from_query;
        Ok(())
    }

    fn snapshot(
        &mut self,
        operation: Operation,
        call: Option<usize>,
        started: Instant,
    ) -> Result<(), AgentError> {
        let rows = self.state.snapshot().map_err(state_error)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.tas().snapshots.push(Snapshot {
            operation,
            call,
            ms,
            rows,
        });
        Ok(())
    }

    /// The ranking of one search: grep through the space, text tools through their ranker.
    fn run_search(&mut self, tool: SearchTool, terms: &[String]) -> Result<Vec<usize>, AgentError> {
        if tool == SearchTool::Grep {
            return Ok(self
                .space
                .rank(self.query, terms)
                .into_iter()
                .map(|r| r.table)
                .collect());
        }
        let failed = |reason: String| {
            AgentError::Retrieval(format!("TaS {} search: {reason}", tool.as_str()))
        };
        // `run_with` checked every configured tool, so a missing ranker is a caller's bug, and
        // still an error rather than a silent grep search.
        let ranker = self
            .tools
            .get(tool)
            .ok_or_else(|| failed("no ranker".into()))?;
        ranker
            .search(&terms.join(" "), TEXT_SEARCH_DEPTH)
            .map_err(|reason| self.trajectory.abort(&failed(reason)))
    }

    /// Runs each search, takes its best `per_search` unseen tables, and appends them in their
    /// fused order ([`fused_order`]); returns how many rows were added.
    fn expand_with(
        &mut self,
        searches: Vec<(SearchTool, Vec<String>)>,
        call: Option<usize>,
    ) -> Result<usize, AgentError> {
        let mut ran = Vec::with_capacity(searches.len());
        let mut offered: Vec<usize> = Vec::new();
        for (tool, terms) in searches {
            let ranking = self.run_search(tool, &terms)?;
            let unseen = ranking
                .iter()
                .copied()
                .filter(|t| !self.rows.contains(t) && !offered.contains(t))
                .take(self.config.per_search)
                .collect::<Vec<_>>();
            offered.extend(unseen);
            ran.push(Search {
                tool,
                terms,
                ranking,
            });
        }
        let mut shown: Vec<(usize, String)> = Vec::new();
        let mut added = 0;
        for table in fused_order(&ran, &offered) {
            let started = Instant::now();
            let id = self.space.table_id(table).to_string();
            if let Some(row) = self.state.append(&id).map_err(state_error)? {
                self.rows.push(table);
                self.snapshot(Operation::Append, call, started)?;
                shown.push((table, format!("T{row}")));
                added += 1;
            }
        }
        for search in &ran {
            let candidates = search
                .ranking
                .iter()
                .take(10)
                .map(|&table| CandidateRecord {
                    shown_id: shown
                        .iter()
                        .find(|(t, _)| *t == table)
                        .map(|(_, id)| id.clone())
                        .unwrap_or_default(),
                    table_id: self.space.table_id(table).to_string(),
                    score: 0.0,
                })
                .collect();
            self.trajectory.rounds.push(RoundRecord {
                patterns: search.terms.clone(),
                tool: (search.tool != SearchTool::Grep).then(|| search.tool.as_str().to_string()),
                candidates,
                widened: false,
                history_restarted: false,
            });
        }
        self.searches.extend(ran);
        self.tas().rows_added += added;
        Ok(added)
    }

    /// An expansion call; when its lists find nothing new, the next unseen tables of the earlier
    /// searches are appended instead. Returns whether any row was added.
    fn expand(&mut self) -> Result<bool, AgentError> {
        let rows = self.state.snapshot().map_err(state_error)?;
        let used: Vec<Vec<String>> = self
            .searches
            .iter()
            .filter(|s| s.tool == SearchTool::Grep)
            .map(|s| s.terms.clone())
            .collect();
        let messages = prompts::expand(
            self.config.task,
            self.query,
            self.constraints(),
            &rows,
            &used,
            self.config.searches,
        );
        let tokens = self.json_tokens();
        let response = self.call(
            CallKind::TasExpand,
            messages,
            Some(prompts::expand_grammar(self.config.searches)),
            tokens,
        )?;
        let searches = prompts::parse_searches(&response.text, self.config.searches);
        let parsed = searches.is_some();
        let searches: Vec<Vec<String>> = searches
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !used.contains(s))
            .collect();
        self.record(
            StepKind::TasExpand,
            response,
            parsed,
            Action::Strategies {
                searches: searches.clone(),
            },
        );
        let call = Some(self.steps() - 1);
        let grep = searches
            .into_iter()
            .map(|patterns| (SearchTool::Grep, patterns))
            .collect();
        let mut added = self.expand_with(grep, call)?;
        if added == 0 {
            added = self.deepen(call)?;
        }
        Ok(added > 0)
    }

    /// Appends the next unseen tables of the earlier searches, `per_search` from each.
    fn deepen(&mut self, call: Option<usize>) -> Result<usize, AgentError> {
        let mut added = 0;
        for s in 0..self.searches.len() {
            let mut taken = 0;
            for i in 0..self.searches[s].ranking.len() {
                let table = self.searches[s].ranking[i];
                if taken == self.config.per_search {
                    break;
                }
                if self.rows.contains(&table) {
                    continue;
                }
                let started = Instant::now();
                let id = self.space.table_id(table).to_string();
                if self.state.append(&id).map_err(state_error)?.is_some() {
                    self.rows.push(table);
                    self.snapshot(Operation::Append, call, started)?;
                    taken += 1;
                    added += 1;
                }
            }
        }
        self.tas().rows_added += added;
        Ok(added)
    }

    /// One verification call for `row`: its pending constraints against its table's preview.
    fn verify(&mut self, row: usize) -> Result<(), AgentError> {
        self.attempted.push(row);
        let rows = self.state.snapshot().map_err(state_error)?;
        let Some(state_row) = rows.get(row) else {
            return Ok(());
        };
        let pending: Vec<usize> = state_row
            .cells
            .iter()
            .enumerate()
            .filter(|(_, c)| c.status == CellStatus::Pending)
            .map(|(i, _)| i)
            .collect();
        let table = self.rows[row];
        let patterns: Vec<String> = dedup(
            pending
                .iter()
                .flat_map(|&c| self.constraints()[c].patterns.iter().cloned())
                .collect(),
        );
        let mut shown = vec![ShownTable {
            id: format!("T{row}"),
            text: self
                .space
                .preview(table, &patterns, self.config.evidence, false),
            score: None,
        }];
        let task = self.config.task;
        let query = self.query;
        let constraints = self.constraints().to_vec();
        let tokens = self.json_tokens();
        let build =
            |shown: &[ShownTable]| prompts::verify(task, query, &constraints, &pending, &shown[0]);
        fit_tables(self.llm, tokens, &mut shown, build);
        let messages = build(&shown);
        let response = self.call(
            CallKind::TasVerify,
            messages,
            Some(prompts::verify_grammar(&pending)),
            tokens,
        )?;
        let checks = prompts::parse_checks(&response.text, &pending);
        let parsed = checks.as_ref().is_some_and(|c| !c.is_empty());
        let checks = checks.unwrap_or_default();
        let table_id = self.space.table_id(table).to_string();
        let action = Action::Verify {
            table_id,
            cells: checks
                .iter()
                .map(|c| format!("{}: {}", c.constraint + 1, c.status.as_str()))
                .collect(),
        };
        self.record(StepKind::TasVerify, response, parsed, action);
        let call = self.steps() - 1;
        for check in checks {
            let started = Instant::now();
            self.state
                .update(row, check.constraint, check.status, &check.evidence)
                .map_err(state_error)?;
            self.snapshot(Operation::Update, Some(call), started)?;
            self.tas().cells_filled += 1;
        }
        let full = self
            .state
            .snapshot()
            .map_err(state_error)?
            .get(row)
            .is_some_and(StateRow::is_full_match);
        let tas = self.tas();
        if full && tas.first_full_match_call.is_none() {
            tas.first_full_match_call = Some(call);
        }
        Ok(())
    }

    /// `TasPlanner::Llm`: one call that picks the next step; the rule's choice on bad output.
    fn plan(
        &mut self,
        rows: &[StateRow],
        unverified: &[usize],
        rule: PlanChoice,
    ) -> Result<PlanChoice, AgentError> {
        let ids: Vec<String> = unverified.iter().map(|r| format!("T{r}")).collect();
        let messages = prompts::plan(self.config.task, self.query, self.constraints(), rows, &ids);
        let tokens = self.json_tokens().min(64);
        let response = self.call(
            CallKind::TasPlan,
            messages,
            Some(prompts::plan_grammar(&ids)),
            tokens,
        )?;
        let read = prompts::parse_plan(&response.text, unverified);
        let parsed = read.is_some();
        let choice = read.unwrap_or(rule);
        let name = match &choice {
            PlanChoice::Check(row) => format!("check T{row}"),
            PlanChoice::Search => "search".to_string(),
            PlanChoice::Answer => "answer".to_string(),
        };
        self.record(
            StepKind::TasPlan,
            response,
            parsed,
            Action::Plan { choice: name },
        );
        Ok(choice)
    }

    /// QA on the best row's table, then the next rows while the evidence is insufficient.
    fn answer(&mut self) -> Result<(), AgentError> {
        let order = self.state.ranked_rows().map_err(state_error)?;
        let mut verdict = None;
        for (i, &row) in order.iter().enumerate() {
            if i > 0 && self.remaining() == 0 {
                break;
            }
            let kind = if i == 0 {
                CallKind::Qa
            } else {
                CallKind::QaFallback
            };
            let outcome = self.qa(kind, row)?;
            verdict = Some(outcome);
            if outcome.is_satisfactory() {
                break;
            }
        }
        if verdict.is_none() {
            warn!(
                query = self.query,
                "TaS found no candidate table; no QA call"
            );
        }
        if self.config.task == TaskType::FactVerification && verdict == Some(Verdict::Unverifiable)
        {
            self.trajectory.answer = parse::fact_answer(Verdict::Refuted).to_string();
        }
        Ok(())
    }

    fn qa(&mut self, kind: CallKind, row: usize) -> Result<Verdict, AgentError> {
        let table = self.rows[row];
        let mut shown = vec![ShownTable {
            id: "T0".to_string(),
            text: self.space.full_text(table),
            score: None,
        }];
        let prompts = self.qa_prompts;
        let query = self.query;
        let build = |shown: &[ShownTable]| prompts.qa(query, shown);
        let tokens = self.config.max_new_tokens;
        fit_tables(self.llm, tokens, &mut shown, build);
        let messages = build(&shown);
        let constraint = schemas::qa(self.config.task, QaVariant::TableSeek);
        let response = self.call(kind, messages, constraint, tokens)?;
        let outcome = parse::parse_qa(&response.text, self.config.task, QaVariant::TableSeek);
        let table_id = self.space.table_id(table).to_string();
        let call = self.steps();
        self.trajectory.tables_seen.push(SeenTable {
            table_id: table_id.clone(),
            call,
            verdict: outcome.verdict,
        });
        self.trajectory.answer = outcome.answer.clone();
        self.trajectory.verdict = Some(outcome.verdict);
        self.trajectory.final_table = Some(table_id.clone());
        let step_kind = match kind {
            CallKind::QaFallback => StepKind::QaFallback,
            _ => StepKind::Qa,
        };
        let action = Action::Answer {
            table_ids: vec![table_id],
            answer: outcome.answer.clone(),
            verdict: outcome.verdict,
        };
        self.record(step_kind, response, outcome.parsed, action);
        let started = Instant::now();
        self.state
            .set_answer(row, &outcome.answer)
            .map_err(state_error)?;
        self.snapshot(Operation::Answer, Some(call), started)?;
        Ok(outcome.verdict)
    }

    /// Rows in answer order, then the fused ranking of the first expansion's searches, without
    /// repeats.
    fn final_ranking(&self) -> Result<Vec<String>, AgentError> {
        let mut ranking: Vec<String> = Vec::new();
        let rows = self.state.ranked_rows().map_err(state_error)?;
        let first = &self.searches[..self.first_searches.min(self.searches.len())];
        let tables = rows
            .into_iter()
            .map(|row| self.rows[row])
            .chain(fused_ranking(first));
        for table in tables {
            let id = self.space.table_id(table).to_string();
            if !ranking.contains(&id) {
                ranking.push(id);
            }
        }
        Ok(ranking)
    }
}

fn dedup(patterns: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests;
