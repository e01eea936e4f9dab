//! TaS's prompts, output grammars and parsers: the schema call (constraints with grep patterns),
//! the expansion call (new pattern sets), the per-row verification call (one verdict and its
//! evidence per pending constraint) and the planner's choice (`--tas-planner llm`). QA is
//! TableSeek's own prompt, with the insufficiency option.
//!
//! Like every prompt of the project, tables appear only as rendered text under `T<row>`.

use std::fmt::Write;

use serde_json::{json, Value};

use super::super::parse::{json_values, parse_patterns};
use super::super::prompts::{task_prefix, ShownTable};
use super::super::schemas::{MAX_PATTERN_CHARS, PATTERN_REGEX};
use super::super::{ChatMessage, TaskType};
use super::state::{CellStatus, StateRow};
use crate::engine::Grammar;

/// Longest constraint description or evidence quote a constrained call writes, in characters.
pub const MAX_CHECK_CHARS: usize = 100;
/// Most patterns per constraint.
pub const MAX_CONSTRAINT_PATTERNS: usize = 4;

/// One constraint column: what to check and the patterns that search for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Constraint {
    pub check: String,
    pub patterns: Vec<String>,
}

fn subject(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => "question",
        TaskType::FactVerification => "claim",
    }
}

/// The system message every TaS call shares (a prefix cache keeps it for the whole run).
pub fn system(task: TaskType) -> String {
    let subject = subject(task);
    format!(
        "You search a large collection of tables for the one that holds the evidence for a \
{subject}. The search state is a table: one row per candidate table, one column per condition \
the evidence table must meet. Tables are shown only through their content and temporary ids \
(T0, T1, ...); file names and titles are never shown. Reply in exactly the JSON format each \
step asks for."
    )
}

fn messages(task: TaskType, user: String) -> Vec<ChatMessage> {
    vec![ChatMessage::system(system(task)), ChatMessage::user(user)]
}

/// Step 1: the schema, as conditions with patterns. The format is described, not shown: small
/// models copy a shown example's condition verbatim (Qwen2.5-Coder-0.5B wrote the example "has
/// a column for the year" for a claim about a soccer club).
pub fn schema(task: TaskType, query: &str, max_constraints: usize) -> Vec<ChatMessage> {
    let subject = subject(task);
    messages(
        task,
        format!(
            "{}Step: plan the search.\nList the conditions (1 to {max_constraints}) that a table \
holding the evidence for the {subject} must meet: an entity or value it must contain, a column it \
must have, a range its values fall in. For each, give a short description and 1 to \
{MAX_CONSTRAINT_PATTERNS} grep patterns (case-insensitive regular expressions: words, names, \
values or column names as the table would store them, taken from the {subject}).\nReply with JSON \
only: an object whose key \"constraints\" holds a list of objects, each with \"check\" (the \
condition, in words) and \"patterns\" (a list of strings).",
            task_prefix(task, query)
        ),
    )
}

fn state_block(constraints: &[Constraint], rows: &[StateRow]) -> String {
    let mut text = String::from("Conditions:\n");
    for (i, c) in constraints.iter().enumerate() {
        let _ = writeln!(text, "{}. {}", i + 1, c.check);
    }
    text.push_str("\nCandidate tables so far:\n");
    if rows.is_empty() {
        text.push_str("(none)\n");
    }
    for row in rows {
        let cells: Vec<String> = row
            .cells
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{}: {}", i + 1, cell.status.as_str()))
            .collect();
        let _ = writeln!(text, "T{}: {}", row.row, cells.join(", "));
    }
    text
}

/// Row expansion: `searches` new pattern lists, different from the ones that found the rows.
pub fn expand(
    task: TaskType,
    query: &str,
    constraints: &[Constraint],
    rows: &[StateRow],
    used: &[Vec<String>],
    searches: usize,
) -> Vec<ChatMessage> {
    let mut text = task_prefix(task, query);
    text.push_str("Step: find more candidates.\n");
    text.push_str(&state_block(constraints, rows));
    text.push_str("\nSearches already run:\n");
    for patterns in used {
        let _ = writeln!(text, "{}", json!(patterns));
    }
    let _ = write!(
        text,
        "\nNo candidate meets every condition. Write {searches} new searches, each a list of grep \
patterns, different from each other and from the searches above, to find other tables that could \
hold the evidence.\nReply with JSON only: {{\"searches\": [[\"pattern\", \"pattern\"], \
[\"pattern\"]]}}"
    );
    messages(task, text)
}

