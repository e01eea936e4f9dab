//! The loop for one query, as the method spec states it:
//!
//! ```text
//! P <- patterns(q); R <- rank(P); K <- {}
//! while steps < S_max - 1:                 # one step stays for QA
//!     d <- refine(q, previews(top n of R, P))
//!     select → K <- d.tables, stop | regenerate → P, R <- new | none → stop
//! K empty → budget ran out ? top-1 of R : top K_fb of R
//! y <- qa(q, K); for T in R \ seen while y unsatisfactory and steps < S_max: y <- qa(q, {T})
//! ```
//!
//! Choices where the spec is silent:
//! - an unusable pattern-generation output falls back to the query's content words (recorded as
//!   `from_query`), so the query still gets a ranking;
//! - a rerank (`rN`) reorders the shown head of the ranking, so fallback QA follows the model's
//!   order; the round record keeps the grep order that was shown;
//! - QA over several selected tables reports the first as `final_table`;
//! - under `match_only_qa`, QA reads `SearchSpace::preview(.., match_only = true)` at the run's
//!   evidence size;
//! - a fact claim that no table could verify is answered `refuted` (the verdict stays
//!   `unverifiable`), as the paper's baselines count it;
//! - a ranking with no tables ends the query with no QA call and no answer rather than an error,
//!   so a batch run keeps going.

use std::time::Instant;

use crate::retrieve::fusion::min_max_blend;

use tracing::{debug, warn};

use super::fit::fit_tables;
use super::parse::{self, QaOutcome, QaVariant, RefineDecision, Verdict, MAX_PATTERNS};
use super::prompts::{self, PromptOptions, Prompts, ShownTable};
use super::schemas;
use super::sql_qa::{self, SqlSession};
use super::trajectory::{
    Action, CandidateRecord, NoneReason, RoundRecord, SeenTable, StepKind, Trajectory,
};
use super::{
    AgentConfig, AgentError, CallKind, ChatMessage, Grammar, History, Llm, LlmRequest, LlmResponse,
    QaMode, RankedTable, SearchSpace, SqlAnswer, Strategy, TaskType, LIKELIHOOD_WEIGHT,
};

/// Runs the TableSeek loop with one configuration over any number of queries.
#[derive(Debug, Clone)]
pub struct Agent {
    config: AgentConfig,
    prompts: Prompts,
}

impl Agent {
    /// Validates `config` first: a bad budget or contradictory switches are an error here, not a
    /// surprise mid-run.
    pub fn new(config: AgentConfig) -> Result<Self, AgentError> {
        config.validate()?;
        let ablations = config.ablations;
        let prompts = Prompts::new(&PromptOptions {
            task: config.task,
            strategy: config.strategy,
            refine: !ablations.no_refine,
            allow_select: !ablations.no_select,
            allow_regenerate: !ablations.no_regenerate,
        });
        Ok(Self { config, prompts })
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The system message of every call this agent makes; an engine may prefill its prefix cache
    /// with it once for the whole run.
    pub fn system_prompt(&self) -> &str {
        self.prompts.system()
    }

    /// Answers one query. On a backend failure the error carries the partial trajectory.
    pub fn run<L: Llm + ?Sized, S: SearchSpace + ?Sized>(
        &self,
        llm: &mut L,
        space: &S,
        query: &str,
    ) -> Result<Trajectory, AgentError> {
        if query.trim().is_empty() {
            return Err(AgentError::EmptyQuery);
        }
        let mut run = QueryRun {
            config: &self.config,
            prompts: &self.prompts,
            llm,
            space,
            query,
            trajectory: Trajectory::new(query, self.config.task),
            patterns: Vec::new(),
            ranking: Vec::new(),
        };
        run.execute()?;
        let t = &run.trajectory;
        debug!(
            steps = t.steps,
            rounds = t.rounds.len(),
            tables_seen = t.tables_seen.len(),
            verdict = ?t.verdict,
            "query done"
        );
        Ok(run.trajectory)
    }
}

/// The state of one query.
struct QueryRun<'a, L: ?Sized, S: ?Sized> {
    config: &'a AgentConfig,
    prompts: &'a Prompts,
    llm: &'a mut L,
    space: &'a S,
    query: &'a str,
    trajectory: Trajectory,
    patterns: Vec<String>,
    ranking: Vec<RankedTable>,
}

