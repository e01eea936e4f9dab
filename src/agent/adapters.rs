//! The real backends behind the agent's two traits: the loaded corpus with the grep stage as the
//! [`SearchSpace`], and the in-process engine as the [`Llm`].

use std::sync::Mutex;
use std::time::Instant;

use super::fit::{cap_text, PromptBudget};
use super::SearchSpace;
use super::{
    AgentError, Candidates, ChatMessage, Evidence, Llm, LlmRequest, LlmResponse, RankedTable, Role,
    Scored,
};
use crate::corpus::Corpus;
use crate::retrieve::bm25::{Bm25Builder, Bm25Index};
use crate::retrieve::fusion::{fuse_two, FusionRule, FUSION_POOL};

/// How [`Candidates::Hybrid`] joins the pattern ranking (first) and BM25 over the query and the
/// patterns (second): each side's scores over its best, BM25 weighted 4. Chosen by
/// `examples/fusion_grid.rs` on tuning queries disjoint from every reported set (TabFact test-1k
/// claims 201-298 and TCR-style questions 101-160, patterns of the default model): the best mean
/// R@1 of 27 rules (RRF k 60 and 10, score blend; BM25 weights 0 to 4 and BM25 alone), then
/// R@3; `results/hybrid/README.md` has the grid.
pub const HYBRID_FUSION: FusionRule = FusionRule::Blend {
    weights: [1.0, 4.0],
};
use crate::engine::{self, ChatModel, ChatOptions};
use crate::grep::{self, PatternSet, PreviewOptions};

/// Tables longer than this are cut before QA sees them, so one huge table cannot push a prompt past
/// the model's context window; the cut is marked in the text.
pub const DEFAULT_MAX_TABLE_CHARS: usize = 16_000;

/// A loaded corpus searched by the grep stage, alone or fused with BM25 ([`Candidates`]).
pub struct CorpusSpace<'a> {
    corpus: &'a Corpus,
    max_table_chars: usize,
    // The loop asks for a ranking and then previews under the same patterns: compile them once.
    compiled: Mutex<Option<PatternSet>>,
    candidates: Candidates,
    fusion: FusionRule,
    bm25: Option<Bm25Index>,
}

impl<'a> CorpusSpace<'a> {
    pub fn new(corpus: &'a Corpus) -> Self {
        Self {
            corpus,
            max_table_chars: DEFAULT_MAX_TABLE_CHARS,
            compiled: Mutex::new(None),
            candidates: Candidates::Grep,
            fusion: HYBRID_FUSION,
            bm25: None,
        }
    }

    pub fn max_table_chars(mut self, max_table_chars: usize) -> Self {
        self.max_table_chars = max_table_chars;
        self
    }

    /// Ranks candidates by `candidates`; BM25 (Okapi, over each table's text as QA reads it)
    /// is indexed here, once per space.
    pub fn candidates(mut self, candidates: Candidates) -> Result<Self, AgentError> {
        self.candidates = candidates;
        if candidates != Candidates::Grep && self.bm25.is_none() {
            let texts: Vec<String> = (0..self.corpus.len())
                .map(|i| cap_text(self.corpus.text(i), self.max_table_chars))
                .collect();
            let index = Bm25Builder::okapi()
                .build(&texts)
                .map_err(|e| AgentError::InvalidConfig(format!("BM25 index: {e}")))?;
            self.bm25 = Some(index);
        }
        Ok(self)
    }

    /// The rule of [`Candidates::Hybrid`] ([`HYBRID_FUSION`] unless set).
    pub fn hybrid_fusion(mut self, fusion: FusionRule) -> Self {
        self.fusion = fusion;
        self
    }