/// Cell population: the row's pending conditions and its table's preview.
pub fn verify(
    task: TaskType,
    query: &str,
    constraints: &[Constraint],
    pending: &[usize],
    table: &ShownTable,
) -> Vec<ChatMessage> {
    let mut text = task_prefix(task, query);
    let _ = writeln!(text, "Step: check table {}.", table.id);
    text.push_str("Conditions to check:\n");
    for &c in pending {
        let _ = writeln!(text, "{}. {}", c + 1, constraints[c].check);
    }
    let _ = write!(
        text,
        "\n### {} (its first rows and the rows matching the conditions)\n{}\n\nFor each \
condition, answer yes if the table clearly meets it, no if it does not, n/a if it cannot apply to \
a table, and quote the cells or column names that show it as evidence.\nReply with JSON only, \
one entry per condition number: {{\"checks\": {{{}}}}}",
        table.id,
        table.text.trim_end(),
        pending
            .iter()
            .map(|c| format!(
                "\"{}\": {{\"verdict\": \"yes, no or n/a\", \"evidence\": \"...\"}}",
                c + 1
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    messages(task, text)
}

/// The planner's choice (`--tas-planner llm`).
pub fn plan(
    task: TaskType,
    query: &str,
    constraints: &[Constraint],
    rows: &[StateRow],
    pending_ids: &[String],
) -> Vec<ChatMessage> {
    let mut text = task_prefix(task, query);
    text.push_str("Step: choose the next action.\n");
    text.push_str(&state_block(constraints, rows));
    let _ = write!(
        text,
        "\nChoose one: check a table with pending conditions ({}), search for more candidates, \
or answer now from the best row.\nReply with JSON only: {{\"action\": \"check\", \"table\": \
\"T0\"}} or {{\"action\": \"search\"}} or {{\"action\": \"answer\"}}",
        if pending_ids.is_empty() {
            "none left".to_string()
        } else {
            pending_ids.join(", ")
        }
    );
    messages(task, text)
}

fn pattern_list(max: usize) -> Value {
    json!({
        "type": "array",
        "items": {"type": "string", "pattern": PATTERN_REGEX, "maxLength": MAX_PATTERN_CHARS},
        "minItems": 1,
        "maxItems": max,
    })
}

pub fn schema_grammar(max_constraints: usize) -> Grammar {
    Grammar::JsonSchema(json!({
        "type": "object",
        "properties": {"constraints": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "check": {"type": "string", "minLength": 3, "maxLength": MAX_CHECK_CHARS},
                    "patterns": pattern_list(MAX_CONSTRAINT_PATTERNS),
                },
                "required": ["check", "patterns"],
                "additionalProperties": false,
            },
            "minItems": 1,
            "maxItems": max_constraints.max(1),
        }},
        "required": ["constraints"],
        "additionalProperties": false,
    }))
}

pub fn expand_grammar(searches: usize) -> Grammar {
    Grammar::JsonSchema(json!({
        "type": "object",
        "properties": {"searches": {
            "type": "array",
            "items": pattern_list(8),
            "minItems": 1,
            "maxItems": searches.max(1),
        }},
        "required": ["searches"],
        "additionalProperties": false,
    }))
}

pub fn verify_grammar(pending: &[usize]) -> Grammar {
    // One required entry per pending condition, keyed by its number: with a list of at least one
    // item, Qwen2.5-Coder-0.5B checked the first condition and closed the list every time.
    let cell = json!({
        "type": "object",
        "properties": {
            "verdict": {"enum": ["yes", "no", "n/a"]},
            "evidence": {"type": "string", "maxLength": MAX_CHECK_CHARS},
        },
        "required": ["verdict", "evidence"],
        "additionalProperties": false,
    });
    let keys: Vec<String> = pending.iter().map(|c| (c + 1).to_string()).collect();
    let properties: serde_json::Map<String, Value> =
        keys.iter().map(|k| (k.clone(), cell.clone())).collect();
    Grammar::JsonSchema(json!({
        "type": "object",
        "properties": {"checks": {
            "type": "object",
            "properties": properties,
            "required": keys,
            "additionalProperties": false,
        }},
        "required": ["checks"],
        "additionalProperties": false,
    }))
}