/// How refinement ended, which decides what QA reads.
enum RefineEnd {
    Chosen(Vec<usize>),
    BudgetSpent,
    NothingChosen,
}

impl<L: Llm + ?Sized, S: SearchSpace + ?Sized> QueryRun<'_, L, S> {
    fn execute(&mut self) -> Result<(), AgentError> {
        self.generate_patterns()?;
        let end = if self.config.ablations.no_refine {
            RefineEnd::NothingChosen
        } else {
            self.refine()?
        };
        // Under `widen_empty` every round already searched the query's words too.
        let searched_query_words = self.config.widen_empty;
        if self.ranking.is_empty() && !searched_query_words && !matches!(end, RefineEnd::Chosen(_))
        {
            // A weak model's patterns can match nothing, round after round (SmolLM2 under the
            // mask wrote `.+1.11.22.11…` for the README's sample question): rather than leave
            // the query unanswered, QA reads the best match of the query's own words. The round
            // is recorded like any other, so the trajectory shows what ranked.
            warn!(
                query = self.query,
                "the patterns matched no table; QA reads the best match of the query's words"
            );
            self.search(query_patterns(self.query));
        }
        let qa_tables: Vec<usize> = match end {
            RefineEnd::Chosen(tables) => tables,
            RefineEnd::BudgetSpent => self.ranking.iter().take(1).map(|r| r.table).collect(),
            RefineEnd::NothingChosen => self
                .ranking
                .iter()
                .take(self.config.fallback_tables)
                .map(|r| r.table)
                .collect(),
        };
        if qa_tables.is_empty() {
            warn!(query = self.query, "no table ranked; no QA call");
            return Ok(());
        }
        let mut verdict = self.answer(CallKind::Qa, &qa_tables)?;
        if !self.config.ablations.no_fallback {
            let mut next = 0;
            while !verdict.is_satisfactory() && self.steps() < self.config.max_steps {
                let seen = &self.trajectory.tables_seen;
                let candidate = self.ranking[next..].iter().position(|r| {
                    let id = self.space.table_id(r.table);
                    !seen.iter().any(|s| s.table_id == id)
                });
                let Some(offset) = candidate else { break };
                let table = self.ranking[next + offset].table;
                next += offset + 1;
                verdict = self.answer(CallKind::QaFallback, &[table])?;
            }
        }
        if self.config.task == TaskType::FactVerification && verdict == Verdict::Unverifiable {
            self.trajectory.answer = parse::fact_answer(Verdict::Refuted).to_string();
        }
        Ok(())
    }

    fn steps(&self) -> usize {
        self.trajectory.calls.len()
    }

    fn call(
        &mut self,
        kind: CallKind,
        messages: Vec<ChatMessage>,
        constraint: Option<Grammar>,
    ) -> Result<LlmResponse, AgentError> {
        let request = LlmRequest {
            messages,
            max_new_tokens: self.config.max_new_tokens,
            kind,
            constraint,
        };
        let started = Instant::now();
        match self.llm.chat(&request) {
            Ok(response) => {
                debug!(
                    ?kind,
                    step = self.steps() + 1,
                    prompt_tokens = response.prompt_tokens,
                    cached_tokens = response.cached_tokens,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "LLM call"
                );
                Ok(response)
            }
            Err(error) => Err(self.trajectory.abort(&error)),
        }
    }

    fn record(&mut self, kind: StepKind, response: LlmResponse, parsed: bool, action: Action) {
        self.trajectory.record(kind, response, parsed, action);
    }

    fn generate_patterns(&mut self) -> Result<(), AgentError> {
        let messages = self.prompts.pattern_generation(self.query);
        let response = self.call(CallKind::PatternGen, messages, Some(schemas::patterns()))?;
        let (patterns, from_query) = match parse::parse_patterns(&response.text) {
            Some(patterns) => (patterns, false),
            None => {
                warn!(
                    query = self.query,
                    "pattern output unusable; searching the query's words"
                );
                (query_patterns(self.query), true)
            }
        };
        let action = Action::Patterns {
            patterns: patterns.clone(),
            from_query,
        };
        self.record(StepKind::PatternGen, response, !from_query, action);
        self.search(patterns);
        Ok(())
    }

    /// Ranks with new patterns and records the round.
    fn search(&mut self, mut patterns: Vec<String>) {
        self.ranking = self.space.rank(self.query, &patterns);
        let mut widened = false;
        if self.ranking.is_empty() && self.config.widen_empty {
            let extra: Vec<String> = query_patterns(self.query)
                .into_iter()
                .filter(|word| !patterns.iter().any(|p| p.eq_ignore_ascii_case(word)))
                .collect();
            if !extra.is_empty() {
                patterns.extend(extra);
                self.ranking = self.space.rank(self.query, &patterns);
                widened = true;
                debug!(
                    ?patterns,
                    "no table matched; widened with the query's words"
                );
            }
        }
        let shown = self.config.strategy.candidates();
        let candidates = self
            .ranking
            .iter()
            .take(shown)
            .enumerate()
            .map(|(i, r)| CandidateRecord {
                shown_id: shown_id(i),
                table_id: self.space.table_id(r.table).to_string(),
                score: r.score,
            })
            .collect();
        self.trajectory.rounds.push(RoundRecord {
            tool: None,
            patterns: patterns.clone(),
            candidates,
            widened,
            history_restarted: false,
        });
        self.patterns = patterns;
    }

    fn refine(&mut self) -> Result<RefineEnd, AgentError> {
        let ablations = self.config.ablations;
        let strategy = self.config.strategy;
        let cap = match strategy {
            Strategy::Select { m, .. } => m,
            Strategy::Rerank { n } => n,
            Strategy::Likelihood { .. } => 1,
        };
        let mut conversation: Vec<ChatMessage> = Vec::new();
        loop {
            if self.steps() + 1 >= self.config.max_steps {
                return Ok(RefineEnd::BudgetSpent);
            }
            if let Strategy::Likelihood { n } = strategy {
                return self.refine_by_likelihood(n);
            }
            let shown: Vec<RankedTable> = self
                .ranking
                .iter()
                .take(strategy.candidates())
                .copied()
                .collect();
            let mut previews: Vec<ShownTable> = shown
                .iter()
                .enumerate()
                .map(|(i, r)| ShownTable {
                    id: shown_id(i),
                    text: self.space.preview(
                        r.table,
                        &self.patterns,
                        self.config.evidence,
                        ablations.match_only,
                    ),
                    score: Some(r.score),
                })
                .collect();
            let continues = self.config.history == History::Full && !conversation.is_empty();
            let uncut = if continues {
                previews.clone()
            } else {
                Vec::new()
            };
            let max_new_tokens = self.config.max_new_tokens;
            let (prompts, query, patterns) = (&self.prompts, self.query, &self.patterns);
            let build = |conversation: &[ChatMessage], previews: &[ShownTable]| {
                if conversation.is_empty() {
                    prompts.refine(query, patterns, previews)
                } else {
                    let mut messages = conversation.to_vec();
                    messages.push(prompts.refine_followup(patterns, previews));
                    messages
                }
            };
            let cut = fit_tables(self.llm, max_new_tokens, &mut previews, |p| {
                build(&conversation, p)
            });
            // Cutting the new previews to make room for the earlier rounds would show the model
            // less of each round's candidates; once the earlier rounds take more than half the
            // window, a fresh conversation (one uncached prompt) keeps the previews whole.
            if cut > 0
                && continues
                && self
                    .llm
                    .measure(&conversation, max_new_tokens)
                    .is_some_and(|history| history.tokens > history.limit / 2)
            {
                conversation.clear();
                previews = uncut;
                if let Some(round) = self.trajectory.rounds.last_mut() {
                    round.history_restarted = true;
                }
                debug!("refine history restarted: the earlier rounds left too little room");
                fit_tables(self.llm, max_new_tokens, &mut previews, |p| {
                    build(&conversation, p)
                });
            }
            let messages = build(&conversation, &previews);
            if self.config.history == History::Full {
                conversation = messages.clone();
            }
            let shown_ids: Vec<String> = previews.iter().map(|p| p.id.clone()).collect();
            let constraint = schemas::refine(
                strategy,
                &shown_ids,
                !ablations.no_select,
                !ablations.no_regenerate,
            );
            let response = self.call(CallKind::Refine, messages, Some(constraint))?;
            if self.config.history == History::Full {
                // Thinking is dropped from the history, as chat templates of reasoning models do.
                conversation.push(ChatMessage::assistant(parse::strip_thinking(
                    &response.text,
                )));
            }
            let parsed = parse::parse_refine(&response.text, shown.len(), cap);
            let decision = match parsed.decision {
                RefineDecision::Choose(_) if ablations.no_select => {
                    RefineDecision::None(NoneReason::SelectDisabled)
                }
                RefineDecision::Regenerate(_) if ablations.no_regenerate => {
                    RefineDecision::None(NoneReason::RegenerateDisabled)
                }
                other => other,
            };
            match decision {
                RefineDecision::Choose(positions) => {
                    let shown_ids = positions.iter().map(|&p| shown_id(p)).collect();
                    let table_ids = positions
                        .iter()
                        .map(|&p| self.space.table_id(shown[p].table).to_string())
                        .collect();
                    let (kind, action, tables) = if strategy.is_rerank() {
                        let top = vec![shown[positions[0]].table];
                        self.apply_rerank(&positions);
                        let action = Action::Rerank {
                            shown_ids,
                            table_ids,
                        };
                        (StepKind::RefineRerank, action, top)
                    } else {
                        let tables = positions.iter().map(|&p| shown[p].table).collect();
                        let action = Action::Select {
                            shown_ids,
                            table_ids,
                        };
                        (StepKind::RefineSelect, action, tables)
                    };
                    self.record(kind, response, parsed.parsed, action);
                    return Ok(RefineEnd::Chosen(tables));
                }
                RefineDecision::Regenerate(patterns) => {
                    let action = Action::Regenerate {
                        patterns: patterns.clone(),
                    };
                    self.record(StepKind::RefineRegenerate, response, parsed.parsed, action);
                    self.search(patterns);
                }
                RefineDecision::None(reason) => {
                    let action = Action::NoAction { reason };
                    self.record(StepKind::RefineNone, response, parsed.parsed, action);
                    return Ok(RefineEnd::NothingChosen);
                }
            }
        }
    }

    /// [`Strategy::Likelihood`]: the first `n` candidates reordered by the model's query
    /// likelihood blended with their ranking score, as one step; the top one goes to QA and
    /// fallback walks the new order. The round record keeps the order the ranking gave, as for
    /// a rerank.
    fn refine_by_likelihood(&mut self, n: usize) -> Result<RefineEnd, AgentError> {
        let shown: Vec<RankedTable> = self.ranking.iter().take(n).copied().collect();
        if shown.is_empty() {
            return Ok(RefineEnd::NothingChosen);
        }
        let started = Instant::now();
        let continuation = prompts::likelihood_continuation(self.query);
        let (mut logprobs, mut tokens) = (Vec::with_capacity(shown.len()), 0);
        for ranked in &shown {
            let preview = self.space.preview(
                ranked.table,
                &self.patterns,
                self.config.evidence,
                self.config.ablations.match_only,
            );
            let prompt = prompts::likelihood_prompt(self.config.task, &preview);
            match self.llm.continuation_logprob(&prompt, &continuation) {
                Some(Ok(scored)) => {
                    logprobs.push(scored.logprob);
                    tokens += scored.tokens;
                }
                Some(Err(error)) => return Err(self.trajectory.abort(&error)),
                None => {
                    return Err(AgentError::InvalidConfig(
                        "refine strategy lN needs an LLM backend that scores text".into(),
                    ))
                }
            }
        }
        let pool: Vec<f64> = shown.iter().map(|r| r.score).collect();
        let blended = min_max_blend(&pool, &logprobs, LIKELIHOOD_WEIGHT);
        let mut positions: Vec<usize> = (0..shown.len()).collect();
        positions.sort_by(|&a, &b| blended[b].total_cmp(&blended[a]).then(a.cmp(&b)));
        let action = Action::Rerank {
            shown_ids: positions.iter().map(|&p| shown_id(p)).collect(),
            table_ids: positions
                .iter()
                .map(|&p| self.space.table_id(shown[p].table).to_string())
                .collect(),
        };
        let top = shown[positions[0]].table;
        self.apply_rerank(&positions);
        // The step's output is its scores: what a reader of the trajectory needs to see why
        // this order.
        let text =
            serde_json::json!({ "log_likelihood": logprobs, "blended": blended }).to_string();
        let response = LlmResponse {
            text,
            prompt_tokens: tokens,
            cached_tokens: 0,
            ms: started.elapsed().as_secs_f64() * 1e3,
            constrained: false,
        };
        self.record(StepKind::RefineScore, response, true, action);
        Ok(RefineEnd::Chosen(vec![top]))
    }

    /// The model's order replaces the shown head of the ranking (unlisted shown candidates follow
    /// in their old order), so fallback QA walks the reranked list, as a reranker's output would be.
    fn apply_rerank(&mut self, positions: &[usize]) {
        let shown = self.config.strategy.candidates().min(self.ranking.len());
        let mut head: Vec<RankedTable> = positions.iter().map(|&p| self.ranking[p]).collect();
        head.extend(
            (0..shown)
                .filter(|p| !positions.contains(p))
                .map(|p| self.ranking[p]),
        );
        self.ranking.splice(..shown, head);
    }

    /// SQL QA on `table` (under [`QaMode::Sql`]): one call, and one retry with the error while
    /// the budget lasts. A question's query that fails or returns nothing is insufficient
    /// evidence, a claim's query that fails leaves it unverifiable: the loop falls back to the
    /// next table. A claim's query that ran decides it ([`SqlAttempt::claim_verdict`]).
    fn answer_sql(
        &mut self,
        kind: CallKind,
        table: usize,
        mut session: SqlSession,
    ) -> Result<Verdict, AgentError> {
        let table_id = self.space.table_id(table).to_string();
        let mut verdict = Verdict::Insufficient;
        for attempt_no in 0..2 {
            if attempt_no > 0 && self.steps() >= self.config.max_steps {
                break;
            }
            let response = self.call(kind, session.messages().to_vec(), Some(session.grammar()))?;
            let attempt = session.run_reply(&response.text);
            let (answer, outcome) = match self.config.task {
                TaskType::Tableqa if attempt.answered() => (attempt.answer(), Verdict::Answered),
                TaskType::Tableqa => (String::new(), Verdict::Insufficient),
                TaskType::FactVerification => match attempt.claim_verdict() {
                    Some(label) => (parse::fact_answer(label).to_string(), label),
                    None => (String::new(), Verdict::Unverifiable),
                },
            };
            verdict = outcome;
            let call = self.steps();
            self.trajectory.tables_seen.push(SeenTable {
                table_id: table_id.clone(),
                call,
                verdict,
            });
            self.trajectory.answer = answer.clone();
            self.trajectory.verdict = Some(verdict);
            self.trajectory.final_table = Some(table_id.clone());
            let step_kind = match kind {
                CallKind::QaFallback => StepKind::QaFallback,
                _ => StepKind::Qa,
            };
            let ran = attempt.error.is_none();
            self.record(
                step_kind,
                response,
                ran,
                Action::Answer {
                    table_ids: vec![table_id.clone()],
                    answer,
                    verdict,
                },
            );
            if let Some(last) = self.trajectory.calls.last_mut() {
                last.sql = Some(attempt);
            }
            // A query that ran answered or showed the table lacks the answer: no retry either way.
            if ran {
                break;
            }
        }
        let phrase = self.config.sql_answer == SqlAnswer::Phrased
            && self.config.task == TaskType::Tableqa
            && verdict == Verdict::Answered
            && self.steps() < self.config.max_steps;
        let ran = self.trajectory.calls.last().and_then(|c| c.sql.clone());
        if let (true, Some(ran)) = (phrase, ran) {
            let request = sql_qa::phrase_request(self.query, &ran, kind);
            let response = self.call(kind, request.messages, None)?;
            let answer = sql_qa::phrased_answer(&response.text);
            self.trajectory.answer = answer.clone();
            let step_kind = match kind {
                CallKind::QaFallback => StepKind::QaFallback,
                _ => StepKind::Qa,
            };
            let action = Action::Answer {
                table_ids: vec![table_id],
                answer,
                verdict,
            };
            self.record(step_kind, response, true, action);
        }
        Ok(verdict)
    }

    /// One QA call over `tables`; updates the answer, the final table and the tables seen.
    fn answer(&mut self, kind: CallKind, tables: &[usize]) -> Result<Verdict, AgentError> {
        if self.config.qa == QaMode::Sql {
            let question = match self.config.task {
                TaskType::Tableqa => self.query.to_string(),
                TaskType::FactVerification => sql_qa::claim_question(self.query),
            };
            let session = tables.first().and_then(|&t| {
                let table = self.space.table(t)?;
                SqlSession::new(table, &question).ok().map(|s| (t, s))
            });
            if let Some((table, session)) = session {
                return self.answer_sql(kind, table, session);
            }
        }
        let match_only_qa = self.config.ablations.match_only_qa;
        let mut shown: Vec<ShownTable> = tables
            .iter()
            .enumerate()
            .map(|(i, &table)| ShownTable {
                id: shown_id(i),
                // QA's matched-rows view is the preview without head, at the run's evidence size.
                text: if match_only_qa {
                    self.space
                        .preview(table, &self.patterns, self.config.evidence, true)
                } else {
                    self.space.full_text(table)
                },
                score: None,
            })
            .collect();
        let build = |shown: &[ShownTable]| self.prompts.qa(self.query, shown);
        fit_tables(self.llm, self.config.max_new_tokens, &mut shown, build);
        let messages = build(&shown);
        let constraint = schemas::qa(self.config.task, QaVariant::TableSeek);
        let response = self.call(kind, messages, constraint)?;
        let outcome = parse::parse_qa(&response.text, self.config.task, QaVariant::TableSeek);
        let table_ids: Vec<String> = tables
            .iter()
            .map(|&t| self.space.table_id(t).to_string())
            .collect();
        let call = self.steps();
        for table_id in &table_ids {
            self.trajectory.tables_seen.push(SeenTable {
                table_id: table_id.clone(),
                call,
                verdict: outcome.verdict,
            });
        }
        self.trajectory.answer = outcome.answer.clone();
        self.trajectory.verdict = Some(outcome.verdict);
        self.trajectory.final_table = table_ids.first().cloned();
        let step_kind = match kind {
            CallKind::QaFallback => StepKind::QaFallback,
            _ => StepKind::Qa,
        };
        let action = Action::Answer {
            table_ids,
            answer: outcome.answer,
            verdict: outcome.verdict,
        };
        self.record(step_kind, response, outcome.parsed, action);
        Ok(outcome.verdict)
    }
}

