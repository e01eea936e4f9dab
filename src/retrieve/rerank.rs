//! An LLM reranker in the Qwen3-Reranker format, on any causal LM the engine loads.
//!
//! Each (query, document) pair becomes one ChatML prompt: the fixed system message ("Judge
//! whether the Document meets the requirements …"), the user turn `<Instruct>: {instruction}\n
//! <Query>: {query}\n<Document>: {doc}`, and an assistant turn opened with an empty think block.
//! The score is `p(yes) = softmax([logit(no), logit(yes)])[1]` at the last position; only the
//! two rows of the output head are projected, not the whole vocabulary.
//!
//! Every prompt of one query shares everything up to `<Document>:`, so that prefix is computed
//! once into the reranker's KV cache and the cache is truncated back to it for each document; the
//! system message, common to all queries, is kept across queries too.
//!
//! Tokenization is done in pieces whose boundaries are pre-tokenizer boundaries (after a special
//! token, and between `<Document>:` and ` {doc}`), so the ids equal those of the whole prompt
//! tokenized at once, as Qwen3-Reranker's reference code does. Query and document text are read
//! literally: a table containing `<|im_end|>` cannot close the turn.
//!
//! SmolLM2 and other ChatML models read the same text; "yes" and "no" are looked up in each
//! model's own vocabulary.

use std::path::Path;

use candle_core::{DType, Tensor};

use crate::engine::{
    load_tokenizer, DeviceMap, EngineError, KvCache, LoadOptions, Model, ModelSpec, Tokenizer,
    TokenizerError,
};

/// The system turn and the opening of the user turn, verbatim from Qwen3-Reranker.
pub const SYSTEM_PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
/// The end of the user turn and the assistant turn with an empty think block.
pub const SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
/// Qwen3-Reranker's default instruction is about web passages; this one names the task.
pub const DEFAULT_INSTRUCTION: &str =
    "Given a question or a claim, judge whether the table answers or verifies it";
/// Longest prompt scored by default (Qwen3-Reranker's reference setting), capped by the model's
/// context.
pub const DEFAULT_MAX_LENGTH: usize = 8192;

/// Why a reranker could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum RerankError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("the vocabulary has no single token for {0:?}; pass the yes/no token ids explicitly")]
    NoToken(String),
    #[error("the prompt without its document is {prompt_len} tokens, the limit {max_length}")]
    PromptTooLong {
        prompt_len: usize,
        max_length: usize,
    },
}

pub type Result<T> = std::result::Result<T, RerankError>;

/// How a [`Reranker`] builds and scores prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct RerankOptions {
    pub instruction: String,
    /// Tokens per prompt; documents are cut to fit (and counted). Capped by the model's context.
    pub max_length: usize,
    /// `(yes, no)` token ids; looked up as the tokens "yes" and "no" when absent.
    pub yes_no_ids: Option<(u32, u32)>,
    /// How a query's documents are run; see [`RerankBatching`].
    pub batching: RerankBatching,
}

/// How a [`Reranker`] runs one query's documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RerankBatching {
    /// [`RerankBatching::Padded`] on an accelerator, [`RerankBatching::SharedPrefix`] on the CPU.
    #[default]
    Auto,
    /// One document after another, each resuming from the query prefix in the KV cache. On the
    /// CPU a prompt of a few hundred tokens already fills the kernels, so stacking documents gains
    /// nothing, while skipping the prefix saves a third of the work or more.
    SharedPrefix,
    /// All documents as one left-padded batch ([`Model::last_hidden_batch`], as Qwen3-Reranker's
    /// reference code runs them), in groups of at most [`PADDED_BATCH_TOKENS`] padded tokens: one
    /// pass over the weights per chunk for many documents, which is what an accelerator needs.
    /// Scores equal the shared-prefix ones up to rounding, not bit for bit.
    Padded,
}

/// Padded tokens per group in [`RerankBatching::Padded`]: bounds the activations of one forward.
pub const PADDED_BATCH_TOKENS: usize = 16_384;

impl Default for RerankOptions {
    fn default() -> Self {
        Self {
            instruction: DEFAULT_INSTRUCTION.to_string(),
            max_length: DEFAULT_MAX_LENGTH,
            yes_no_ids: None,
            batching: RerankBatching::Auto,
        }
    }
}

