//! GitHub-flavoured Markdown pipe tables: a header row, a delimiter row (`| --- | :-: |`), then body rows
//! up to the first blank line or line without a pipe. A file may hold several tables between prose.
//!
//! Unlike GFM we keep ragged body rows as written (no padding or truncation to the header width), so
//! that a table survives a CSV → Markdown → parse round trip cell for cell.

use super::{Location, Parsed, ParsedTable};

pub(crate) fn parse(text: &str) -> Parsed {
    let lines: Vec<&str> = text.lines().collect();
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i + 1 < lines.len() {
        let (head, delimiter) = (lines[i], lines[i + 1]);
        if !head.contains('|') || !is_delimiter_row(delimiter) {
            i += 1;
            continue;
        }
        let header = split_row(head);
        let columns = split_row(delimiter).len();
        if columns != header.len() {
            parsed.problems.push((
                Location::Line(i + 2),
                format!(
                    "delimiter row has {columns} cells but the header has {}",
                    header.len()
                ),
            ));
            i += 2;
            continue;
        }
        let mut rows = Vec::new();
        i += 2;
        while i < lines.len() && lines[i].contains('|') && !lines[i].trim().is_empty() {
            rows.push(split_row(lines[i]));
            i += 1;
        }
        parsed.tables.push(ParsedTable {
            header,
            rows,
            ..ParsedTable::default()
        });
    }
    if parsed.tables.is_empty() && parsed.problems.is_empty() {
        parsed.problems.push((
            Location::Unknown,
            "no Markdown pipe table (header row followed by a `| --- |` delimiter row)".into(),
        ));
    }
    parsed
}

fn is_delimiter_row(line: &str) -> bool {
    let line = line.trim();
    // Without a pipe, `---` under a line is a heading underline or a rule, not a table.
    if !line.contains('-') || !line.contains('|') {
        return false;
    }
    let cells = split_row(line);
    !cells.is_empty()
        && cells.iter().all(|cell| {
            let inner = cell.trim_start_matches(':').trim_end_matches(':');
            !inner.is_empty() && inner.bytes().all(|b| b == b'-')
        })
}

/// Splits on unescaped pipes, dropping the optional outer pipes; `\|` becomes `|`; cells are trimmed.
fn split_row(line: &str) -> Vec<String> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = match line.strip_suffix('|') {
        Some(rest) if !rest.ends_with('\\') || rest.ends_with("\\\\") => rest,
        _ => line,
    };
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(ch),
        }
    }
    cells.push(cell.trim().to_owned());
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_pipes_and_outer_pipes() {
        assert_eq!(split_row("| a \\| b | c |"), vec!["a | b", "c"]);
        assert_eq!(split_row("a | b"), vec!["a", "b"]);
        assert_eq!(split_row("|  |"), vec![""]);
    }

    #[test]
    fn tables_between_prose() {
        let text = "intro | not a table\n\n| a | b |\n|---|:-:|\n| 1 | 2 |\n\ntext\n\n| x |\n| - |\n| y |\n";
        let parsed = parse(text);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.tables.len(), 2);
        assert_eq!(parsed.tables[0].rows, vec![vec!["1", "2"]]);
        assert_eq!(parsed.tables[1].header, vec!["x"]);
    }
}
