//! The agent's readers of model output (`agent::parse`): patterns, refine decisions, QA answers and
//! fact labels. The first byte sets how many candidates were shown and the selection cap; the
//! documented contracts are asserted (chosen ids are shown ids, at most `cap` of them, no
//! duplicates; at most `MAX_PATTERNS` non-empty, distinct patterns).
use tableseek::agent::parse::{
    fact_label, is_insufficient, json_values, parse_patterns, parse_qa, parse_refine,
    strip_thinking, RefineDecision, MAX_PATTERNS,
};
use tableseek::agent::{QaVariant, TaskType};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let Some((&selector, body)) = data.split_first() else {
            return;
        };
        let Ok(text) = std::str::from_utf8(body) else {
            return;
        };
        let shown = usize::from(selector & 0x0f);
        let cap = usize::from(selector >> 4);

        let _ = json_values(&strip_thinking(text));
        if let Some(patterns) = parse_patterns(text) {
            assert!(!patterns.is_empty() && patterns.len() <= MAX_PATTERNS);
            for (i, p) in patterns.iter().enumerate() {
                assert!(!p.is_empty(), "empty pattern");
                assert!(!patterns[..i].contains(p), "repeated pattern {p:?}");
            }
        }
        match parse_refine(text, shown, cap).decision {
            RefineDecision::Choose(ids) => {
                assert!(ids.len() <= cap, "{ids:?} over cap {cap}");
                for (i, id) in ids.iter().enumerate() {
                    assert!(*id < shown, "id {id} not shown ({shown})");
                    assert!(!ids[..i].contains(id), "repeated id {id}");
                }
            }
            RefineDecision::Regenerate(patterns) => {
                assert!(patterns.len() <= MAX_PATTERNS);
            }
            RefineDecision::None(_) => {}
        }
        for task in [TaskType::Tableqa, TaskType::FactVerification] {
            for variant in [QaVariant::TableSeek, QaVariant::Baseline] {
                let _ = parse_qa(text, task, variant);
            }
        }
        let _ = fact_label(text);
        let _ = is_insufficient(text);
    });
}