    fn grep_ranking(&self, patterns: &[String]) -> Vec<RankedTable> {
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

    /// BM25 over the query's words and the patterns' (a pattern's regex syntax splits into
    /// words like any other text).
    fn bm25_ranking(&self, query: &str, patterns: &[String]) -> Vec<RankedTable> {
        let Some(index) = &self.bm25 else {
            return Vec::new();
        };
        let text = std::iter::once(query)
            .chain(patterns.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        index
            .search(&text, FUSION_POOL)
            .into_iter()
            .filter(|hit| hit.score > 0.0)
            .map(|hit| RankedTable {
                table: hit.doc,
                score: hit.score,
            })
            .collect()
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
    fn rank(&self, query: &str, patterns: &[String]) -> Vec<RankedTable> {
        match self.candidates {
            Candidates::Grep => self.grep_ranking(patterns),
            Candidates::Bm25 => self.bm25_ranking(query, patterns),
            Candidates::Hybrid => {
                let scored = |ranking: Vec<RankedTable>| -> Vec<(usize, f64)> {
                    ranking.into_iter().map(|r| (r.table, r.score)).collect()
                };
                let grep = scored(self.grep_ranking(patterns));
                let bm25 = scored(self.bm25_ranking(query, patterns));
                fuse_two(self.fusion, &grep, &bm25)
                    .into_iter()
                    .map(|f| RankedTable {
                        table: f.item,
                        score: f.score,
                    })
                    .collect()
            }
        }
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

    fn continuation_logprob(
        &mut self,
        prompt: &str,
        continuation: &str,
    ) -> Option<Result<Scored, AgentError>> {
        Some(
            self.model
                .continuation_logprob(prompt, continuation)
                .map(|(logprob, tokens)| Scored { logprob, tokens })
                .map_err(|err| AgentError::Llm(err.to_string())),
        )
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

    /// The patterns miss (a misspelt name) but the query's words find the table: grep alone
    /// ranks nothing, BM25 and hybrid rank it; where the patterns do hit, hybrid keeps their
    /// table first and still holds BM25's other hits.
    #[test]
    fn hybrid_candidates_fuse_patterns_and_query_words() {
        // BM25's idf needs a few tables besides the two that matter.
        let mut tables: Vec<Table> = corpus().tables().to_vec();
        for (i, word) in ["apples", "trains", "violins"].iter().enumerate() {
            tables.push(Table {
                id: format!("filler{i}.csv"),
                source_format: SourceFormat::Csv,
                header: vec!["item".into(), "count".into()],
                rows: vec![vec![word.to_string(), "3".into()]],
                meta: TableMeta::default(),
            });
        }
        let corpus = Corpus::from_tables(tables);
        let grep = CorpusSpace::new(&corpus);
        let bm25 = CorpusSpace::new(&corpus)
            .candidates(Candidates::Bm25)
            .unwrap();
        let hybrid = CorpusSpace::new(&corpus)
            .candidates(Candidates::Hybrid)
            .unwrap();
        let missing = vec!["Murrey".to_string()];
        let query = "How long is the Murray river?";
        assert!(grep.rank(query, &missing).is_empty());
        assert_eq!(bm25.rank(query, &missing)[0].table, 1);
        let fused = hybrid.rank(query, &missing);
        assert_eq!(fused.iter().map(|r| r.table).collect::<Vec<_>>(), vec![1]);

        // Both sides' hits reach the pool. The default blend weighs BM25 4:1, so the
        // table matching two of the query's words stays ahead of a pattern-only hit, and the
        // pattern's table gains exactly its share (1.0, the best) on top of its BM25 part.
        let hit = vec!["Canberra".to_string()];
        let fused = hybrid.rank(query, &hit);
        assert_eq!(
            fused.iter().map(|r| r.table).collect::<Vec<_>>(),
            vec![1, 0],
            "the query's strong table, then the pattern's"
        );
        let bm25_side = bm25.rank(query, &hit);
        let best = bm25_side[0].score;
        let bm25_part = |table: usize| {
            bm25_side
                .iter()
                .find(|r| r.table == table)
                .map_or(0.0, |r| 4.0 * r.score / best)
        };
        assert!((fused[0].score - bm25_part(1)).abs() < 1e-9);
        assert!((fused[1].score - (1.0 + bm25_part(0))).abs() < 1e-9);
        // Where the query's words are nowhere in the corpus, the patterns decide alone.
        let fused = hybrid.rank("Which one?", &hit);
        assert_eq!(fused.iter().map(|r| r.table).collect::<Vec<_>>(), vec![0]);
        // The same inputs, the same ranking, scores included.
        assert_eq!(fused, hybrid.rank("Which one?", &hit));
    }

    #[test]
    fn corpus_space_ranks_with_grep_and_keeps_ids_out_of_text() {
        let corpus = corpus();
        let space = CorpusSpace::new(&corpus);
        let patterns = vec!["canberra".to_string(), "capital".to_string()];
        let ranked = space.rank("", &patterns);
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
        let ranked = space.rank("", &["Canberra(".to_string()]);
        assert!(ranked.iter().all(|hit| hit.score == 0.0));
    }
}
