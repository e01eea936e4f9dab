//! T-RAG's one answer call (`../shared/method/t-rag.md`, stage 3): the top tables of the PPR
//! ranking under anonymous ids, the pairwise edge weights among them (the paper's graph-aware
//! prompt; absent from its released code), and the instruction to pick the relevant tables,
//! reason inside `<reasoning>` and answer inside `<answer>` (1 or 0 for a claim).

use std::fmt::Write;

use super::fit::fit_tables;
use super::parse::{fact_answer, fact_label, parse_qa, QaOutcome};
use super::prompts::{task_prefix, ShownTable};
use super::{
    AgentError, CallKind, ChatMessage, Llm, LlmRequest, LlmResponse, QaVariant, TaskType, Verdict,
};

const SYSTEM: &str = "You answer questions and verify claims over tables. You are given several \
tables retrieved for the query, with the similarity between each pair of tables (an edge weight \
between 0 and 1; pairs below the threshold are left out).";

fn instruction(task: TaskType) -> &'static str {
    match task {
        TaskType::Tableqa => {
            "Pick the tables relevant to the question (normally 1 to 3), relate them to it, and \
scan their rows and columns for the evidence. Reason inside <reasoning></reasoning>, then put the \
answer alone inside <answer></answer> (several values separated by commas; NA if the tables do \
not answer it)."
        }
        TaskType::FactVerification => {
            "Pick the tables relevant to the claim (normally 1 to 3), relate them to it, and scan \
their rows and columns for the evidence. Reason inside <reasoning></reasoning>, then put 1 inside \
<answer></answer> if the tables support the claim, 0 if they refute it."
        }
    }
}

/// The user message: the query, the tables, their edges (`T0 - T3: 0.82`, one line per pair),
/// then the instruction, last, where a small model still sees it after long tables.
pub fn user_message(
    task: TaskType,
    query: &str,
    tables: &[ShownTable],
    edges: &[(usize, usize, f64)],
) -> String {
    let mut text = task_prefix(task, query);
    text.push_str("Tables:\n");
    for table in tables {
        let _ = writeln!(text, "### {}", table.id);
        text.push_str(table.text.trim_end());
        text.push_str("\n\n");
    }
    text.push_str("Table graph (edge weights):\n");
    if edges.is_empty() {
        text.push_str("(no pair is similar enough)\n");
    }
    for &(a, b, weight) in edges {
        if let (Some(a), Some(b)) = (tables.get(a), tables.get(b)) {
            let _ = writeln!(text, "{} - {}: {weight:.2}", a.id, b.id);
        }
    }
    text.push('\n');
    text.push_str(instruction(task));
    text
}

/// Reads `<answer>…</answer>` (the last one); a claim's `1`/`0` (or a verdict word) becomes its
/// label. Without the tag the project's answer parser reads the text, and the outcome says it
/// found no explicit answer (`parsed: false`): recorded, never fatal.
pub fn parse_answer(text: &str, task: TaskType) -> QaOutcome {
    let tagged = text.rfind("<answer>").and_then(|start| {
        let rest = &text[start + "<answer>".len()..];
        let end = rest.find("</answer>").unwrap_or(rest.len());
        let inner = rest[..end].trim();
        (!inner.is_empty()).then(|| inner.to_string())
    });
    let Some(answer) = tagged else {
        let mut outcome = parse_qa(text, task, QaVariant::Baseline);
        outcome.parsed = false;
        return outcome;
    };
    match task {
        TaskType::FactVerification => {
            let verdict = match answer.as_str() {
                "1" => Some(Verdict::Supported),
                "0" => Some(Verdict::Refuted),
                other => fact_label(other),
            };
            match verdict {
                Some(verdict) => QaOutcome {
                    answer: fact_answer(verdict).to_string(),
                    verdict,
                    parsed: true,
                },
                None => QaOutcome {
                    answer,
                    verdict: Verdict::Insufficient,
                    parsed: false,
                },
            }
        }
        TaskType::Tableqa if answer.eq_ignore_ascii_case("na") => QaOutcome {
            answer,
            verdict: Verdict::Insufficient,
            parsed: true,
        },
        TaskType::Tableqa => QaOutcome {
            answer,
            verdict: Verdict::Answered,
            parsed: true,
        },
    }
}

/// One call over `tables` (texts in rank order) with `edges` between their positions; tables
/// are cut to fit the window as in the baselines.
pub fn trag_qa<L: Llm + ?Sized>(
    llm: &mut L,
    task: TaskType,
    query: &str,
    tables: &[String],
    edges: &[(usize, usize, f64)],
    max_new_tokens: usize,
) -> Result<(QaOutcome, LlmResponse), AgentError> {
    let mut shown = super::run::shown_tables(tables);
    let build = |shown: &[ShownTable]| {
        vec![
            ChatMessage::system(SYSTEM),
            ChatMessage::user(user_message(task, query, shown, edges)),
        ]
    };
    fit_tables(llm, max_new_tokens, &mut shown, build);
    let request = LlmRequest {
        messages: build(&shown),
        max_new_tokens,
        kind: CallKind::Qa,
        // Free text: the tags are the format, and the baselines' grammar would forbid them.
        constraint: None,
    };
    let response = llm.chat(&request)?;
    let outcome = parse_answer(&response.text, task);
    Ok((outcome, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_from_the_last_tag_and_a_missing_tag_is_unparsed() {
        let claim = parse_answer(
            "<reasoning>T1 shows it</reasoning>\n<answer>1</answer>",
            TaskType::FactVerification,
        );
        assert_eq!((claim.verdict, claim.parsed), (Verdict::Supported, true));
        assert_eq!(claim.answer, "supported");
        let refuted = parse_answer("<answer>0</answer>", TaskType::FactVerification);
        assert_eq!(refuted.verdict, Verdict::Refuted);
        let qa = parse_answer(
            "<answer>draft</answer> then <answer> Canberra </answer>",
            TaskType::Tableqa,
        );
        assert_eq!((qa.answer.as_str(), qa.parsed), ("Canberra", true));
        let na = parse_answer("<answer>NA</answer>", TaskType::Tableqa);
        assert_eq!(na.verdict, Verdict::Insufficient);
        let untagged = parse_answer("Answer: Paris", TaskType::Tableqa);
        assert!(!untagged.parsed);
        assert_eq!(untagged.answer, "Paris");
        let garbage = parse_answer("<answer>maybe</answer>", TaskType::FactVerification);
        assert_eq!(
            (garbage.verdict, garbage.parsed),
            (Verdict::Insufficient, false)
        );
    }

    #[test]
    fn the_prompt_lists_the_edges_between_shown_ids_only() {
        let tables = [
            ShownTable {
                id: "T0".into(),
                text: "a,b\n1,2".into(),
                score: None,
            },
            ShownTable {
                id: "T1".into(),
                text: "c,d\n3,4".into(),
                score: None,
            },
        ];
        let text = user_message(
            TaskType::Tableqa,
            "q?",
            &tables,
            &[(0, 1, 0.8234), (0, 5, 0.9)],
        );
        assert!(text.contains("T0 - T1: 0.82"), "{text}");
        assert!(!text.contains("T5"), "{text}");
        assert!(text.ends_with("not answer it)."), "{text}");
    }
}
