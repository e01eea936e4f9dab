//! Every prompt the agent sends, in one place.
//!
//! Layout, for KV-cache prefix reuse: fixed instructions → task and query → variable content.
//! The system message holds the instructions of every step the run uses; it depends only on the
//! run's settings, so it is identical for every call of every query and a prefix cache keeps it
//! across the whole run. The user message starts with the task prefix and the query, names the
//! step, and ends with the variable content (patterns, previews, tables). Successive calls of one
//! query therefore share system + query, successive refine calls also their step line, and with
//! [`History::Full`](super::History) a refine round extends the previous round's conversation, so
//! the whole earlier exchange is shared.
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

/// What a run's prompts offer; fixed for the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptOptions {
    pub task: TaskType,
    pub strategy: Strategy,
    /// Whether refine rounds run at all (the `no_refine` ablation drops their instructions).
    pub refine: bool,
    pub allow_select: bool,
    pub allow_regenerate: bool,
}

const INTRO: &str = "You are a careful analyst who finds evidence in a large collection of \
tables and answers from it. The work goes in steps, each named at the start of the request. \
Tables are shown only through their content and short temporary ids (T0, T1, ...) that hold for \
the current step alone; file names and titles are never shown, so judge a table by its columns \
and values. In every step, reply in exactly the format given for it below.";

fn subject(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => "question",
        TaskType::FactVerification => "claim",
    }
}

fn goal(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => {
            "The goal is to answer a question from the one table that holds the evidence."
        }
        TaskType::FactVerification => {
            "The goal is to verify a claim against the one table that holds the evidence."
        }
    }
}

/// The task prefix: what the user message of every call starts with.
pub fn task_prefix(task: TaskType, query: &str) -> String {
    match task {
        TaskType::Tableqa => format!("Question: {}\n\n", query.trim()),
        TaskType::FactVerification => format!("Claim: {}\n\n", query.trim()),
    }
}

const PATTERN_STEP: &str = "Step: write search patterns.";
const REFINE_STEP: &str = "Step: inspect the candidates.";
const QA_STEP: &str = "Step: answer.";

fn pattern_section(task: TaskType) -> String {
    let subject = subject(task);
    format!(
        "# {PATTERN_STEP}\n\
The collection will be searched with case-insensitive regular expressions, grep style, and each \
table is scored by the share of your patterns found in it. Write patterns that the table holding \
the evidence for the {subject} would contain:\n\
- the entities, attributes and values the {subject} mentions, and the column names such a table \
would likely use;\n\
- variants: abbreviations, singular and plural, naming conventions (snake_case, camelCase, spaced \
words) and the formats values may be stored in (dates, numbers, codes);\n\
- short, specific patterns, about 3 to 8 of them; several simple patterns beat one long one; \
skip words that every table contains.\n\
Reply with a JSON list of strings only, for example: [\"first pattern\", \"column_name\", \
\"value.*format\"]\n"
    )
}

