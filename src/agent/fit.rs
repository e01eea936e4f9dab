//! Cutting table text so a prompt fits the model's context window.
//!
//! A character cap alone cannot promise that: number-heavy rows tokenize at about 1.5 characters
//! per token, so on Spider a QA prompt with a 16,000-character cut of world_1's city table was
//! 9,621–14,285 tokens against SmolLM2's 8,192 and the call failed. The backend knows its
//! tokenizer, template and window ([`Llm::measure`]); the agent knows which parts of a prompt are
//! tables and may be shortened. [`fit_tables`] joins the two: it measures the whole prompt, shares
//! what is left after the fixed text out among the tables (a short table keeps all of its text,
//! the long ones split the rest evenly) and cuts each long one at a line end, then measures again.

use tracing::debug;

use super::prompts::ShownTable;
use super::{ChatMessage, Llm};

/// Prompt size against the most a prompt may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptBudget {
    /// Tokens of the templated prompt.
    pub tokens: usize,
    /// The most prompt tokens that leave room for the reply within the context window.
    pub limit: usize,
}

impl PromptBudget {
    /// The limit for a window of `window` tokens and a reply of up to `max_new_tokens`: the
    /// reply's room is capped at half the window, so a generous token budget (a thinking model's
    /// 8,192 on an 8,192 window) still leaves a prompt room to be.
    pub fn new(tokens: usize, window: usize, max_new_tokens: usize) -> Self {
        Self {
            tokens,
            limit: window - max_new_tokens.min(window / 2),
        }
    }

    pub fn fits(&self) -> bool {
        self.tokens <= self.limit
    }
}

const MARKER_TAIL: &str = " more lines not shown]\n";
const MARKER_HEAD: &str = "[... ";

/// Cuts `text` to at most `max_chars` characters at a line end, saying how many lines were left
/// out (counting those an earlier cut already left out).
pub(crate) fn cap_text(text: &str, max_chars: usize) -> String {
    let Some((cut, _)) = text.char_indices().nth(max_chars) else {
        return text.to_owned();
    };
    let (body, earlier) = split_marker(text);
    let cut = cut.min(body.len());
    // A first line longer than the cap is cut inside the line rather than dropped.
    let end = body[..cut].rfind('\n').map_or(cut, |i| i + 1);
    let omitted_lines = body[end..].lines().count() + earlier;
    format!("{}{MARKER_HEAD}{omitted_lines}{MARKER_TAIL}", &body[..end])
}

/// The text before a trailing cut marker and the number of lines that marker says were cut.
fn split_marker(text: &str) -> (&str, usize) {
    let Some(without_tail) = text.strip_suffix(MARKER_TAIL) else {
        return (text, 0);
    };
    let line_start = without_tail.rfind('\n').map_or(0, |i| i + 1);
    let count = without_tail[line_start..]
        .strip_prefix(MARKER_HEAD)
        .and_then(|n| n.parse::<usize>().ok());
    match count {
        Some(count) => (&text[..line_start], count),
        None => (text, 0),
    }
}

/// Shortens the texts of `tables` until `build(tables)` fits the backend's context window with
/// room for `max_new_tokens`. Returns how many tables were cut. A backend without a window
/// ([`Llm::measure`] gives `None`) leaves everything as it is; so does a prompt whose fixed
/// text alone is too long (the call then fails in the backend, with its error recorded).
pub fn fit_tables<L: Llm + ?Sized>(
    llm: &mut L,
    max_new_tokens: usize,
    tables: &mut [ShownTable],
    build: impl Fn(&[ShownTable]) -> Vec<ChatMessage>,
) -> usize {
    let mut cut = vec![false; tables.len()];
    // Token counts of a table alone and inside the prompt differ by a token or two at the seams,
    // and a proportional cut misses when lines differ in density: re-measure, keeping more slack
    // each time.
    for attempt in 0..5u32 {
        let Some(budget) = llm.measure(&build(tables), max_new_tokens) else {
            return 0;
        };
        if budget.fits() {
            break;
        }
        let counts: Vec<usize> = tables
            .iter()
            .map(|t| llm.count_tokens(&t.text).unwrap_or(t.text.len()))
            .collect();
        let fixed = budget.tokens.saturating_sub(counts.iter().sum());
        let slack = 16usize << (2 * attempt);
        let room = budget.limit.saturating_sub(fixed + slack);
        debug!(
            attempt,
            prompt_tokens = budget.tokens,
            limit = budget.limit,
            room,
            "cutting tables to fit the context window"
        );
        let shares = water_fill(&counts, room);
        for ((table, (&count, &share)), was_cut) in tables
            .iter_mut()
            .zip(counts.iter().zip(&shares))
            .zip(cut.iter_mut())
        {
            if share < count {
                let chars = table.text.chars().count();
                // The marker line costs tokens of its own.
                let keep = share.saturating_sub(12);
                let max_chars = (chars as u128 * keep as u128 / count.max(1) as u128) as usize;
                table.text = cap_text(&table.text, max_chars);
                *was_cut = true;
            }
        }
    }
    cut.iter().filter(|&&c| c).count()
}

/// Splits `room` tokens among items of `sizes`: an item smaller than an even share keeps its size,
/// the rest share what is left evenly.
fn water_fill(sizes: &[usize], room: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| (sizes[i], i));
    let mut shares = vec![0; sizes.len()];
    let mut left = room;
    for (k, &i) in order.iter().enumerate() {
        let even = left / (sizes.len() - k);
        shares[i] = sizes[i].min(even);
        left -= shares[i];
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_tables_are_cut_at_a_line_end_with_a_marker() {
        let text = "h\n".to_string() + &"row,1\n".repeat(100);
        let capped = cap_text(&text, 20);
        assert!(capped.starts_with("h\nrow,1\n"));
        assert!(
            capped.ends_with("[... 97 more lines not shown]\n"),
            "{capped}"
        );
        assert!(capped.len() < 80);
        assert_eq!(cap_text("short", 20), "short");
    }

    #[test]
    fn a_second_cut_counts_the_lines_the_first_left_out() {
        let text = "h\n".to_string() + &"row,1\n".repeat(100);
        let once = cap_text(&text, 300);
        let twice = cap_text(&once, 20);
        assert!(
            twice.ends_with("[... 97 more lines not shown]\n"),
            "{twice}"
        );
        assert_eq!(twice.matches("not shown").count(), 1);
    }

    #[test]
    fn short_items_keep_their_size_and_long_ones_share_the_rest() {
        assert_eq!(water_fill(&[10, 500, 300], 310), vec![10, 150, 150]);
        assert_eq!(water_fill(&[10, 20], 100), vec![10, 20]);
        assert_eq!(water_fill(&[100, 100], 0), vec![0, 0]);
    }

    #[test]
    fn the_reply_room_is_at_most_half_the_window() {
        assert_eq!(PromptBudget::new(0, 8192, 1024).limit, 7168);
        assert_eq!(PromptBudget::new(0, 8192, 8192).limit, 4096);
    }
}
