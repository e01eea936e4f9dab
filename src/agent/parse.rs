//! Reading model output: patterns, refine decisions, QA verdicts.
//!
//! Small models wrap JSON in prose and code fences, leave trailing commas, use Python quotes and
//! write ids every which way; reasoning models prepend `<think>` blocks. The parser strips the
//! thinking, finds every balanced `{…}` / `[…]` span, parses it with serde_json (after a small
//! repair pass if needed) and uses the last span of the expected shape, because models that echo
//! the format example before answering put the answer last.

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::trajectory::NoneReason;
use super::TaskType;

/// Most patterns one call may contribute; a degenerate output cannot flood the ranking.
pub const MAX_PATTERNS: usize = 64;

/// Removes `<think>…</think>` blocks. An unclosed `<think>` drops the rest (the model never got to
/// an answer); a stray `</think>` drops everything before it (templates that open the block in the
/// prompt).
pub fn strip_thinking(text: &str) -> String {
    let mut rest = text;
    if let Some(end) = rest.find("</think>") {
        if !rest[..end].contains("<think>") {
            rest = &rest[end + "</think>".len()..];
        }
    }
    let mut out = String::with_capacity(rest.len());
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

/// Every top-level JSON value found in `text` (thinking already stripped), in order. Spans that
/// fail to parse even after repair are skipped, and their inner spans tried instead.
pub fn json_values(text: &str) -> Vec<Value> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if matches!(bytes[i], b'{' | b'[') {
            if let Some(end) = matching_close(bytes, i) {
                if let Some(value) = parse_lenient(&text[i..=end]) {
                    found.push(value);
                    i = end + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    found
}

/// Index of the bracket closing the one at `open`, honouring both quote styles.
fn matching_close(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for (offset, &b) in bytes[open..].iter().enumerate() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
            continue;
        }
        match b {
            b'"' | b'\'' => quote = Some(b),
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + offset);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_lenient(span: &str) -> Option<Value> {
    serde_json::from_str(span)
        .ok()
        .or_else(|| serde_json::from_str(&repair(span)).ok())
}

/// Single-quoted strings become double-quoted, trailing commas go, and backslashes that start no
/// JSON escape (regex escapes such as `\d`, written unescaped) become literal. Apostrophes inside
/// double-quoted strings are left alone.
fn repair(span: &str) -> String {
    let mut out = String::with_capacity(span.len() + 8);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let chars: Vec<char> = span.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                    out.push(c);
                } else if c == '\\' {
                    match chars.get(i + 1) {
                        // `\'` is no JSON escape; a bare `'` is fine inside a `"` string.
                        Some('\'') => escaped = true,
                        Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u') => {
                            escaped = true;
                            out.push(c);
                        }
                        // A regex escape such as `\d` or `\.`: keep it as a literal backslash.
                        _ => out.push_str("\\\\"),
                    }
                } else if c == q {
                    quote = None;
                    out.push('"');
                } else if c == '"' && q == '\'' {
                    out.push_str("\\\"");
                } else {
                    out.push(c);
                }
            }
            None => match c {
                '"' | '\'' => {
                    quote = Some(c);
                    out.push('"');
                }
                ',' => {
                    let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                    if !matches!(next, Some(']' | '}')) {
                        out.push(c);
                    }
                }
                _ => out.push(c),
            },
        }
    }
    out
}

/// Patterns from a pattern-generation or regenerate output: a JSON list of strings, or an object
/// holding one under `patterns`. Blank and repeated patterns are dropped; `None` when nothing usable.
pub fn parse_patterns(text: &str) -> Option<Vec<String>> {
    let stripped = strip_thinking(text);
    json_values(&stripped)
        .iter()
        .rev()
        .find_map(|value| match value {
            Value::Array(_) => pattern_list(value),
            Value::Object(map) => map.get("patterns").and_then(pattern_list),
            _ => None,
        })
}