fn refine_section(options: &PromptOptions) -> String {
    let subject = subject(options.task);
    let mut text = format!(
        "# {REFINE_STEP}\n\
You see the current search patterns and previews of the best-ranked tables. Each preview shows \
the start of the table (header kept) and rows that match the patterns. Decide:\n"
    );
    // Every example starts with T0, the best-ranked candidate: small models copy the example's
    // ids (SmolLM2 under the grammar selected the example's "T1" in 18 of 18 Spider questions,
    // reading the second-best table), and the top of the ranking is the least harmful copy.
    if options.allow_select {
        let _ = match options.strategy {
            Strategy::Rerank { .. } => writeln!(
                text,
                "- order the candidates from most to least likely to hold the evidence for the \
{subject}, listing every shown id; the first one will be used: \
{{\"action\": \"rerank\", \"order\": [\"T0\", \"T2\", \"T1\"]}}"
            ),
            // lN generates no refine text; its system message is 5s1's, so the pattern step
            // reads the same instructions and writes the same patterns as under the default.
            Strategy::Select { m: 1, .. } | Strategy::Likelihood { .. } => writeln!(
                text,
                "- if a candidate holds the evidence for the {subject}, select it: \
{{\"action\": \"select\", \"tables\": [\"T0\"]}}"
            ),
            Strategy::Select { m, .. } => writeln!(
                text,
                "- if candidates hold the evidence for the {subject}, select them, best first, \
at most {m}: {{\"action\": \"select\", \"tables\": [\"T0\", \"T2\"]}}"
            ),
        };
    }
    if options.allow_regenerate {
        let lead = match (options.allow_select, options.strategy) {
            (false, _) => "-",
            (true, Strategy::Rerank { .. }) => "- or, if no candidate fits,",
            (true, Strategy::Select { .. } | Strategy::Likelihood { .. }) => "- otherwise",
        };
        let _ = writeln!(
            text,
            "{lead} write better patterns and search again: \
{{\"action\": \"regenerate\", \"patterns\": [\"...\", \"...\"]}}. Use what the previews \
reveal: the column names and the way values are written here; switch to distinctive values \
(ids, codes, names); loosen patterns that are too strict (e.g. actor.*id); drop patterns that \
match everywhere."
        );
    } else {
        text.push_str("- if no candidate holds the evidence: {\"action\": \"none\"}\n");
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
    text.push_str("Reply with one JSON object only.\n");
    text
}

fn qa_section(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => {
            "# Step: answer.\n\
Answer the question from the given tables only, not from outside knowledge. If they do not hold \
the evidence needed, say so instead of guessing. Keep the answer short: the values, names or \
numbers asked for, without explanation.\n\
End your reply with one line `Answer: <your answer>`, or `Answer: INSUFFICIENT` when the tables \
lack the evidence.\n"
        }
        TaskType::FactVerification => {
            "# Step: answer.\n\
Decide from the given tables only whether they support or refute the claim. If they do not cover \
what the claim is about, so that it cannot be checked against them, say that instead.\n\
End your reply with one line: `Answer: SUPPORTED`, `Answer: REFUTED` or `Answer: CANNOT VERIFY`.\n"
        }
    }
}

fn baseline_qa_section(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => {
            "# Step: answer.\n\
Answer the question from the given tables only. Keep the answer short: the values, names or \
numbers asked for, without explanation.\n\
End your reply with one line `Answer: <your answer>`.\n"
        }
        TaskType::FactVerification => {
            "# Step: answer.\n\
Decide from the given tables only whether the claim is supported or refuted. A claim the tables \
do not show to be true counts as refuted.\n\
End your reply with one line: `Answer: SUPPORTED` or `Answer: REFUTED`.\n"
        }
    }
}

fn patterns_json(patterns: &[String]) -> String {
    serde_json::to_string(patterns).unwrap_or_else(|_| "[]".to_string())
}