/// Scores of one query's documents and what computing them cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RerankOutput {
    /// p(yes) per document, in input order.
    pub scores: Vec<f64>,
    /// Forward passes: one per document with a shared prefix (the prefix rides on the first),
    /// one per group when padded.
    pub calls: usize,
    /// Tokens run through the model.
    pub computed_tokens: usize,
    /// Prompt tokens served from the shared prefix instead.
    pub reused_tokens: usize,
    /// Documents cut to fit `max_length`.
    pub truncated: usize,
}

/// A causal LM used as a yes/no relevance judge.
pub struct Reranker {
    model: Model,
    tokenizer: Tokenizer,
    options: RerankOptions,
    /// Output-head rows of "no" and "yes", `[2, hidden]`.
    head: Tensor,
    yes: u32,
    no: u32,
    system_ids: Vec<u32>,
    suffix_ids: Vec<u32>,
    /// Holds the system prefix between queries, and the query prefix between documents.
    cache: KvCache,
}

impl std::fmt::Debug for Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reranker")
            .field("options", &self.options)
            .field("yes", &self.yes)
            .field("no", &self.no)
            .finish_non_exhaustive()
    }
}

impl Reranker {
    /// Loads a GGUF file or checkpoint directory with its tokenizer.
    pub fn load(
        path: &Path,
        devices: &DeviceMap,
        load: &LoadOptions,
        options: RerankOptions,
    ) -> Result<Self> {
        let model = Model::load_with(&ModelSpec::Path(path.to_path_buf()), devices, load)?;
        let tokenizer = load_tokenizer(path, None)?;
        Self::new(model, tokenizer, options)
    }

    pub fn new(model: Model, tokenizer: Tokenizer, mut options: RerankOptions) -> Result<Self> {
        options.max_length = options.max_length.min(model.context_len());
        let (yes, no) = match options.yes_no_ids {
            Some(ids) => ids,
            None => (word_id(&tokenizer, "yes")?, word_id(&tokenizer, "no")?),
        };
        let head = model.head_rows(&[no, yes])?;
        let system_ids = tokenizer.encode(SYSTEM_PREFIX, true)?;
        let suffix_ids = tokenizer.encode(SUFFIX, true)?;
        let cache = model.new_cache();
        Ok(Self {
            model,
            tokenizer,
            options,
            head,
            yes,
            no,
            system_ids,
            suffix_ids,
            cache,
        })
    }

    pub fn options(&self) -> &RerankOptions {
        &self.options
    }