fn pattern_list(value: &Value) -> Option<Vec<String>> {
    let items = match value {
        Value::Array(items) => items.as_slice(),
        Value::String(_) => std::slice::from_ref(value),
        _ => return None,
    };
    let mut patterns: Vec<String> = Vec::new();
    for item in items {
        let text = match item {
            // JSON reads `\b` as a backspace; in a pattern it can only have meant a word boundary.
            Value::String(s) => s.trim().replace('\u{8}', "\\b"),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        if !text.is_empty() && !patterns.contains(&text) && patterns.len() < MAX_PATTERNS {
            patterns.push(text);
        }
    }
    (!patterns.is_empty()).then_some(patterns)
}

/// What one refine output asks for, before the strategy and ablations are applied.
#[derive(Debug, Clone, PartialEq)]
pub enum RefineDecision {
    /// Shown-candidate positions, deduplicated, in the model's order, capped.
    Choose(Vec<usize>),
    Regenerate(Vec<String>),
    None(NoneReason),
}

/// A refine decision plus whether the output was machine-readable at all.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRefine {
    pub decision: RefineDecision,
    pub parsed: bool,
}

/// Reads a refine output for a round that showed `shown` candidates; chosen ids beyond `shown` or
/// not ids at all are ignored, and at most `cap` are kept.
pub fn parse_refine(text: &str, shown: usize, cap: usize) -> ParsedRefine {
    let stripped = strip_thinking(text);
    let values = json_values(&stripped);
    // Objects, also those a model wrapped in a list (`[{"action": ...}]`), last first.
    let decision = values
        .iter()
        .rev()
        .flat_map(|value| match value {
            Value::Array(items) => items.iter().rev().collect(),
            other => vec![other],
        })
        .filter_map(Value::as_object)
        .find_map(|map| refine_from_object(map, shown, cap));
    match decision {
        Some(decision) => ParsedRefine {
            decision,
            parsed: true,
        },
        None => ParsedRefine {
            decision: RefineDecision::None(NoneReason::Unparseable),
            parsed: false,
        },
    }
}

const SELECT_WORDS: [&str; 5] = ["select", "choose", "pick", "answer", "use"];
const RERANK_WORDS: [&str; 4] = ["rerank", "reorder", "rank", "order"];
const REGENERATE_WORDS: [&str; 5] = ["regenerate", "regen", "refine", "new_patterns", "search"];
const NONE_WORDS: [&str; 6] = ["none", "stop", "give_up", "giveup", "no_action", ""];
const ID_KEYS: [&str; 9] = [
    "tables",
    "ids",
    "table_ids",
    "table",
    "id",
    "selected",
    "order",
    "ranking",
    "candidates",
];

/// `None` when the object has no recognisable action (another JSON span may still have one).
fn refine_from_object(
    map: &serde_json::Map<String, Value>,
    shown: usize,
    cap: usize,
) -> Option<RefineDecision> {
    let action = map
        .get("action")
        .or_else(|| map.get("decision"))
        .map(|v| match v {
            Value::String(s) => s.trim().to_ascii_lowercase().replace([' ', '-'], "_"),
            Value::Null => String::new(),
            other => other.to_string(),
        });
    let ids_value = || ID_KEYS.iter().find_map(|k| map.get(*k));
    let choose = |value: Option<&Value>| {
        let ids = shown_ids(value?, shown, cap);
        Some(if ids.is_empty() {
            RefineDecision::None(NoneReason::InvalidIds)
        } else {
            RefineDecision::Choose(ids)
        })
    };
    let regenerate = |value: Option<&Value>| {
        Some(match value.and_then(pattern_list) {
            Some(patterns) => RefineDecision::Regenerate(patterns),
            None => RefineDecision::None(NoneReason::EmptyPatterns),
        })
    };
    match action.as_deref() {
        Some(a) if SELECT_WORDS.contains(&a) || RERANK_WORDS.contains(&a) => {
            let value = ids_value().or_else(|| map.get(a));
            choose(value).or(Some(RefineDecision::None(NoneReason::InvalidIds)))
        }
        Some(a) if REGENERATE_WORDS.contains(&a) => {
            regenerate(map.get("patterns").or_else(|| map.get(a)))
        }
        Some(a) if NONE_WORDS.contains(&a) => Some(RefineDecision::None(NoneReason::Declined)),
        Some(_) => None,
        // No action key: the shape says what is meant ({"select": [...]}, {"patterns": [...]}).
        None => {
            if let Some(value) = SELECT_WORDS
                .iter()
                .chain(RERANK_WORDS.iter())
                .find_map(|k| map.get(*k))
            {
                return choose(Some(value));
            }
            if let Some(value) = REGENERATE_WORDS.iter().find_map(|k| map.get(*k)) {
                return regenerate(Some(value));
            }
            if let Some(value) = map.get("patterns") {
                return regenerate(Some(value));
            }
            ids_value().and_then(|value| choose(Some(value)))
        }
    }
}