/// One QA call with the baseline prompt (dense / rerank pipelines): no insufficiency option, an
/// unverifiable claim counts as refuted. `tables` are rendered table texts, shown as `T0`...
pub fn baseline_qa<L: Llm + ?Sized>(
    llm: &mut L,
    task: TaskType,
    query: &str,
    tables: &[String],
    max_new_tokens: usize,
) -> Result<(QaOutcome, LlmResponse), AgentError> {
    let mut shown = shown_tables(tables);
    let build = |shown: &[ShownTable]| prompts::baseline_qa(task, query, shown);
    fit_tables(llm, max_new_tokens, &mut shown, build);
    let request = LlmRequest {
        messages: build(&shown),
        max_new_tokens,
        kind: CallKind::Qa,
        constraint: schemas::qa(task, QaVariant::Baseline),
    };
    let response = llm.chat(&request)?;
    let outcome = parse::parse_qa(&response.text, task, QaVariant::Baseline);
    Ok((outcome, response))
}

fn shown_id(position: usize) -> String {
    format!("T{position}")
}

/// Table texts under the anonymous ids `T0`, `T1`, … in order, unscored.
pub(crate) fn shown_tables(tables: &[String]) -> Vec<ShownTable> {
    tables
        .iter()
        .enumerate()
        .map(|(i, text)| ShownTable {
            id: shown_id(i),
            text: text.clone(),
            score: None,
        })
        .collect()
}

