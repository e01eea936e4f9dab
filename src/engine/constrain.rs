//! Structured decoding: the model may only emit tokens that keep its output a valid prefix of a
//! grammar (a JSON schema or a Lark grammar), while greedy decoding stays deterministic.
//!
//! The grammar work is llguidance's (the engine behind llama.cpp's and mistral.rs's structured
//! output): it compiles the grammar and, given the tokens so far, computes the set of allowed next
//! tokens by walking a trie of the vocabulary's byte strings. This module only
//!
//! - builds that trie from our [`Tokenizer`] once ([`GrammarCompiler::new`]; a [`ChatModel`]
//!   keeps one per tokenizer). Token bytes come from llguidance's own reader of `tokenizer.json`,
//!   fed with our tokenizer serialized, so a tokenizer rebuilt from GGUF metadata yields the
//!   decoded bytes of each byte-level piece (not its `Ġ`-mapped text); special tokens are marked so
//!   no grammar can produce them, and the model's end-of-generation ids are the grammar's EOS;
//! - compiles one grammar per call into a [`GrammarMask`], a [`LogitsMask`] that sets every
//!   disallowed logit to `-inf` before the argmax. EOS is allowed only where the grammar accepts,
//!   and it is the only choice once the grammar is complete.
//!
//! Thinking models reason freely: a mask built with a *gate* (the token ids of `</think>`) leaves
//! the logits alone until the gate has been generated and constrains what follows.
//!
//! JSON schemas are compiled with compact, fixed separators (`", "`, `": "`) and no optional
//! whitespace, so a small model cannot stall in blank space and the output reads like the prompts'
//! examples; a schema may override this with its own `x-guidance` options.
//!
//! [`ChatModel`]: super::ChatModel

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde::{Deserialize, Serialize};

use super::generate::LogitsMask;
use super::tokenizer::Tokenizer;

/// Errors from building the token trie or compiling a grammar.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    #[error("the tokenizer cannot drive structured decoding: {0}")]
    Tokenizer(String),
    #[error("the tokenizer declares no end-of-generation token, which structured decoding needs")]
    NoEos,
    #[error("compiling the output grammar: {0}")]
    Compile(String),
}

pub type Result<T, E = ConstraintError> = std::result::Result<T, E>;

/// What the output must match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grammar {
    /// A JSON schema (the subset llguidance supports: types, `enum`/`const`, `anyOf`, `required`,
    /// `additionalProperties`, `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern`, ...).
    JsonSchema(serde_json::Value),
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
}

/// Compact JSON, as the prompts' examples write it.
fn default_json_options() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// The token trie of one tokenizer and the grammar factory over it. Building it walks the whole
/// vocabulary, so build it once per tokenizer and compile every call's grammar with it.
pub struct GrammarCompiler {
    factory: ParserFactory,
    vocab_size: usize,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    pub fn new(tokenizer: &Tokenizer) -> Result<Self> {
        let eos = tokenizer.eos_token_ids();
        let Some(&first_eos) = eos.first() else {
            return Err(ConstraintError::NoEos);
        };
        let json = tokenizer
            .inner()
            .to_string(false)
            .map_err(|err| ConstraintError::Tokenizer(err.to_string()))?;
        let value: serde_json::Value = serde_json::from_str(&json)
            .map_err(|err| ConstraintError::Tokenizer(err.to_string()))?;
        // llguidance asserts on vocabularies it does not expect (malformed byte-fallback names);
        // a tokenizer file is input, so that becomes an error here, not a crash.
        let tokenizer_vocab = tokenizer.vocab_size();
        let build = || -> Result<(TokTrie, usize)> {
            let mut words = llguidance::token_bytes_from_tokenizer_json(&value)
                .map_err(|err| ConstraintError::Tokenizer(err.to_string()))?;
            let vocab_size = tokenizer_vocab.max(words.len());
            // Ids without a vocabulary entry get no bytes: the trie never offers them.
            words.resize(vocab_size, Vec::new());
            if let Some(&bad) = eos.iter().find(|&&id| id as usize >= vocab_size) {
                return Err(ConstraintError::Tokenizer(format!(
                    "end-of-generation id {bad} is outside the vocabulary ({vocab_size})"
                )));
            }
            let info = TokRxInfo::new(vocab_size as u32, first_eos);
            Ok((
                TokTrie::from(&info, &words).with_eos_tokens(eos),
                vocab_size,
            ))
        };
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build));
        let (trie, vocab_size) = built.map_err(|panic| {
            let reason = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unexpected vocabulary");
            ConstraintError::Tokenizer(format!("building the token trie: {reason}"))
        })??;
        // Our masks never force tokens (one argmax per step), so greedy tokenization of literal
        // strings, which is all llguidance uses the tokenizer for here, is enough.
        let env: TokEnv = std::sync::Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|err| ConstraintError::Tokenizer(err.to_string()))?;
        factory.quiet();
        Ok(Self {
            factory,
            vocab_size,
        })
    }

    /// Number of token ids the trie covers; logits beyond it are always masked.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// A mask for one generation that constrains it from the first token.
    pub fn compile(&self, grammar: &Grammar) -> Result<GrammarMask> {
        self.compile_gated(grammar, None)
    }

    /// A mask that lets the model write freely until it has generated `gate` (e.g. the ids of
    /// `</think>`), then constrains the rest. `None` or an empty gate constrains from the start.
    pub fn compile_gated(&self, grammar: &Grammar, gate: Option<Vec<u32>>) -> Result<GrammarMask> {
        let top = match grammar {
            Grammar::JsonSchema(schema) => {
                let mut schema = schema.clone();
                if let Some(map) = schema.as_object_mut() {
                    map.entry("x-guidance").or_insert_with(default_json_options);
                }
                TopLevelGrammar::from_json_schema(schema)
            }
            Grammar::Lark(source) => TopLevelGrammar::from_lark(source.clone()),
        };
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|err| ConstraintError::Compile(err.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(err) = matcher.get_error() {
            return Err(ConstraintError::Compile(err));
        }
        let gate = gate.filter(|g| !g.is_empty());
        Ok(GrammarMask {
            matcher,
            vocab_size: self.vocab_size,
            start: if gate.is_none() { Some(0) } else { None },
            gate,
            fed: 0,
            failure: None,
        })
    }
}

