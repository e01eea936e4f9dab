//! The real backends behind the agent's two traits: the loaded corpus with the grep stage as the
//! [`SearchSpace`], and the in-process engine as the [`Llm`].

use std::sync::Mutex;
use std::time::Instant;

use super::fit::{cap_text, PromptBudget};
use super::SearchSpace;
use super::{AgentError, ChatMessage, Evidence, Llm, LlmRequest, LlmResponse, RankedTable, Role};
use crate::corpus::Corpus;
use crate::engine::{self, ChatModel, ChatOptions};
use crate::grep::{self, PatternSet, PreviewOptions};

/// Tables longer than this are cut before QA sees them, so one huge table cannot push a prompt past
/// the model's context window; the cut is marked in the text.
pub const DEFAULT_MAX_TABLE_CHARS: usize = 16_000;

/// A loaded corpus searched by the grep stage.
pub struct CorpusSpace<'a> {
    corpus: &'a Corpus,
    max_table_chars: usize,
    // The loop asks for a ranking and then previews under the same patterns: compile them once.
    compiled: Mutex<Option<PatternSet>>,
}

impl<'a> CorpusSpace<'a> {
    pub fn new(corpus: &'a Corpus) -> Self {
        Self {
            corpus,
            max_table_chars: DEFAULT_MAX_TABLE_CHARS,
            compiled: Mutex::new(None),
        }
    }

    pub fn max_table_chars(mut self, max_table_chars: usize) -> Self {
        self.max_table_chars = max_table_chars;
        self
    }

    fn with_patterns<T>(&self, patterns: &[String], f: impl FnOnce(&PatternSet) -> T) -> T {
        let mut guard = match self.compiled.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let stale = guard.as_ref().is_none_or(|set| set.patterns() != patterns);
        if stale {
            let set = PatternSet::compile(patterns);
            for warning in set.warnings() {
                tracing::debug!(%warning, "pattern");
            }
            *guard = Some(set);
        }
        match guard.as_ref() {
            Some(set) => f(set),
            None => f(&PatternSet::compile(patterns)),
        }
    }
}

impl SearchSpace for CorpusSpace<'_> {
    /// Only tables that match at least one pattern: a table that matches none would reach the
    /// refine previews in corpus order and look like a candidate (SmolLM2 on TabFact selected
    /// such fillers in most claims), and with none matched the refine prompt says so and asks
    /// for new patterns.
    fn rank(&self, patterns: &[String]) -> Vec<RankedTable> {
        self.with_patterns(patterns, |set| {
            grep::rank(self.corpus, set)
                .into_iter()
                .take_while(|hit| hit.score > 0.0)
                .map(|hit| RankedTable {
                    table: hit.table,
                    score: f64::from(hit.score),
                })
                .collect()
        })
    }

    fn preview(
        &self,
        table: usize,
        patterns: &[String],
        evidence: Evidence,
        match_only: bool,
    ) -> String {
        let options = PreviewOptions::for_evidence(evidence).match_only(match_only);
        let text = self.with_patterns(patterns, |set| {
            grep::preview(self.corpus, table, set, &options)
        });
        cap_text(&text, self.max_table_chars)
    }

    fn full_text(&self, table: usize) -> String {
        cap_text(self.corpus.text(table), self.max_table_chars)
    }

    fn table(&self, table: usize) -> Option<&crate::corpus::Table> {
        Some(self.corpus.table(table))
    }

    fn table_id(&self, table: usize) -> &str {
        self.corpus.id(table)
    }
}

/// The in-process engine as the agent's LLM. Every call is greedy; thinking models think (their
/// `<think>` block is kept in the raw output the trajectory records and stripped by the parser).
pub struct EngineLlm<'m> {
    model: &'m mut ChatModel,
    enable_thinking: Option<bool>,
    constrain: bool,
}

impl<'m> EngineLlm<'m> {
    /// Structured decoding is on: requests that carry a grammar are decoded under it.
    pub fn new(model: &'m mut ChatModel) -> Self {
        Self {
            model,
            enable_thinking: None,
            constrain: true,
        }
    }

    pub fn enable_thinking(mut self, enable_thinking: Option<bool>) -> Self {
        self.enable_thinking = enable_thinking;
        self
    }