/// Valid candidate positions from an id list (or a single id), deduplicated, at most `cap`.
fn shown_ids(value: &Value, shown: usize, cap: usize) -> Vec<usize> {
    let items = match value {
        Value::Array(items) => items.as_slice(),
        other => std::slice::from_ref(other),
    };
    let mut ids = Vec::new();
    for item in items {
        if ids.len() == cap {
            break;
        }
        if let Some(id) = shown_id(item).filter(|&id| id < shown) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// Reads `T3`, `t3`, `Table_3`, `table 3`, `#3`, `3` or the number 3 as position 3.
pub fn shown_id(value: &Value) -> Option<usize> {
    match value {
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => {
            let lower = s.trim().to_ascii_lowercase();
            let rest = lower
                .strip_prefix("table")
                .or_else(|| lower.strip_prefix('t'))
                .unwrap_or(&lower);
            let digits = rest.trim_start_matches([' ', '_', '-', '#', ':']);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        }
        _ => None,
    }
}

/// Which QA prompt produced the output: TableSeek's offers an "insufficient" way out, the
/// baseline's (dense / rerank pipelines) does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QaVariant {
    #[default]
    TableSeek,
    Baseline,
}

/// What a QA call concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A free-form answer (tableqa).
    Answered,
    /// The tables lack the evidence (tableqa).
    Insufficient,
    Supported,
    Refuted,
    /// The claim cannot be checked against these tables (fact verification).
    Unverifiable,
}

impl Verdict {
    /// False when the model said the evidence is missing: the loop then tries fallback tables.
    pub fn is_satisfactory(self) -> bool {
        !matches!(self, Verdict::Insufficient | Verdict::Unverifiable)
    }
}

/// A QA call's answer and verdict. For fact verification `answer` is the normalized label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QaOutcome {
    pub answer: String,
    pub verdict: Verdict,
    /// Whether an explicit answer (JSON field or `Answer:` line) was found.
    pub parsed: bool,
}

/// Reads a QA output: a JSON `answer` / `label` / `verdict` field, else the last `Answer:` line,
/// else the last non-empty line.
pub fn parse_qa(text: &str, task: TaskType, variant: QaVariant) -> QaOutcome {
    let stripped = strip_thinking(text);
    let (raw, parsed) = match explicit_answer(&stripped) {
        Some(answer) => (answer, true),
        None => (
            stripped
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string(),
            false,
        ),
    };
    let answer = clean_answer(&raw);
    match task {
        TaskType::Tableqa => {
            let verdict = if variant == QaVariant::TableSeek
                && (answer.is_empty() || is_insufficient(&answer))
            {
                Verdict::Insufficient
            } else {
                Verdict::Answered
            };
            QaOutcome {
                answer,
                verdict,
                parsed,
            }
        }
        TaskType::FactVerification => {
            let label = fact_label(&answer).unwrap_or(Verdict::Unverifiable);
            let verdict = match (variant, label) {
                (QaVariant::Baseline, Verdict::Unverifiable) => Verdict::Refuted,
                (_, label) => label,
            };
            QaOutcome {
                answer: fact_answer(verdict).to_string(),
                verdict,
                parsed,
            }
        }
    }
}

/// The label string a fact verdict is reported as.
pub fn fact_answer(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Supported => "supported",
        Verdict::Refuted => "refuted",
        _ => "cannot_verify",
    }
}