fn candidates_block(patterns: &[String], candidates: &[ShownTable]) -> String {
    let mut text = format!("Patterns: {}\n\n", patterns_json(patterns));
    if candidates.is_empty() {
        text.push_str("Candidates: none; no table matched these patterns.\n\n");
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

fn tables_block(tables: &[ShownTable]) -> String {
    let mut text = String::from("Tables:\n");
    for table in tables {
        let _ = writeln!(text, "### {}", table.id);
        text.push_str(table.text.trim_end());
        text.push_str("\n\n");
    }
    text
}

/// The prompts of one run: the system message is built once from the run's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompts {
    task: TaskType,
    system: String,
}

impl Prompts {
    pub fn new(options: &PromptOptions) -> Self {
        let mut system = format!(
            "{INTRO}\n{}\n\n{}",
            goal(options.task),
            pattern_section(options.task)
        );
        if options.refine {
            system.push('\n');
            system.push_str(&refine_section(options));
        }
        system.push('\n');
        system.push_str(qa_section(options.task));
        Self {
            task: options.task,
            system,
        }
    }

    /// The system message every call of the run shares.
    pub fn system(&self) -> &str {
        &self.system
    }

    fn messages(&self, user: String) -> Vec<ChatMessage> {
        vec![
            ChatMessage::system(self.system.clone()),
            ChatMessage::user(user),
        ]
    }

    /// Step 1: ask for grep patterns.
    pub fn pattern_generation(&self, query: &str) -> Vec<ChatMessage> {
        self.messages(format!(
            "{}{PATTERN_STEP}\nReply with a JSON list of strings.",
            task_prefix(self.task, query)
        ))
    }

    /// A refine call as a fresh conversation.
    pub fn refine(
        &self,
        query: &str,
        patterns: &[String],
        candidates: &[ShownTable],
    ) -> Vec<ChatMessage> {
        self.messages(format!(
            "{}{REFINE_STEP}\n\n{}Your decision, as one JSON object:",
            task_prefix(self.task, query),
            candidates_block(patterns, candidates)
        ))
    }

    /// The next user turn when refine rounds continue one conversation
    /// ([`History::Full`](super::History)).
    pub fn refine_followup(&self, patterns: &[String], candidates: &[ShownTable]) -> ChatMessage {
        ChatMessage::user(format!(
            "New search results. Ids restart at T0; earlier ids no longer apply.\n\n{}Your \
decision, as one JSON object in the same format:",
            candidates_block(patterns, candidates)
        ))
    }

    /// QA with the insufficiency option: the model may say the tables lack the evidence, which
    /// sends the loop on to fallback tables.
    pub fn qa(&self, query: &str, tables: &[ShownTable]) -> Vec<ChatMessage> {
        self.messages(qa_user(self.task, query, tables))
    }
}

/// The text before the query when [`Strategy::Likelihood`] scores a candidate: a user turn with
/// the preview, and the start of a reply that the query continues. Written in ChatML, the chat
/// format of every model this tool ships with (Qwen2.5, Qwen3, SmolLM2); no system message, so
/// no template's default one (Qwen2.5 adds its own) sits between the model and the table.
pub fn likelihood_prompt(task: TaskType, preview: &str) -> String {
    let lead = match task {
        TaskType::Tableqa => "A question this table answers:",
        TaskType::FactVerification => "A statement this table verifies:",
    };
    // The prompt is read with its special tokens as such: `<|` in table text is broken up so a
    // cell cannot close the turn.
    format!(
        "<|im_start|>user\nHere is a table.\n\n{}\n<|im_end|>\n<|im_start|>assistant\n{lead}",
        preview.trim_end().replace("<|", "< |")
    )
}

/// The scored continuation of [`likelihood_prompt`]: the query after one space.
pub fn likelihood_continuation(query: &str) -> String {
    format!(" {}", query.trim())
}

/// The system message of the baseline QA prompt.
pub fn baseline_system(task: TaskType) -> String {
    format!("{INTRO}\n{}\n\n{}", goal(task), baseline_qa_section(task))
}

/// QA for the dense / rerank baselines: no insufficiency option (tableqa always answers; an
/// unverifiable claim counts as refuted). Parse its output with
/// [`parse_qa`](super::parse::parse_qa) and [`QaVariant::Baseline`](super::QaVariant).
pub fn baseline_qa(task: TaskType, query: &str, tables: &[ShownTable]) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(baseline_system(task)),
        ChatMessage::user(qa_user(task, query, tables)),
    ]
}

fn qa_user(task: TaskType, query: &str, tables: &[ShownTable]) -> String {
    // The reminder comes after the tables, where it costs no shared prefix and where small models
    // still see it after a long table. For table questions it also rules out the refine step's
    // JSON: the system message shows those actions, and Qwen2.5-Coder-0.5B answered 24 of 30 TCR
    // questions with `Answer: {"action": "select", "tables": ["T0"]}` without it.
    let reminder = match task {
        TaskType::Tableqa => {
            "End with the `Answer:` line: the answer itself, in words or numbers, not a JSON action."
        }
        TaskType::FactVerification => "End with the `Answer:` line.",
    };
    format!(
        "{}{QA_STEP}\n\n{}{reminder}",
        task_prefix(task, query),
        tables_block(tables)
    )
}
