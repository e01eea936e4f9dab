//! Delimiter-separated files: RFC 4180 CSV, TSV, and TabFact's `#`-separated layout, all with the header
//! in the first line.
//!
//! TabFact's original files end in `.html.csv` whether they hold commas or `#`s, so the layout is
//! recognised by content ([`sniff`]), never by name.

use super::{CorpusError, Location, Parsed, ParsedTable, SourceFormat};

/// How many leading lines [`sniff`] looks at.
const SNIFF_LINES: usize = 32;

/// Guesses CSV, TSV or TabFact from the first lines of a delimiter-separated file.
pub(crate) fn sniff(text: &str) -> SourceFormat {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .take(SNIFF_LINES)
        .collect();
    let Some(first) = lines.first() else {
        return SourceFormat::Csv;
    };
    let has = |c: char| first.contains(c);
    if has('#') && !has(',') && !has('\t') {
        return SourceFormat::Tabfact;
    }
    if has('\t') && !has(',') {
        return SourceFormat::Tsv;
    }
    if has('#') {
        // A header with both: trust the separator whose field count is the same on every line.
        let consistent = |sep: char| {
            let n = first.matches(sep).count();
            n > 0 && lines.iter().all(|line| line.matches(sep).count() == n)
        };
        if consistent('#') && !consistent(',') {
            return SourceFormat::Tabfact;
        }
    }
    SourceFormat::Csv
}

/// Parses one table; the first line is the header. Rows may be ragged; blank lines are skipped.
pub(crate) fn parse(text: &str, format: SourceFormat) -> Result<Parsed, CorpusError> {
    let mut grid = match format {
        SourceFormat::Tabfact => split_lines(text, '#'),
        SourceFormat::Tsv => read_csv(text, b'\t', false)?,
        _ => read_csv(text, b',', true)?,
    };
    let header = if grid.is_empty() {
        Vec::new()
    } else {
        grid.remove(0)
    };
    Ok(Parsed::tables(vec![ParsedTable {
        header,
        rows: grid,
        ..ParsedTable::default()
    }]))
}

fn split_lines(text: &str, separator: char) -> Vec<Vec<String>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split(separator).map(str::to_owned).collect())
        .collect()
}

/// RFC 4180 reading, lenient the way spreadsheet exports need: CRLF, LF or CR line ends, ragged rows,
/// blank lines skipped, text after a closing quote kept. Hand-written rather than the `csv` crate because
/// a corpus is thousands of small files and `csv` builds its parser tables anew for each reader, which
/// cost more than the parsing itself; and because an unterminated quote must be an error with its line,
/// not a cell that silently swallows the rest of the file.
fn read_csv(text: &str, delimiter: u8, quoting: bool) -> Result<Vec<Vec<String>>, CorpusError> {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut grid = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut i = 0;
    while i < n {
        if row.is_empty() && matches!(bytes[i], b'\n' | b'\r') {
            i += 1;
            continue;
        }
        let field = if quoting && bytes[i] == b'"' {
            let open = i;
            let mut field = String::new();
            i += 1;
            loop {
                let Some(found) = memchr::memchr(b'"', &bytes[i..]) else {
                    let line = memchr::memchr_iter(b'\n', &bytes[..open]).count() + 1;
                    return Err(CorpusError::malformed(
                        Location::Line(line),
                        format!("unterminated quoted field (opened at byte {open})"),
                    ));
                };
                let close = i + found;
                field.push_str(&text[i..close]);
                if bytes.get(close + 1) == Some(&b'"') {
                    field.push('"');
                    i = close + 2;
                } else {
                    i = close + 1;
                    break;
                }
            }
            let end = field_end(bytes, i, delimiter);
            field.push_str(&text[i..end]);
            i = end;
            field
        } else {
            let end = field_end(bytes, i, delimiter);
            let field = text[i..end].to_owned();
            i = end;
            field
        };
        row.push(field);
        if i < n && bytes[i] == delimiter {
            i += 1;
            if i == n {
                row.push(String::new());
            }
            continue;
        }
        // End of line or of text: the record is complete.
        if i < n {
            i += if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
        }
        grid.push(std::mem::take(&mut row));
    }
    if !row.is_empty() {
        grid.push(row);
    }
    Ok(grid)
}

fn field_end(bytes: &[u8], from: usize, delimiter: u8) -> usize {
    memchr::memchr3(delimiter, b'\n', b'\r', &bytes[from..]).map_or(bytes.len(), |off| from + off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_tabfact_by_content() {
        assert_eq!(sniff("a#b#c\n1#2,5#3\n"), SourceFormat::Tabfact);
        assert_eq!(sniff("a,b\n1,2\n"), SourceFormat::Csv);
        assert_eq!(sniff("a\tb\n1\t2\n"), SourceFormat::Tsv);
        // A `#` inside a CSV cell does not make it TabFact.
        assert_eq!(sniff("no,name\n#1,x\n#2,y\n"), SourceFormat::Csv);
    }

    fn grid(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    #[test]
    fn quoting_rules() {
        let got = read_csv("a,\"b \"\"x\"\" c\"\r\n1,b\"c\n\n\"q\"tail,\"\",\n", b',', true).unwrap();
        assert_eq!(
            got,
            grid(&[&["a", "b \"x\" c"], &["1", "b\"c"], &["qtail", "", ""]])
        );
        assert_eq!(read_csv("a\rb", b',', true).unwrap(), grid(&[&["a"], &["b"]]));
        assert_eq!(read_csv("a,", b',', true).unwrap(), grid(&[&["a", ""]]));
        let err = read_csv("a,b\n1,\"open\n2,3\n", b',', true).unwrap_err();
        assert!(err.to_string().starts_with("line 2: unterminated"), "{err}");
    }

    /// The hand-written reader agrees with the `csv` crate wherever the crate does not error.
    #[test]
    fn agrees_with_the_csv_crate() {
        let text = "h1,h2,h3\n\"x,y\",2,\"line\nbreak\"\r\n,,\n\n\"\"\"\",\"a\"\"b\",c\nragged\n";
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes());
        let expected: Vec<Vec<String>> = reader
            .records()
            .map(|r| r.unwrap().iter().map(str::to_owned).collect())
            .collect();
        assert_eq!(read_csv(text, b',', true).unwrap(), expected);
    }
}
