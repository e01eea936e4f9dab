//! Turning generated ids into text as they arrive, and spotting stop strings in that text.
//!
//! A byte-level token can end in the middle of a UTF-8 character (emoji, accented letters split
//! across tokens), and decoding a token alone can drop the spacing that its neighbours imply. So
//! [`TextStream`] decodes a short window of recent ids, and releases only the text that the newest
//! id completed, holding back anything that still ends in a replacement character.

use super::{Result, Tokenizer};

/// Incremental decoder for one generation. It keeps the ids it was given; it borrows the
/// [`Tokenizer`] only per call, so it can live next to the model state that owns the tokenizer.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// Start of the window decoded for context: ids before it are already released text.
    prefix_offset: usize,
    /// Ids before this one have been released; ids from it on are pending.
    read_offset: usize,
    skip_special: bool,
    text: String,
}

impl TextStream {
    /// A new stream; `skip_special` drops special tokens (such as EOS) from the text.
    pub fn new(skip_special: bool) -> Self {
        Self {
            skip_special,
            ..Self::default()
        }
    }

    /// Adds one generated id and returns the text it completed, if any.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let released = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let window = tokenizer.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        // U+FFFD at the end means the last token stopped inside a character: wait for the rest.
        if window.len() <= released.len()
            || window.ends_with(char::REPLACEMENT_CHARACTER)
            || !window.starts_with(&released)
        {
            return Ok(None);
        }
        let new_text = window[released.len()..].to_string();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.text.push_str(&new_text);
        Ok(Some(new_text))
    }

    /// Releases whatever is still pending (lossily, if the ids end inside a character).
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> Result<Option<String>> {
        if self.read_offset == self.ids.len() {
            return Ok(None);
        }
        let released = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let window = tokenizer.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        let new_text = match window.strip_prefix(released.as_str()) {
            Some(rest) => rest.to_string(),
            None => window,
        };
        if new_text.is_empty() {
            return Ok(None);
        }
        self.text.push_str(&new_text);
        Ok(Some(new_text))
    }

    /// All text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// Where a stop string stands in generated text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMatch {
    /// Stop string number `stop` begins at byte `at`: the answer is `text[..at]`.
    Found { at: usize, stop: usize },
    /// No stop string yet. `text[..safe_len]` can be shown; the rest could be the start of one.
    NotFound { safe_len: usize },
}

/// A set of stop strings checked against the text generated so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStrings {
    stops: Vec<String>,
}

impl StopStrings {
    /// Empty stop strings are ignored: they would stop before the first token.
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> Self {
        Self {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Checks `text`. The earliest stop string wins; on a tie, the one listed first.
    pub fn check(&self, text: &str) -> StopMatch {
        let found = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(index, stop)| text.find(stop.as_str()).map(|at| (at, index)))
            .min();
        if let Some((at, stop)) = found {
            return StopMatch::Found { at, stop };
        }
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest_start = text.len().saturating_sub(longest.saturating_sub(1));
        let safe_len = (earliest_start..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .find(|&i| self.stops.iter().any(|stop| stop.starts_with(&text[i..])))
            .unwrap_or(text.len());
        StopMatch::NotFound { safe_len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_stop_wins_and_ties_go_to_the_first_listed() {
        let stops = StopStrings::new(["</answer>", "\n\n", "</ans"]);
        assert_eq!(
            stops.check("42\n\nmore</answer>"),
            StopMatch::Found { at: 2, stop: 1 }
        );
        assert_eq!(
            stops.check("42</answer>"),
            StopMatch::Found { at: 2, stop: 0 }
        );
    }

    #[test]
    fn a_possible_stop_prefix_at_the_end_is_held_back() {
        let stops = StopStrings::new(["</answer>"]);
        assert_eq!(
            stops.check("Canberra</ans"),
            StopMatch::NotFound { safe_len: 8 }
        );
        assert_eq!(
            stops.check("Canberra<"),
            StopMatch::NotFound { safe_len: 8 }
        );
        assert_eq!(stops.check("Canberra"), StopMatch::NotFound { safe_len: 8 });
    }

    #[test]
    fn held_back_length_stays_on_a_char_boundary() {
        let stops = StopStrings::new(["éa"]);
        // "é" is two bytes; the only place a stop could start is before it.
        assert_eq!(stops.check("xé"), StopMatch::NotFound { safe_len: 1 });
    }

    #[test]
    fn empty_stop_strings_are_ignored() {
        let stops = StopStrings::new(["", ""]);
        assert!(stops.is_empty());
        assert_eq!(stops.check("abc"), StopMatch::NotFound { safe_len: 3 });
    }
}
