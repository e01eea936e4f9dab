//! TableRAG's three prompts (decompose, NL2SQL, compose), the decompose grammar and the parser
//! of its replies. Wording follows the guidance `../shared/method/tablerag.md` restates from the
//! paper's released code; the JSON reply replaces the paper's tool call so a small model can be
//! held to it by structured decoding.

use serde_json::{json, Value};

use super::super::parse::{json_values, Verdict};
use super::super::TaskType;
use crate::corpus::Table;
use crate::engine::Grammar;
use crate::sql::{ColumnType, RelationSchema};

/// Longest sub-question or free answer a constrained decompose call can write, in characters
/// (Qwen2.5-Coder-0.5B otherwise fills a sub-question with its plan and SQL).
pub const MAX_DECOMPOSE_CHARS: usize = 160;
/// A token carries at least one character, so this many tokens always close the JSON object.
pub const DECOMPOSE_TOKENS: usize = MAX_DECOMPOSE_CHARS + 32;
/// A sub-question is a question in words: Qwen2.5-Coder otherwise writes its SQL here, over the
/// header words of the table it was shown, and NL2SQL copies it (5 of 5 Spider TCR questions in a
/// first run, none of whose queries ran).
/// Characters SQL needs and a question in words does not (`=`, `(`, `*`, `;`, `_`) are left out.
pub const SUBQUERY_REGEX: &str = "^(What|Which|Who|Whose|How|When|Where|Is|Are|Was|Were|Does|Do|Did|Has|Have|List|Find|Show|Give|Count|Name) [^?=(*;_]*\\?$";
/// Sample values per column in a schema, and their longest length (the paper's code).
const SAMPLES: usize = 3;
const SAMPLE_CHARS: usize = 64;

pub fn decompose_system(task: TaskType) -> String {
    let (goal, answer) = match task {
        TaskType::Tableqa => (
            "You answer questions over a collection of tables.",
            "{\"answer\": \"...\"} gives the final answer: only the value or values asked for, \
             in words or numbers, no sentence.",
        ),
        TaskType::FactVerification => (
            "You check claims against a collection of tables.",
            "{\"answer\": \"SUPPORTED\"} or {\"answer\": \"REFUTED\"} gives your verdict on the \
             claim.",
        ),
    };
    format!(
        "{goal} You cannot read the collection; a tool can. Reply with exactly one JSON object:\n\
         - {{\"subquery\": \"...\"}} asks the tool one sub-question in plain words (not SQL: the \
         tool finds the relevant tables, writes and runs the SQL itself, and replies with the \
         answer).\n\
         - {answer}\n\
         Think step by step. If the table shown suffices, send the whole question as the single \
         sub-question. Ask one sub-question at a time. Write terms out in full, no abbreviations. \
         Your first reply must be a sub-question."
    )
}

/// The first user message: the top retrieved table (whole, as QA reads it) and the question.
pub fn decompose_user(task: TaskType, seed: Option<(&str, &str)>, query: &str) -> String {
    let table = match seed {
        Some((id, text)) => {
            format!("A table that may be relevant ({id}; it may be incomplete):\n{text}\n\n")
        }
        None => String::new(),
    };
    let label = match task {
        TaskType::Tableqa => "Question",
        TaskType::FactVerification => "Claim",
    };
    format!("{table}{label}: {query}")
}

/// The tool's reply to a sub-question, as the next decompose turn reads it.
pub fn subquery_result(answer: &str) -> String {
    format!("Tool answer: {answer}")
}

/// After a reply that was neither a sub-question nor an answer (the paper's code spends the
/// iteration on such a reply and says so).
pub fn format_note(first: bool) -> String {
    if first {
        "Reply with {\"subquery\": \"...\"} first: the tool has not been asked anything yet.".into()
    } else {
        "Reply with one JSON object: {\"subquery\": \"...\"} or {\"answer\": \"...\"}.".into()
    }
}

/// After the iteration budget, when `--tablerag-force-answer` asks for one last answer.
pub const FORCE_ANSWER: &str = "No more sub-questions. Give the final answer now.";

fn string(max: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max})
}

fn object(key: &str, value: Value) -> Value {
    json!({
        "type": "object",
        "properties": {key: value},
        "required": [key],
        "additionalProperties": false,
    })
}

fn answer_value(task: TaskType) -> Value {
    match task {
        TaskType::Tableqa => string(MAX_DECOMPOSE_CHARS),
        TaskType::FactVerification => json!({"enum": ["SUPPORTED", "REFUTED"]}),
    }
}

/// What a decompose call may write: a sub-question, and after the first turn also an answer
/// (only an answer when `answer_only`).
pub fn decompose_grammar(task: TaskType, allow_answer: bool, answer_only: bool) -> Grammar {
    let mut question = string(MAX_DECOMPOSE_CHARS);
    question["pattern"] = json!(SUBQUERY_REGEX);
    let subquery = object("subquery", question);
    let answer = object("answer", answer_value(task));
    Grammar::JsonSchema(match (allow_answer, answer_only) {
        (_, true) => answer,
        (true, false) => json!({"anyOf": [subquery, answer]}),
        (false, false) => subquery,
    })
}

/// A decompose reply, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    SubQuery(String),
    Answer {
        answer: String,
        verdict: Verdict,
    },
    /// Neither shape was found.
    Unreadable,
}

