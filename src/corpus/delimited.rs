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

fn read_csv(text: &str, delimiter: u8, quoting: bool) -> Result<Vec<Vec<String>>, CorpusError> {
    if quoting {
        check_quotes(text.as_bytes(), delimiter)?;
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .quoting(quoting)
        .from_reader(text.as_bytes());
    let mut grid = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => grid.push(record.iter().map(str::to_owned).collect()),
            Ok(false) => break,
            Err(err) => {
                let at = err
                    .position()
                    .map_or(Location::Unknown, |pos| Location::Line(pos.line() as usize));
                return Err(CorpusError::malformed(at, err.to_string()));
            }
        }
    }
    Ok(grid)
}

/// The `csv` reader silently runs an unterminated quoted field to the end of the file, swallowing every
/// later row into one cell; that is a broken file, and we say where the quote opened.
fn check_quotes(bytes: &[u8], delimiter: u8) -> Result<(), CorpusError> {
    let mut pos = 0;
    while let Some(found) = memchr::memchr(b'"', &bytes[pos..]) {
        let open = pos + found;
        let at_field_start =
            open == 0 || matches!(bytes[open - 1], b'\n' | b'\r') || bytes[open - 1] == delimiter;
        pos = open + 1;
        if !at_field_start {
            // A quote inside an unquoted field is literal text.
            continue;
        }
        loop {
            let Some(found) = memchr::memchr(b'"', &bytes[pos..]) else {
                let line = memchr::memchr_iter(b'\n', &bytes[..open]).count() + 1;
                return Err(CorpusError::malformed(
                    Location::Line(line),
                    format!("unterminated quoted field (opened at byte {open})"),
                ));
            };
            let close = pos + found;
            if bytes.get(close + 1) == Some(&b'"') {
                pos = close + 2;
            } else {
                pos = close + 1;
                break;
            }
        }
    }
    Ok(())
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

    #[test]
    fn escaped_quotes_are_not_unterminated() {
        assert!(check_quotes(b"a,\"b \"\"x\"\" c\"\n1,2\n", b',').is_ok());
        assert!(check_quotes(b"a,b\"c\n", b',').is_ok());
        let err = check_quotes(b"a,b\n1,\"open\n2,3\n", b',').unwrap_err();
        assert!(err.to_string().starts_with("line 2: unterminated"), "{err}");
    }
}