    /// `(yes, no)` token ids.
    pub fn yes_no_ids(&self) -> (u32, u32) {
        (self.yes, self.no)
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The ids of the full prompt for one pair (document cut to fit) and whether it was cut.
    pub fn prompt_ids(&self, query: &str, document: &str) -> Result<(Vec<u32>, bool)> {
        let head = self.query_ids(query)?;
        let (doc, cut) = self.document_ids(head.len(), document)?;
        let ids = head
            .iter()
            .chain(&doc)
            .chain(&self.suffix_ids)
            .copied()
            .collect();
        Ok((ids, cut))
    }

    /// p(yes) of each document for `query`, in input order.
    pub fn score(&mut self, query: &str, documents: &[&str]) -> Result<RerankOutput> {
        if documents.is_empty() {
            return Ok(RerankOutput::default());
        }
        let padded = match self.options.batching {
            RerankBatching::Auto => !self.head.device().is_cpu(),
            RerankBatching::SharedPrefix => false,
            RerankBatching::Padded => true,
        };
        if padded {
            self.score_padded(query, documents)
        } else {
            self.score_with_shared_prefix(query, documents)
        }
    }

    fn score_padded(&self, query: &str, documents: &[&str]) -> Result<RerankOutput> {
        let mut out = RerankOutput::default();
        let head = self.query_ids(query)?;
        let mut prompts = Vec::with_capacity(documents.len());
        for document in documents {
            let (doc, cut) = self.document_ids(head.len(), document)?;
            out.truncated += usize::from(cut);
            let ids: Vec<u32> = head
                .iter()
                .chain(&doc)
                .chain(&self.suffix_ids)
                .copied()
                .collect();
            out.computed_tokens += ids.len();
            prompts.push(ids);
        }
        let mut start = 0;
        while start < prompts.len() {
            // The longest group whose padded size stays within the budget (at least one prompt).
            let mut end = start + 1;
            let mut longest = prompts[start].len();
            while end < prompts.len() {
                let next = longest.max(prompts[end].len());
                if next * (end + 1 - start) > PADDED_BATCH_TOKENS {
                    break;
                }
                longest = next;
                end += 1;
            }
            let group: Vec<&[u32]> = prompts[start..end].iter().map(Vec::as_slice).collect();
            let hidden = self.model.last_hidden_batch(&group)?;
            let logits = hidden.matmul(&self.head.t()?)?.to_vec2::<f32>()?;
            out.scores.extend(
                logits
                    .iter()
                    .map(|l| p_yes(f64::from(l[0]), f64::from(l[1]))),
            );
            out.calls += 1;
            start = end;
        }
        Ok(out)
    }

    fn score_with_shared_prefix(
        &mut self,
        query: &str,
        documents: &[&str],
    ) -> Result<RerankOutput> {
        let mut out = RerankOutput::default();
        let head = self.query_ids(query)?;
        let model = &self.model;
        let system = self.system_ids.len();
        // Between calls the cache holds the system prefix, or nothing (first use, after an error).
        self.cache.truncate(system);
        for document in documents {
            let (doc, cut) = self.document_ids(head.len(), document)?;
            out.truncated += usize::from(cut);
            let shared = self.cache.len().min(head.len());
            self.cache.truncate(shared);
            let tokens: Vec<u32> = head[shared..]
                .iter()
                .chain(&doc)
                .chain(&self.suffix_ids)
                .copied()
                .collect();
            out.reused_tokens += shared;
            out.computed_tokens += tokens.len();
            let hidden = match model.forward_last_hidden(&tokens, &mut self.cache) {
                Ok(hidden) => hidden,
                Err(e) => {
                    self.cache.clear();
                    return Err(e.into());
                }
            };
            // Later documents resume from the end of the query prefix.
            self.cache.truncate(head.len());
            let logits: Vec<f32> = hidden
                .to_dtype(DType::F32)?
                .matmul(&self.head.t()?)?
                .flatten_all()?
                .to_vec1()?;
            out.scores
                .push(p_yes(f64::from(logits[0]), f64::from(logits[1])));
            out.calls += 1;
        }
        self.cache.truncate(system);
        Ok(out)
    }

    /// System prefix + `<Instruct>: …\n<Query>: …\n<Document>:`.
    fn query_ids(&self, query: &str) -> Result<Vec<u32>> {
        let text = format!(
            "<Instruct>: {}\n<Query>: {query}\n<Document>:",
            self.options.instruction
        );
        let mut ids = self.system_ids.clone();
        ids.extend(self.tokenizer().encode(&text, false)?);
        let fixed = ids.len() + self.suffix_ids.len();
        if fixed >= self.options.max_length {
            return Err(RerankError::PromptTooLong {
                prompt_len: fixed,
                max_length: self.options.max_length,
            });
        }
        Ok(ids)
    }

    /// ` {document}` cut to the room left after a head of `head_len` tokens and the suffix.
    fn document_ids(&self, head_len: usize, document: &str) -> Result<(Vec<u32>, bool)> {
        let room = self.options.max_length - head_len - self.suffix_ids.len();
        let mut ids = self.tokenizer().encode(&format!(" {document}"), false)?;
        let cut = ids.len() > room;
        ids.truncate(room);
        Ok((ids, cut))
    }
}

/// softmax([no, yes])[1], written so a large gap cannot overflow.
fn p_yes(no: f64, yes: f64) -> f64 {
    1.0 / (1.0 + (no - yes).exp())
}

/// The id of `word` as one vocabulary token (Qwen3-Reranker's `convert_tokens_to_ids`), else
/// as the single token it encodes to.
fn word_id(tokenizer: &Tokenizer, word: &str) -> Result<u32> {
    if let Some(id) = tokenizer.token_id(word) {
        return Ok(id);
    }
    match tokenizer.encode(word, false)?.as_slice() {
        [id] => Ok(*id),
        _ => Err(RerankError::NoToken(word.to_string())),
    }
}

/// Reorders `candidates` (document indices, best first) by descending score; equal scores keep
/// their incoming order.
pub fn reorder(candidates: &[usize], scores: &[f64]) -> Vec<(usize, f64)> {
    let mut ranked: Vec<(usize, (usize, f64))> = candidates
        .iter()
        .copied()
        .zip(scores.iter().copied())
        .enumerate()
        .collect();
    ranked.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1).then(a.0.cmp(&b.0)));
    ranked.into_iter().map(|(_, hit)| hit).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_sorts_by_score_and_keeps_ties_in_order() {
        let ranked = reorder(&[7, 3, 9, 1], &[0.2, 0.9, 0.2, 0.5]);
        let docs: Vec<usize> = ranked.iter().map(|r| r.0).collect();
        assert_eq!(docs, [3, 1, 7, 9]);
        assert_eq!(ranked[0].1, 0.9);
    }
}
