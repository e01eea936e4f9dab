//! Structure-preserving previews: the head of a table's serialization plus the rows that match the
//! current patterns, shown under a repeated header so each row reads against its column names.
//!
//! A preview is cut from [`Corpus::text`], which is built from header and rows only: it never holds a
//! file name, path, caption or table id. The caller labels candidates (T0, T1, …).

use std::fmt;
use std::str::FromStr;

use super::PatternSet;
use crate::corpus::{write_head, write_row, write_tail, Corpus, TextFormat};

/// How much of each candidate the model sees (the method's evidence sizes). Serialized as its
/// name (`small`, ...), as in the CLI and in run configs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Evidence {
    /// 1 matched row per pattern, 5 in total.
    #[default]
    Small,
    /// 2 per pattern, 10 in total.
    Medium,
    /// 3 per pattern, 15 in total.
    Big,
    /// The whole table, no row matching.
    Full,
}

impl Evidence {
    /// `(rows per pattern, rows in total)`, or `None` for the whole table.
    pub fn row_limits(self) -> Option<(usize, usize)> {
        match self {
            Evidence::Small => Some((1, 5)),
            Evidence::Medium => Some((2, 10)),
            Evidence::Big => Some((3, 15)),
            Evidence::Full => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Small => "small",
            Evidence::Medium => "medium",
            Evidence::Big => "big",
            Evidence::Full => "full",
        }
    }
}

impl FromStr for Evidence {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "small" => Ok(Evidence::Small),
            "medium" => Ok(Evidence::Medium),
            "big" => Ok(Evidence::Big),
            "full" => Ok(Evidence::Full),
            other => Err(format!(
                "unknown evidence size {other:?} (small, medium, big, full)"
            )),
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a preview may hold. Limits count characters, not bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewOptions {
    /// Length of the head cut from the start of the serialization.
    pub preview_chars: usize,
    pub max_matched_rows: usize,
    pub max_rows_per_pattern: usize,
    /// Each matched row (and the repeated header) is cut to this length.
    pub max_line_chars: usize,
    /// Show the whole serialization; the other limits are ignored.
    pub full: bool,
    /// Matched rows only: no head and no header (the match-only ablation).
    pub match_only: bool,
}

impl PreviewOptions {
    pub fn for_evidence(evidence: Evidence) -> Self {
        // `full` ignores the row limits; keep the small ones so toggling `full` off is sensible.
        let (per_pattern, total) = evidence.row_limits().unwrap_or((1, 5));
        PreviewOptions {
            preview_chars: 800,
            max_matched_rows: total,
            max_rows_per_pattern: per_pattern,
            max_line_chars: 400,
            full: evidence == Evidence::Full,
            match_only: false,
        }
    }

    pub fn match_only(mut self, match_only: bool) -> Self {
        self.match_only = match_only;
        self
    }
}

impl Default for PreviewOptions {
    fn default() -> Self {
        PreviewOptions::for_evidence(Evidence::Small)
    }
}

/// Heading of the matched-rows section: tells the reader the rows below are a selection, not the
/// continuation of the head.
const MATCHED_ROWS: &str = "[rows matching the patterns]\n";

/// The preview of table `table`.
pub fn preview(
    corpus: &Corpus,
    table: usize,
    patterns: &PatternSet,
    opts: &PreviewOptions,
) -> String {
    let text = corpus.text(table);
    if opts.full {
        return text.to_owned();
    }
    let head_end = if opts.match_only {
        0
    } else {
        match char_boundary(text, opts.preview_chars) {
            // Small tables are shown whole.
            None => return text.to_owned(),
            Some(end) => end,
        }
    };

    let format = corpus.text_format(table);
    let t = corpus.table_view(table);
    let mut head_len = String::new();
    write_head(&mut head_len, &t.header, format);
    let mut offset = head_len.len();

    let mut per_pattern = vec![0usize; patterns.len()];
    let mut chosen: Vec<String> = Vec::new();
    let mut line = String::new();
    for row in &t.rows {
        if chosen.len() >= opts.max_matched_rows
            || per_pattern.iter().all(|&n| n >= opts.max_rows_per_pattern)
        {
            break;
        }
        line.clear();
        write_row(&mut line, row, format);
        offset += line.len();
        if offset <= head_end {
            // Already visible in full in the head.
            continue;
        }
        let mut wanted = false;
        for p in patterns.matches(&line) {
            if per_pattern[p] < opts.max_rows_per_pattern {
                per_pattern[p] += 1;
                wanted = true;
            }
        }
        if wanted {
            chosen.push(cut_line(line.trim_end_matches('\n'), opts.max_line_chars));
        }
    }

    let mut out = String::new();
    if !opts.match_only {
        out.push_str(&text[..head_end]);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[... cut at {} characters; {} rows in all]\n",
            opts.preview_chars,
            t.rows.len()
        ));
    }
    if chosen.is_empty() {
        return out;
    }
    out.push_str(MATCHED_ROWS);
    if !opts.match_only {
        let mut header = String::new();
        write_head(&mut header, &t.header, format);
        for header_line in header.lines() {
            out.push_str(&cut_line(header_line, opts.max_line_chars));
            out.push('\n');
        }
    }
    for row in chosen {
        out.push_str(&row);
        out.push('\n');
    }
    if !opts.match_only && format == TextFormat::Html {
        let mut tail = String::new();
        write_tail(&mut tail, format);
        out.push_str(&tail);
    }
    out
}

/// Byte offset of the `chars`-th character, or `None` when the text is no longer than that.
fn char_boundary(text: &str, chars: usize) -> Option<usize> {
    if text.len() <= chars {
        return None;
    }
    text.char_indices().nth(chars).map(|(i, _)| i)
}

/// At most `max_chars` characters; a cut line ends in `…` (which counts toward the limit).
fn cut_line(line: &str, max_chars: usize) -> String {
    match char_boundary(line, max_chars) {
        None => line.to_owned(),
        Some(_) if max_chars == 0 => String::new(),
        Some(_) => {
            let end = char_boundary(line, max_chars - 1).unwrap_or(line.len());
            format!("{}…", &line[..end])
        }
    }
}
