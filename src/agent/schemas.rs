//! The output grammar of each call: what structured decoding lets the model write.
//!
//! Every grammar is the exact shape the step's prompt asks for (see [`prompts`](super::prompts)),
//! so model and mask agree, and every output it admits parses with [`parse`](super::parse) into
//! the intended action:
//!
//! | call | grammar |
//! |---|---|
//! | pattern generation | a JSON list of 1..=16 strings of at most 40 characters, each starting with a non-space and holding two letters or digits in a row |
//! | refine, `nSm` | `{"action": "select", "tables": [id, ...]}` (1..=m ids) or `{"action": "regenerate", "patterns": [...]}` |
//! | refine, `rN` | `{"action": "rerank", "order": [id, ...]}` (1..=shown ids) or regenerate |
//! | refine, `no_regenerate` | select/rerank or `{"action": "none"}` |
//! | QA, fact verification | one line `Answer: SUPPORTED`, `Answer: REFUTED` or `Answer: CANNOT VERIFY` (the baseline prompt: no CANNOT VERIFY) |
//! | QA, tableqa | none: the free-text answer with its `Answer:` line, as the prompt asks |
//!
//! Ids are an `enum` of the ids shown in the current round, so an id outside the shown set cannot
//! be written. Pattern lists are bounded (count and length) so a model that repeats itself still
//! closes the JSON within a few hundred tokens.
//!
//! Tableqa QA stays free: its prompt lets the model reason before the `Answer:` line, which a
//! grammar could only keep by admitting any text, and the parser already reads that line (or the
//! last line) from any output. Fact verification has a closed label set, so its answer is forced
//! to one of the labels, with no reasoning before it (thinking models still think first).

use serde_json::{json, Value};

use super::parse::QaVariant;
use super::{Strategy, TaskType};
use crate::engine::Grammar;

/// Most patterns one constrained call can write (the prompt asks for about 3 to 8).
pub const MAX_PATTERNS: usize = 16;
/// Longest pattern a constrained call can write, in characters: room for a name and a value
/// (`(?i)kazuto\s+sakata` is 19); copying a whole claim as one pattern never matches anyway.
pub const MAX_PATTERN_CHARS: usize = 40;

/// The longest text a pattern-generation or refine grammar admits (ASCII, the fixed separators
/// of [`crate::engine::GrammarCompiler`]): the regenerate object around a full pattern list. A
/// token carries at least one character, so a call whose `max_new_tokens` is at least this always
/// closes its JSON, even when a small model repeats itself up to every bound.
pub const MAX_ACTION_CHARS: usize = r#"{"action": "regenerate", "patterns": }"#.len()
    + 2
    + MAX_PATTERNS * (MAX_PATTERN_CHARS + 2)
    + (MAX_PATTERNS - 1) * 2;

/// The JSON-schema `pattern` every generated pattern matches: a non-space first, and two "word"
/// characters in a row somewhere (ASCII letters and digits; any non-ASCII character counts, for
/// names in other scripts).
pub const PATTERN_REGEX: &str = r"^(\S.*)?[0-9A-Za-z\x{80}-\x{10FFFF}]{2}.*$";

fn pattern_list() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "string",
            // Starts with a non-space (the parser trims patterns and drops empty ones) and holds
            // two letters or digits in a row: SmolLM2 under the mask otherwise drifts into `.*.*.*`,
            // which matches every table and says nothing.
            "pattern": PATTERN_REGEX,
            "maxLength": MAX_PATTERN_CHARS,
        },
        "minItems": 1,
        "maxItems": MAX_PATTERNS,
    })
}

/// An object with `"action": action` first, then `key: value`.
fn action(action: &str, key: Option<(&str, Value)>) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("action".into(), json!({ "const": action }));
    let mut required = vec![json!("action")];
    if let Some((key, value)) = key {
        properties.insert(key.into(), value);
        required.push(json!(key));
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn id_list(shown_ids: &[String], max: usize) -> Value {
    json!({
        "type": "array",
        "items": {"enum": shown_ids},
        "minItems": 1,
        "maxItems": max.max(1),
    })
}

/// Pattern generation: a JSON list of strings.
pub fn patterns() -> Grammar {
    Grammar::JsonSchema(pattern_list())
}

/// A refine round that showed `shown_ids`, under the run's strategy and ablations (the same
/// switches the prompt's refine section is built from).
pub fn refine(
    strategy: Strategy,
    shown_ids: &[String],
    allow_select: bool,
    allow_regenerate: bool,
) -> Grammar {
    let mut choices = Vec::new();
    if allow_select && !shown_ids.is_empty() {
        choices.push(match strategy {
            Strategy::Select { m, .. } => action("select", Some(("tables", id_list(shown_ids, m)))),
            // lN makes no refine call; a caller asking anyway gets 5s1's action.
            Strategy::Likelihood { .. } => {
                action("select", Some(("tables", id_list(shown_ids, 1))))
            }
            Strategy::Rerank { .. } => action(
                "rerank",
                Some(("order", id_list(shown_ids, shown_ids.len()))),
            ),
        });
    }
    if allow_regenerate {
        choices.push(action("regenerate", Some(("patterns", pattern_list()))));
    } else {
        choices.push(action("none", None));
    }
    let schema = match choices.len() {
        1 => choices.remove(0),
        _ => json!({ "anyOf": choices }),
    };
    Grammar::JsonSchema(schema)
}

/// QA: `None` for tableqa (free text), the label line for fact verification.
pub fn qa(task: TaskType, variant: QaVariant) -> Option<Grammar> {
    match task {
        TaskType::Tableqa => None,
        TaskType::FactVerification => {
            let labels = match variant {
                QaVariant::TableSeek => r#""SUPPORTED" | "REFUTED" | "CANNOT VERIFY""#,
                QaVariant::Baseline => r#""SUPPORTED" | "REFUTED""#,
            };
            Some(Grammar::Lark(format!("start: \"Answer: \" ({labels})\n")))
        }
    }
}