/// The per-call state of a grammar: which tokens may come next. Implements [`LogitsMask`].
pub struct GrammarMask {
    matcher: Matcher,
    vocab_size: usize,
    gate: Option<Vec<u32>>,
    /// Index into the generated tokens where the constrained part starts, once known.
    start: Option<usize>,
    /// Tokens of the constrained part already fed to the matcher.
    fed: usize,
    failure: Option<String>,
}

impl std::fmt::Debug for GrammarMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarMask")
            .field("gate", &self.gate)
            .field("start", &self.start)
            .field("fed", &self.fed)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl GrammarMask {
    /// Whether the mask has started constraining (always, unless a gate is still closed).
    pub fn is_active(&self) -> bool {
        self.start.is_some()
    }

    /// Why the mask gave up, if it did: the call then went on unconstrained from that point.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Did the mask shape the output from its start (gate passed, no failure)?
    pub fn constrained(&self) -> bool {
        self.is_active() && self.failure.is_none()
    }

    /// Whether the constrained part fed so far is a complete sentence of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    fn fail(&mut self, reason: String) {
        tracing::warn!(%reason, "structured decoding gave up; the rest of the call is unconstrained");
        self.failure = Some(reason);
    }

    /// Feeds the newly generated tokens and returns the allowed set, or `None` when not (or no
    /// longer) constraining.
    fn allowed(&mut self, generated: &[u32]) -> Option<SimpleVob> {
        if self.failure.is_some() {
            return None;
        }
        let start = match self.start {
            Some(start) => start,
            None => {
                let gate = self.gate.as_deref().unwrap_or_default();
                // Called before every argmax, so the gate is seen the step it is completed.
                if !generated.ends_with(gate) {
                    return None;
                }
                self.start = Some(generated.len());
                generated.len()
            }
        };
        let pending = generated.get(start + self.fed..).unwrap_or_default();
        for &token in pending {
            if let Err(err) = self.matcher.consume_token(token) {
                self.fail(format!("token {token} rejected: {err}"));
                return None;
            }
            self.fed += 1;
        }
        match self.matcher.compute_mask_or_eos() {
            Ok(mask) if mask.is_zero() => {
                self.fail("the grammar allows no token".to_string());
                None
            }
            Ok(mask) => Some(mask),
            Err(err) => {
                self.fail(err.to_string());
                None
            }
        }
    }
}

impl LogitsMask for GrammarMask {
    fn apply(&mut self, generated: &[u32], logits: &mut [f32]) {
        let Some(mask) = self.allowed(generated) else {
            return;
        };
        let vocab = self.vocab_size;
        for (id, value) in logits.iter_mut().enumerate() {
            if id >= vocab || !mask.is_allowed(id as u32) {
                *value = f32::NEG_INFINITY;
            }
        }
    }

    fn in_force(&self) -> bool {
        self.constrained()
    }
}