pub fn plan_grammar(pending_ids: &[String]) -> Grammar {
    let mut choices = vec![
        json!({"type": "object", "properties": {"action": {"const": "search"}},
               "required": ["action"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"action": {"const": "answer"}},
               "required": ["action"], "additionalProperties": false}),
    ];
    if !pending_ids.is_empty() {
        choices.insert(
            0,
            json!({"type": "object",
                   "properties": {"action": {"const": "check"}, "table": {"enum": pending_ids}},
                   "required": ["action", "table"], "additionalProperties": false}),
        );
    }
    Grammar::JsonSchema(json!({ "anyOf": choices }))
}

/// The last JSON object in `text` with `key`.
fn last_with(text: &str, key: &str) -> Option<Value> {
    json_values(text)
        .into_iter()
        .rev()
        .find_map(|v| v.get(key).cloned())
}

/// Reads the schema: up to `max` constraints with a non-empty check and usable patterns.
pub fn parse_schema(text: &str, max: usize) -> Option<Vec<Constraint>> {
    let list = last_with(text, "constraints")?;
    let mut constraints: Vec<Constraint> = Vec::new();
    for item in list.as_array()? {
        let Some(check) = item.get("check").and_then(Value::as_str) else {
            continue;
        };
        let check = check.trim();
        let patterns = item
            .get("patterns")
            .and_then(|p| parse_patterns(&p.to_string()))
            .unwrap_or_default();
        if check.is_empty() || patterns.is_empty() || constraints.iter().any(|c| c.check == check) {
            continue;
        }
        let patterns = patterns.into_iter().take(MAX_CONSTRAINT_PATTERNS).collect();
        constraints.push(Constraint {
            check: check.chars().take(MAX_CHECK_CHARS).collect(),
            patterns,
        });
        if constraints.len() == max {
            break;
        }
    }
    (!constraints.is_empty()).then_some(constraints)
}

/// Reads the expansion's pattern lists (empty lists dropped, at most `max`).
pub fn parse_searches(text: &str, max: usize) -> Option<Vec<Vec<String>>> {
    let list = last_with(text, "searches")?;
    let searches: Vec<Vec<String>> = list
        .as_array()?
        .iter()
        .filter_map(|s| parse_patterns(&s.to_string()))
        .take(max)
        .collect();
    (!searches.is_empty()).then_some(searches)
}

/// One verdict read from a verification call: the constraint's index and its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub constraint: usize,
    pub status: CellStatus,
    pub evidence: String,
}

/// Reads the checks of `pending` constraints; ids outside them, repeats and checks without
/// evidence are dropped (their cells stay pending). `None`: no `checks` list at all.
pub fn parse_checks(text: &str, pending: &[usize]) -> Option<Vec<Check>> {
    let checks_value = last_with(text, "checks")?;
    // Either `{"1": {...}, ...}` (what the prompt and grammar ask for) or `[{"id": 1, ...}]`.
    let items: Vec<(Option<u64>, &Value)> = match &checks_value {
        Value::Object(map) => map
            .iter()
            .map(|(key, item)| (key.trim().parse().ok(), item))
            .collect(),
        Value::Array(list) => list
            .iter()
            .map(|item| {
                let id = item.get("id").and_then(|v| {
                    v.as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                });
                (id, item)
            })
            .collect(),
        _ => return None,
    };
    let mut checks: Vec<Check> = Vec::new();
    for (id, item) in items {
        let Some(constraint) = id.and_then(|id| usize::try_from(id).ok()?.checked_sub(1)) else {
            continue;
        };
        let status = match item
            .get("verdict")
            .and_then(Value::as_str)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("yes") => CellStatus::Yes,
            Some("no") => CellStatus::No,
            Some("n/a" | "na") => CellStatus::NotApplicable,
            _ => continue,
        };
        let evidence = item
            .get("evidence")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_string();
        if !pending.contains(&constraint)
            || evidence.is_empty()
            || checks.iter().any(|c| c.constraint == constraint)
        {
            continue;
        }
        checks.push(Check {
            constraint,
            status,
            evidence,
        });
    }
    checks.sort_by_key(|c| c.constraint);
    Some(checks)
}

