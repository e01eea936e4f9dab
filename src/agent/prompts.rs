//! Every prompt the agent sends, in one place.
//!
//! Layout rule, for KV-cache prefix reuse: the system message is the same for every call of a run
//! (it depends on the task type only), the user message starts with the task prefix and the query,
//! then the step's fixed instructions, then the variable content (patterns, previews, tables).
//! Successive calls of one query therefore share at least system + task + query, and successive
//! refine calls share the instructions as well. With [`History::Full`](super::History) a refine
//! round appends to the previous round's conversation, so the whole earlier exchange is shared.
//!
//! Tables appear only as their rendered text under anonymous ids (`T0`..); nothing here takes a
//! table id or any storage metadata.

use std::fmt::Write;

use super::{ChatMessage, Strategy, TaskType};

/// A table as one prompt shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShownTable {
    /// The anonymous id, e.g. `T0`.
    pub id: String,
    pub text: String,
    /// The pattern score, shown in refine rounds only.
    pub score: Option<f64>,
}

/// The refine actions a run offers, fixed for the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefineOptions {
    pub task: TaskType,
    pub strategy: Strategy,
    pub allow_select: bool,
    pub allow_regenerate: bool,
}

const SYSTEM: &str =
    "You are a careful analyst who finds evidence in a large collection of tables \
and answers from it. The work goes in steps: writing search patterns, inspecting the tables they \
find, and answering. Tables are shown only through their content and short temporary ids (T0, T1, \
...) that hold for the current step alone; file names and titles are never shown, so judge a table \
by its columns and values. In every step, follow the requested output format exactly.";

/// The system message shared by every call of a run.
pub fn system(task: TaskType) -> String {
    let goal = match task {
        TaskType::Tableqa => {
            "The goal is to answer a question from the one table that holds the evidence."
        }
        TaskType::FactVerification => {
            "The goal is to verify a claim against the one table that holds the evidence."
        }
    };
    format!("{SYSTEM}\n{goal}")
}

/// The task prefix: what the user message of every call starts with.
pub fn task_prefix(task: TaskType, query: &str) -> String {
    match task {
        TaskType::Tableqa => format!("Question: {}\n\n", query.trim()),
        TaskType::FactVerification => format!("Claim: {}\n\n", query.trim()),
    }
}

fn subject(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => "question",
        TaskType::FactVerification => "claim",
    }
}

/// Step 1: ask for grep patterns.
pub fn pattern_generation(task: TaskType, query: &str) -> Vec<ChatMessage> {
    let subject = subject(task);
    let user = format!(
        "{prefix}Step: write search patterns.\n\
The collection will be searched with case-insensitive regular expressions, grep style, and each \
table is scored by the share of your patterns found in it. Write patterns that the table holding \
the evidence for this {subject} would contain:\n\
- the entities, attributes and values the {subject} mentions, and the column names such a table \
would likely use;\n\
- variants: abbreviations, singular and plural, naming conventions (snake_case, camelCase, spaced \
words) and the formats values may be stored in (dates, numbers, codes);\n\
- short, specific patterns, about 3 to 8 of them; several simple patterns beat one long one; \
skip words that every table contains.\n\
Reply with a JSON list of strings only, for example: [\"first pattern\", \"column_name\", \
\"value.*format\"]",
        prefix = task_prefix(task, query),
    );
    vec![ChatMessage::system(system(task)), ChatMessage::user(user)]
}

fn refine_instructions(options: &RefineOptions) -> String {
    let subject = subject(options.task);
    let mut text = String::from(
        "Step: inspect the candidates.\n\
Below are the current search patterns and previews of the best-ranked tables. Each preview shows \
the start of the table (header kept) and rows that match the patterns. Decide:\n",
    );
    if options.allow_select {
        match options.strategy {
            Strategy::Rerank { .. } => {
                let _ = writeln!(
                    text,
                    "- order the candidates from most to least likely to hold the evidence for \
the {subject}, listing every shown id; the first one will be used: \
{{\"action\": \"rerank\", \"order\": [\"T2\", \"T0\", \"T1\"]}}"
                );
            }
            Strategy::Select { m: 1, .. } => {
                let _ = writeln!(
                    text,
                    "- if a candidate holds the evidence for the {subject}, select it: \
{{\"action\": \"select\", \"tables\": [\"T1\"]}}"
                );
            }
            Strategy::Select { m, .. } => {
                let _ = writeln!(
                    text,
                    "- if candidates hold the evidence for the {subject}, select them, best first, \
at most {m}: {{\"action\": \"select\", \"tables\": [\"T1\", \"T3\"]}}"
                );
            }
        }
    }
    if options.allow_regenerate {
        let otherwise = if options.allow_select {
            "- otherwise"
        } else {
            "-"
        };
        let _ = writeln!(
            text,
            "{otherwise} write better patterns and search again: \
{{\"action\": \"regenerate\", \"patterns\": [\"...\", \"...\"]}}. Use what the previews \
reveal: the column names and the way values are written here; switch to distinctive values \
(ids, codes, names); loosen patterns that are too strict (e.g. actor.*id); drop patterns that \
match everywhere."
        );
    } else {
        let _ = writeln!(
            text,
            "- if no candidate holds the evidence: {{\"action\": \"none\"}}"
        );
    }
    if options.allow_select {
        text.push_str(
            "Beware of look-alike tables: a table on the right topic may still miss the exact \
entity, period or attribute needed.\n",
        );
    }
    if options.allow_regenerate {
        text.push_str("Do not give up while a better search is possible.\n");
    }
    text.push_str("Reply with one JSON object only.\n\n");
    text
}