/// Reads the first JSON object with a non-empty `subquery` or `answer` string; a fact-verification
/// answer must name a label.
pub fn parse_decision(text: &str, task: TaskType) -> Decision {
    for value in json_values(text) {
        let field = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        if let Some(subquery) = field("subquery") {
            return Decision::SubQuery(subquery);
        }
        if let Some(answer) = field("answer") {
            let verdict = match task {
                TaskType::Tableqa => Verdict::Answered,
                TaskType::FactVerification => {
                    let upper = answer.to_ascii_uppercase();
                    if upper.contains("REFUTED") {
                        Verdict::Refuted
                    } else if upper.contains("SUPPORTED") {
                        Verdict::Supported
                    } else {
                        continue;
                    }
                }
            };
            let answer = match verdict {
                Verdict::Supported => "supported".to_string(),
                Verdict::Refuted => "refuted".to_string(),
                _ => answer,
            };
            return Decision::Answer { answer, verdict };
        }
    }
    Decision::Unreadable
}

fn type_name(kind: ColumnType) -> &'static str {
    match kind {
        ColumnType::Integer => "INTEGER",
        ColumnType::Real => "REAL",
        ColumnType::Text => "TEXT",
        ColumnType::Mixed => "ANY",
    }
}

/// The paper's schema description, one JSON object per relation: `{table_name, column_list}`,
/// each column `[name, type, up to 3 sample values]` (first distinct non-empty values in row
/// order, so the prompt is deterministic; the paper drew them at random). Lossy number columns
/// list their `_text` companion as a TEXT column.
pub fn schema_json(relation: &RelationSchema, table: &Table) -> Value {
    let mut columns = Vec::new();
    for (c, column) in relation.columns.iter().enumerate() {
        let mut samples: Vec<&str> = Vec::new();
        for row in &table.rows {
            let Some(cell) = row.get(c).map(|s| s.trim()) else {
                continue;
            };
            if !cell.is_empty() && cell.chars().count() < SAMPLE_CHARS && !samples.contains(&cell) {
                samples.push(cell);
                if samples.len() == SAMPLES {
                    break;
                }
            }
        }
        columns.push(json!([column.name, type_name(column.kind), samples]));
        if let Some(text) = &column.text_column {
            columns.push(json!([text, "TEXT", samples]));
        }
    }
    json!({"table_name": relation.name, "column_list": columns})
}

/// `tables`: the SQL names of the relations in `schemas`.
pub fn nl2sql(schemas: &str, tables: &[String], subquery: &str) -> String {
    format!(
        "SQLite tables (JSON: the table name, then each column as [name, type, sample values]):\n\
         {schemas}\n\n\
         Write one SQLite query that answers: {subquery}\n\
         The only tables are {}; use only their columns, with column names in double quotes. \
         Return only the SQL in a ```sql block.",
        tables.join(", ")
    )
}

/// What compose reads about the SQL step.
pub struct SqlEvidence<'a> {
    pub tables: &'a [String],
    pub sql: Option<&'a str>,
    /// The rendered result or the error message.
    pub result: &'a str,
}

pub fn compose(subquery: &str, excerpts: &[(String, &str)], sql: Option<&SqlEvidence>) -> String {
    let mut text = format!("Sub-question: {subquery}\n\n");
    if excerpts.is_empty() {
        text.push_str("No table excerpts were found.\n\n");
    } else {
        text.push_str("Table excerpts found for it (they may be partial):\n");
        for (id, excerpt) in excerpts {
            text.push_str(&format!("[{id}]\n{excerpt}\n\n"));
        }
    }
    match sql {
        Some(evidence) => {
            text.push_str(&format!(
                "SQL over the tables {}:\n{}\nResult: {}\n\n",
                evidence.tables.join(", "),
                evidence.sql.unwrap_or("(no query was written)"),
                evidence.result
            ));
        }
        None => text.push_str("No SQL ran: no table was found for it.\n\n"),
    }
    text.push_str(
        "Rules: if the SQL result and the excerpts agree, answer from them; if the SQL failed or \
         returned nothing, use the excerpts; if they conflict, weigh both.\n\
         Reply with the answer to the sub-question itself (the values it asks for) in one short \
         sentence.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_read_from_json_replies() {
        let task = TaskType::Tableqa;
        assert_eq!(
            parse_decision(r#"{"subquery": " How many singers? "}"#, task),
            Decision::SubQuery("How many singers?".into())
        );
        assert_eq!(
            parse_decision(r#"Sure. {"answer": "6"}"#, task),
            Decision::Answer {
                answer: "6".into(),
                verdict: Verdict::Answered
            }
        );
        assert_eq!(parse_decision("six", task), Decision::Unreadable);
        assert_eq!(
            parse_decision(r#"{"answer": ""}"#, task),
            Decision::Unreadable
        );
        let fact = TaskType::FactVerification;
        assert_eq!(
            parse_decision(r#"{"answer": "REFUTED"}"#, fact),
            Decision::Answer {
                answer: "refuted".into(),
                verdict: Verdict::Refuted
            }
        );
        assert_eq!(
            parse_decision(r#"{"answer": "maybe"}"#, fact),
            Decision::Unreadable
        );
    }
}