/// The planner's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanChoice {
    Check(usize),
    Search,
    Answer,
}

/// Reads the planner's action; a `check` must name a row in `pending_rows`.
pub fn parse_plan(text: &str, pending_rows: &[usize]) -> Option<PlanChoice> {
    let value = json_values(text)
        .into_iter()
        .rev()
        .find(|v| v.get("action").is_some())?;
    match value.get("action")?.as_str()?.trim() {
        "search" => Some(PlanChoice::Search),
        "answer" => Some(PlanChoice::Answer),
        "check" => {
            let id = value.get("table")?.as_str()?.trim();
            let row: usize = id.strip_prefix('T')?.parse().ok()?;
            pending_rows
                .contains(&row)
                .then_some(PlanChoice::Check(row))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_output_is_read_with_bounds() {
        let text = r#"{"constraints": [{"check": "has singer names", "patterns": ["singer", "name"]},
            {"check": "has singer names", "patterns": ["x1"]},
            {"check": "  ", "patterns": ["ab"]},
            {"check": "country column", "patterns": []},
            {"check": "year 2020", "patterns": ["2020"]}]}"#;
        let constraints = parse_schema(text, 5).unwrap();
        assert_eq!(constraints.len(), 2);
        assert_eq!(constraints[0].patterns, ["singer", "name"]);
        assert_eq!(constraints[1].check, "year 2020");
        assert_eq!(parse_schema(text, 1).unwrap().len(), 1);
        assert!(parse_schema("no json", 5).is_none());
        assert!(parse_schema(r#"{"constraints": []}"#, 5).is_none());
    }

    #[test]
    fn checks_keep_only_pending_ids_with_evidence() {
        let text = r#"{"checks": [{"id": 1, "verdict": "yes", "evidence": "Paris | 2148000"},
            {"id": 2, "verdict": "no", "evidence": ""},
            {"id": 3, "verdict": "maybe", "evidence": "x"},
            {"id": 4, "verdict": "N/A", "evidence": "no year column"},
            {"id": 1, "verdict": "no", "evidence": "repeat"},
            {"id": 9, "verdict": "yes", "evidence": "not pending"}]}"#;
        let checks = parse_checks(text, &[0, 1, 2, 3]).unwrap();
        assert_eq!(
            checks,
            [
                Check {
                    constraint: 0,
                    status: CellStatus::Yes,
                    evidence: "Paris | 2148000".into()
                },
                Check {
                    constraint: 3,
                    status: CellStatus::NotApplicable,
                    evidence: "no year column".into()
                },
            ]
        );
        assert!(parse_checks("garbage", &[0]).is_none());
        let keyed = r#"{"checks": {"2": {"verdict": "no", "evidence": "only 2019"},
            "1": {"verdict": "yes", "evidence": "Paris"}, "7": {"verdict": "yes", "evidence": "x"}}}"#;
        let checks = parse_checks(keyed, &[0, 1]).unwrap();
        assert_eq!(
            checks
                .iter()
                .map(|c| (c.constraint, c.status))
                .collect::<Vec<_>>(),
            [(0, CellStatus::Yes), (1, CellStatus::No)]
        );
    }

    #[test]
    fn plans_and_searches_are_read() {
        assert_eq!(
            parse_plan(r#"{"action": "check", "table": "T2"}"#, &[2]),
            Some(PlanChoice::Check(2))
        );
        assert_eq!(
            parse_plan(r#"{"action": "check", "table": "T1"}"#, &[2]),
            None
        );
        assert_eq!(
            parse_plan(r#"{"action": "search"}"#, &[]),
            Some(PlanChoice::Search)
        );
        let searches = parse_searches(r#"{"searches": [["a1", "b2"], [], ["c3"]]}"#, 2).unwrap();
        assert_eq!(searches, [vec!["a1", "b2"], vec!["c3"]]);
    }
}
