//! Stand-ins for the engine and the grep stage: a scripted LLM and an in-memory search space.
//!
//! They make the loop testable without weights or a corpus, and they are small enough to serve as
//! reference behaviour for the real adapters: [`ScriptedLlm`] reports prompt and cached tokens the
//! way a prefix-reusing KV cache would (whitespace tokens, longest common prefix with the previous
//! request), so tests can check that prompts share prefixes.

use std::collections::VecDeque;

use regex::{Regex, RegexBuilder};

use super::{
    AgentError, ChatMessage, Evidence, Llm, LlmRequest, LlmResponse, PromptBudget, RankedTable,
    Scored, SearchSpace,
};

/// Returns queued outputs in order and keeps every request it saw.
#[derive(Debug, Clone, Default)]
pub struct ScriptedLlm {
    outputs: VecDeque<String>,
    requests: Vec<LlmRequest>,
    ms_per_call: f64,
    previous_tokens: Vec<String>,
    context_window: Option<usize>,
    scorer: Option<fn(&str, &str) -> f64>,
    scored: Vec<(String, String)>,
}

impl ScriptedLlm {
    pub fn new<I, T>(outputs: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        Self {
            outputs: outputs.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Reports this latency for every call (default 0), to exercise timing fields.
    pub fn with_latency(mut self, ms: f64) -> Self {
        self.ms_per_call = ms;
        self
    }

    /// Gives the backend a context window of `tokens` whitespace tokens: [`Llm::measure`]
    /// reports against it and a longer prompt fails the call, as the engine's would.
    pub fn with_context_window(mut self, tokens: usize) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Scores continuations with `scorer(prompt, continuation)` ([`Llm::continuation_logprob`]);
    /// without one the backend cannot score.
    pub fn with_scorer(mut self, scorer: fn(&str, &str) -> f64) -> Self {
        self.scorer = Some(scorer);
        self
    }

    /// Every (prompt, continuation) scored so far, in order.
    pub fn scored(&self) -> &[(String, String)] {
        &self.scored
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> &[LlmRequest] {
        &self.requests
    }

    /// Outputs not yet used.
    pub fn remaining(&self) -> usize {
        self.outputs.len()
    }
}

/// A chat rendered the way a template would flatten it, for token accounting and text assertions.
pub fn render_chat(messages: &[ChatMessage]) -> String {
    let mut text = String::new();
    for message in messages {
        let role = match message.role {
            super::Role::System => "system",
            super::Role::User => "user",
            super::Role::Assistant => "assistant",
        };
        text.push_str("<|");
        text.push_str(role);
        text.push_str("|>\n");
        text.push_str(&message.content);
        text.push('\n');
    }
    text
}

impl Llm for ScriptedLlm {
    fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError> {
        let calls = self.requests.len();
        self.requests.push(request.clone());
        let text = self
            .outputs
            .pop_front()
            .ok_or_else(|| AgentError::Llm(format!("script exhausted after {calls} outputs")))?;
        let tokens: Vec<String> = render_chat(&request.messages)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let cached_tokens = tokens
            .iter()
            .zip(&self.previous_tokens)
            .take_while(|(a, b)| a == b)
            .count();
        let prompt_tokens = tokens.len();
        if let Some(window) = self.context_window.filter(|&w| prompt_tokens > w) {
            return Err(AgentError::Llm(format!(
                "prompt has {prompt_tokens} tokens but the context window is {window} tokens"
            )));
        }
        self.previous_tokens = tokens;
        Ok(LlmResponse {
            text,
            prompt_tokens,
            cached_tokens,
            ms: self.ms_per_call,
            // Scripted outputs are fixed text: no grammar shaped them.
            constrained: false,
        })
    }

    fn continuation_logprob(
        &mut self,
        prompt: &str,
        continuation: &str,
    ) -> Option<Result<Scored, AgentError>> {
        let scorer = self.scorer?;
        self.scored
            .push((prompt.to_string(), continuation.to_string()));
        let tokens = prompt.split_whitespace().count() + continuation.split_whitespace().count();
        Some(Ok(Scored {
            logprob: scorer(prompt, continuation),
            tokens,
        }))
    }

    fn measure(&mut self, messages: &[ChatMessage], max_new_tokens: usize) -> Option<PromptBudget> {
        let window = self.context_window?;
        let tokens = render_chat(messages).split_whitespace().count();
        Some(PromptBudget::new(tokens, window, max_new_tokens))
    }

    fn count_tokens(&mut self, text: &str) -> Option<usize> {
        self.context_window?;
        Some(text.split_whitespace().count())
    }
}

/// A table for [`MemorySpace`]: an id and its text, first line the header, one row per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryTable {
    pub id: String,
    pub text: String,
    /// The text read as CSV, for SQL QA; `None` when it is not one table.
    pub table: Option<crate::corpus::Table>,
}

/// Tables held as strings. Score = share of the patterns (case-insensitive regexes; an invalid
/// regex is searched literally) found in the text; tables scoring 0 are left out; ties keep
/// insertion order.
#[derive(Debug, Clone, Default)]
pub struct MemorySpace {
    tables: Vec<MemoryTable>,
}

impl MemorySpace {
    pub fn new<I, A, B>(tables: I) -> Self
    where
        I: IntoIterator<Item = (A, B)>,
        A: Into<String>,
        B: Into<String>,
    {
        Self {
            tables: tables
                .into_iter()
                .map(|(id, text)| {
                    let text: String = text.into();
                    let table = crate::corpus::parse_text(&text, crate::corpus::TextFormat::Csv)
                        .ok()
                        .and_then(|tables| tables.into_iter().next());
                    MemoryTable {
                        id: id.into(),
                        text,
                        table,
                    }
                })
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The index of the table with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.tables.iter().position(|t| t.id == id)
    }
}

fn compile(patterns: &[String]) -> Vec<Regex> {
    patterns
        .iter()
        .filter_map(|p| {
            RegexBuilder::new(p)
                .case_insensitive(true)
                .build()
                .or_else(|_| {
                    RegexBuilder::new(&regex::escape(p))
                        .case_insensitive(true)
                        .build()
                })
                .ok()
        })
        .collect()
}

impl SearchSpace for MemorySpace {
    fn rank(&self, _query: &str, patterns: &[String]) -> Vec<RankedTable> {
        let regexes = compile(patterns);
        if regexes.is_empty() {
            return Vec::new();
        }
        let mut ranked: Vec<RankedTable> = self
            .tables
            .iter()
            .enumerate()
            .filter_map(|(table, t)| {
                let found = regexes.iter().filter(|r| r.is_match(&t.text)).count();
                (found > 0).then(|| RankedTable {
                    table,
                    score: found as f64 / regexes.len() as f64,
                })
            })
            .collect();
        // Stable: equal scores keep corpus order.
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
        ranked
    }

    fn preview(
        &self,
        table: usize,
        patterns: &[String],
        evidence: Evidence,
        match_only: bool,
    ) -> String {
        let Some(t) = self.tables.get(table) else {
            return String::new();
        };
        let Some((per_pattern, total)) = evidence.row_limits() else {
            return t.text.clone();
        };
        let mut lines = t.text.lines();
        let header = lines.next().unwrap_or("");
        let rows: Vec<&str> = lines.collect();
        let mut picked: Vec<usize> = Vec::new();
        for regex in compile(patterns) {
            let mut taken = 0;
            for (i, row) in rows.iter().enumerate() {
                if taken == per_pattern || picked.len() == total {
                    break;
                }
                if regex.is_match(row) && !picked.contains(&i) {
                    picked.push(i);
                    taken += 1;
                }
            }
        }
        picked.sort_unstable();
        let mut out: Vec<&str> = Vec::new();
        if !match_only {
            out.push(header);
        }
        out.extend(picked.iter().map(|&i| rows[i]));
        out.join("\n")
    }

    fn full_text(&self, table: usize) -> String {
        self.tables
            .get(table)
            .map(|t| t.text.clone())
            .unwrap_or_default()
    }

    fn table_id(&self, table: usize) -> &str {
        self.tables.get(table).map_or("", |t| t.id.as_str())
    }

    fn table(&self, table: usize) -> Option<&crate::corpus::Table> {
        self.tables.get(table)?.table.as_ref()
    }
}