fn patterns_json(patterns: &[String]) -> String {
    serde_json::to_string(patterns).unwrap_or_else(|_| "[]".to_string())
}

fn candidates_block(patterns: &[String], candidates: &[ShownTable]) -> String {
    let mut text = format!("Patterns: {}\n\n", patterns_json(patterns));
    if candidates.is_empty() {
        text.push_str("Candidates: none; no table matched these patterns.\n");
        return text;
    }
    text.push_str("Candidates:\n");
    for candidate in candidates {
        let _ = match candidate.score {
            Some(score) => writeln!(
                text,
                "### {} (share of patterns found: {score:.2})",
                candidate.id
            ),
            None => writeln!(text, "### {}", candidate.id),
        };
        text.push_str(candidate.text.trim_end());
        text.push_str("\n\n");
    }
    text
}

/// A refine call as a fresh conversation.
pub fn refine(
    options: &RefineOptions,
    query: &str,
    patterns: &[String],
    candidates: &[ShownTable],
) -> Vec<ChatMessage> {
    let user = format!(
        "{}{}{}Your decision, as one JSON object:",
        task_prefix(options.task, query),
        refine_instructions(options),
        candidates_block(patterns, candidates)
    );
    vec![
        ChatMessage::system(system(options.task)),
        ChatMessage::user(user),
    ]
}

/// The next user turn when refine rounds continue one conversation ([`History::Full`](super::History)).
pub fn refine_followup(patterns: &[String], candidates: &[ShownTable]) -> ChatMessage {
    ChatMessage::user(format!(
        "New search results. Ids restart at T0; earlier ids no longer apply.\n\n{}Decide again, \
with one JSON object in the same format.",
        candidates_block(patterns, candidates)
    ))
}

fn tables_block(tables: &[ShownTable]) -> String {
    let mut text = String::from("Tables:\n");
    for table in tables {
        let _ = writeln!(text, "### {}", table.id);
        text.push_str(table.text.trim_end());
        text.push_str("\n\n");
    }
    text
}

/// QA with the insufficiency option: the model may say the tables lack the evidence, which sends
/// the loop on to fallback tables.
pub fn qa(task: TaskType, query: &str, tables: &[ShownTable]) -> Vec<ChatMessage> {
    let instructions = match task {
        TaskType::Tableqa => {
            "Step: answer.\n\
Answer the question from the tables below only, not from outside knowledge. If they do not hold \
the evidence needed, say so instead of guessing. Keep the answer short: the values, names or \
numbers asked for, without explanation.\n\
End your reply with one line `Answer: <your answer>`, or `Answer: INSUFFICIENT` when the tables \
lack the evidence.\n\n"
        }
        TaskType::FactVerification => {
            "Step: verify.\n\
Decide from the tables below only whether they support or refute the claim. If they do not cover \
what the claim is about, so that it cannot be checked against them, say that instead.\n\
End your reply with one line: `Answer: SUPPORTED`, `Answer: REFUTED` or `Answer: CANNOT VERIFY`.\n\n"
        }
    };
    qa_messages(task, query, instructions, tables)
}

/// QA for the dense / rerank baselines: no insufficiency option (tableqa always answers; an
/// unverifiable claim counts as refuted). Parse its output with
/// [`parse_qa`](super::parse::parse_qa) and [`QaVariant::Baseline`](super::QaVariant).
pub fn baseline_qa(task: TaskType, query: &str, tables: &[ShownTable]) -> Vec<ChatMessage> {
    let instructions = match task {
        TaskType::Tableqa => {
            "Step: answer.\n\
Answer the question from the tables below only. Keep the answer short: the values, names or \
numbers asked for, without explanation.\n\
End your reply with one line `Answer: <your answer>`.\n\n"
        }
        TaskType::FactVerification => {
            "Step: verify.\n\
Decide from the tables below only whether the claim is supported or refuted. A claim the tables \
do not show to be true counts as refuted.\n\
End your reply with one line: `Answer: SUPPORTED` or `Answer: REFUTED`.\n\n"
        }
    };
    qa_messages(task, query, instructions, tables)
}

fn qa_messages(
    task: TaskType,
    query: &str,
    instructions: &str,
    tables: &[ShownTable],
) -> Vec<ChatMessage> {
    // The reminder comes after the tables, where it costs no shared prefix and where small models
    // still see it after a long table.
    let user = format!(
        "{}{instructions}{}End with the `Answer:` line.",
        task_prefix(task, query),
        tables_block(tables)
    );
    vec![ChatMessage::system(system(task)), ChatMessage::user(user)]
}