    /// `false` ignores request grammars (`--constrain off`): the model writes freely and the
    /// parser copes.
    pub fn constrain(mut self, constrain: bool) -> Self {
        self.constrain = constrain;
        self
    }
}

fn engine_messages(messages: &[ChatMessage]) -> Vec<engine::ChatMessage> {
    messages
        .iter()
        .map(|message| {
            let role = match message.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            engine::ChatMessage::new(role, message.content.clone())
        })
        .collect()
}

impl Llm for EngineLlm<'_> {
    fn chat(&mut self, request: &LlmRequest) -> Result<LlmResponse, AgentError> {
        let started = Instant::now();
        let messages = engine_messages(&request.messages);
        let options = ChatOptions {
            max_new_tokens: request.max_new_tokens,
            enable_thinking: self.enable_thinking,
            ..ChatOptions::default()
        };
        let output = match (&request.constraint, self.constrain) {
            (Some(grammar), true) => self.model.chat_constrained(&messages, &options, grammar),
            _ => self.model.chat(&messages, &options),
        }
        .map_err(|err| AgentError::Llm(err.to_string()))?;
        Ok(LlmResponse {
            text: output.raw_text,
            prompt_tokens: output.stats.prompt_tokens,
            cached_tokens: output.stats.cached_tokens,
            ms: started.elapsed().as_secs_f64() * 1e3,
            constrained: output.constrained,
        })
    }

    /// A template or tokenizer failure gives `None`: the chat call that follows reports it.
    fn measure(&mut self, messages: &[ChatMessage], max_new_tokens: usize) -> Option<PromptBudget> {
        let prompt = self
            .model
            .render(&engine_messages(messages), self.enable_thinking)
            .ok()?;
        let window = self.model.model().context_len();
        // Every token covers at least one byte of the prompt (special tokens several), plus a BOS
        // the tokenizer may add: a prompt with fewer bytes than the limit fits without paying
        // for a second tokenization (the chat call tokenizes it again).
        let upper_bound = PromptBudget::new(prompt.len() + 1, window, max_new_tokens);
        if upper_bound.fits() {
            return Some(upper_bound);
        }
        let tokens = self.model.encode_prompt(&prompt).ok()?.len();
        Some(PromptBudget::new(tokens, window, max_new_tokens))
    }

    fn count_tokens(&mut self, text: &str) -> Option<usize> {
        self.model
            .tokenizer()
            .encode(text, false)
            .ok()
            .map(|ids| ids.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{SourceFormat, Table, TableMeta};

    fn corpus() -> Corpus {
        let table = |id: &str, header: &[&str], rows: &[&[&str]]| Table {
            id: id.into(),
            source_format: SourceFormat::Csv,
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: rows
                .iter()
                .map(|r| r.iter().map(|s| s.to_string()).collect())
                .collect(),
            meta: TableMeta::default(),
        };
        Corpus::from_tables(vec![
            table(
                "secret/capitals.csv",
                &["country", "capital"],
                &[&["Australia", "Canberra"]],
            ),
            table(
                "secret/rivers.csv",
                &["river", "length"],
                &[&["Murray", "2508"]],
            ),
        ])
    }

    #[test]
    fn corpus_space_ranks_with_grep_and_keeps_ids_out_of_text() {
        let corpus = corpus();
        let space = CorpusSpace::new(&corpus);
        let patterns = vec!["canberra".to_string(), "capital".to_string()];
        let ranked = space.rank(&patterns);
        assert_eq!(ranked[0].table, 0);
        assert_eq!(ranked[0].score, 1.0);
        assert_eq!(space.table_id(0), "secret/capitals.csv");
        for table in 0..2 {
            let preview = space.preview(table, &patterns, Evidence::Small, false);
            assert!(!preview.contains("secret"), "{preview}");
            assert!(!space.full_text(table).contains("secret"));
        }
    }

    #[test]
    fn invalid_regex_from_the_model_is_searched_literally() {
        let corpus = corpus();
        let space = CorpusSpace::new(&corpus);
        let ranked = space.rank(&["Canberra(".to_string()]);
        assert!(ranked.iter().all(|hit| hit.score == 0.0));
    }
}