/// `Answer: x`, `**Final answer:** x`, `The answer is: x`, `Verdict: x`, anywhere in a line.
fn answer_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)(?:^|[\s*#>_-])(?:final\s+)?(?:answer|verdict|label)(?:\s+is)?\s*\**\s*[:：]\s*(.*)$")
            .expect("constant regex")
    })
}

/// The requested `Answer:` line (the last one; its value may sit on the next line), else a JSON
/// `answer` / `label` / `verdict` field.
fn explicit_answer(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let from_line = lines.iter().enumerate().rev().find_map(|(i, line)| {
        let value = answer_line().captures(line)?.get(1)?.as_str();
        let value = value.trim().trim_matches('*').trim();
        if !value.is_empty() {
            return Some(value.to_string());
        }
        Some(
            lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string(),
        )
    });
    from_line.or_else(|| {
        json_values(text).iter().rev().find_map(|value| {
            let map = value.as_object()?;
            let field = ["answer", "label", "verdict", "final_answer"]
                .iter()
                .find_map(|k| map.get(*k))?;
            Some(match field {
                Value::String(s) => s.clone(),
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                Value::Null => String::new(),
                other => other.to_string(),
            })
        })
    })
}

fn clean_answer(raw: &str) -> String {
    let trimmed = raw.trim().trim_matches(['*', '`']).trim();
    let unquoted = trimmed
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(trimmed);
    unquoted.trim().trim_end_matches('.').trim().to_string()
}

/// Lower-case words separated by single spaces, padded, for whole-word phrase search.
fn words(text: &str) -> String {
    let mut out = String::from(" ");
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        out.push_str(word);
        out.push(' ');
    }
    out
}

fn has_phrase(padded: &str, phrases: &[&str]) -> bool {
    phrases.iter().any(|p| padded.contains(&format!(" {p} ")))
}

const INSUFFICIENT_PHRASES: [&str; 20] = [
    "not enough information",
    "not enough evidence",
    "not enough data",
    "no information",
    "no relevant",
    "cannot be answered",
    "can not be answered",
    "can t be answered",
    "cannot answer",
    "unable to answer",
    "cannot be determined",
    "cannot determine",
    "unanswerable",
    "not answerable",
    "does not contain",
    "doesn t contain",
    "do not contain",
    "not present",
    "not mentioned",
    "not provided",
];

/// Does a tableqa answer say the evidence is missing? The word "insufficient" always counts; the
/// looser phrases only in short answers, where they cannot be part of a real answer's wording.
pub fn is_insufficient(answer: &str) -> bool {
    let padded = words(answer);
    if has_phrase(&padded, &["insufficient", "insufficient evidence"]) {
        return true;
    }
    let word_count = padded.split_whitespace().count();
    word_count <= 25 && has_phrase(&padded, &INSUFFICIENT_PHRASES)
}

/// Normalizes a fact-verification label. "Cannot verify" wins over the others because its
/// phrasings contain them ("not supported by this table" is unverifiable only if said so).
pub fn fact_label(text: &str) -> Option<Verdict> {
    let padded = words(&text.replace('_', " "));
    if has_phrase(
        &padded,
        &[
            "cannot verify",
            "can not verify",
            "can t verify",
            "cannot be verified",
            "can t be verified",
            "not verifiable",
            "unverifiable",
            "insufficient",
            "not enough",
            "unknown",
            "cannot determine",
            "cannot be determined",
            "no information",
        ],
    ) {
        return Some(Verdict::Unverifiable);
    }
    if has_phrase(
        &padded,
        &[
            "refuted",
            "refute",
            "refutes",
            "false",
            "not supported",
            "unsupported",
            "not true",
            "contradicted",
            "incorrect",
        ],
    ) {
        return Some(Verdict::Refuted);
    }
    if has_phrase(
        &padded,
        &[
            "supported",
            "support",
            "supports",
            "true",
            "entailed",
            "correct",
        ],
    ) {
        return Some(Verdict::Supported);
    }
    // A bare yes/no counts only as the first word: elsewhere it is too common to mean the label.
    match padded.split_whitespace().next() {
        Some("yes") => Some(Verdict::Supported),
        Some("no") => Some(Verdict::Refuted),
        _ => None,
    }
}