/// Words too common to tell tables apart, dropped when the query stands in for patterns.
const STOPWORDS: [&str; 32] = [
    "the", "and", "for", "what", "which", "who", "whom", "how", "many", "much", "was", "were",
    "with", "from", "that", "this", "are", "did", "does", "has", "have", "had", "his", "her",
    "their", "its", "than", "when", "where", "not", "all", "any",
];

/// The query's distinct content words as patterns; the whole query if none is left. Plurals
/// match their singular too ("singers" → `singer`, "countries" → `countr(y|ies)`): questions ask
/// about "singers" of a table whose name and header say "singer".
pub(crate) fn query_patterns(query: &str) -> Vec<String> {
    let mut patterns: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let lower = word.to_lowercase();
        if lower.chars().count() < 3 || STOPWORDS.contains(&lower.as_str()) {
            continue;
        }
        // A capitalized word is likely a name ("Paris", "Texas"): kept as written.
        let is_name = word.chars().next().is_some_and(char::is_uppercase);
        let pattern = if is_name {
            lower
        } else {
            singular_pattern(&lower)
        };
        if !patterns.contains(&pattern) && patterns.len() < MAX_PATTERNS {
            patterns.push(pattern);
        }
    }
    if patterns.is_empty() {
        patterns.push(regex::escape(query.trim()));
    }
    patterns
}

/// A pattern for an alphanumeric word that also matches its singular (patterns match substrings).
fn singular_pattern(word: &str) -> String {
    if word.chars().count() < 5 || !word.is_ascii() {
        return word.to_string();
    }
    if let Some(stem) = word.strip_suffix("ies") {
        return format!("{stem}(y|ies)");
    }
    match word.strip_suffix('s') {
        Some(stem) if !stem.ends_with('s') && !stem.ends_with('u') && !stem.ends_with('i') => {
            stem.to_string()
        }
        _ => word.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_words_match_their_singular() {
        assert_eq!(
            query_patterns("How many singers from countries of the census have cities?"),
            ["singer", "countr(y|ies)", "census", "cit(y|ies)"]
        );
        assert_eq!(
            query_patterns("Was Paris in Texas in 2020, status analysis?"),
            ["paris", "texas", "2020", "status", "analysis"]
        );
    }
}
