//! Delimiter-separated files: RFC 4180 CSV, TSV, and TabFact's `#`-separated layout, all with the header
//! in the first line.
//!
//! TabFact's original files end in `.html.csv` whether they hold commas or `#`s, so the layout is
//! recognised by content ([`sniff`]), never by name.

use super::{CorpusError, Location, Parsed, ParsedTable, SourceFormat};

/// How many leading lines [`sniff`] looks at.
const SNIFF_LINES: usize = 32;

/// Guesses CSV, TSV or TabFact from the first lines of a delimiter-separated file.
const UNTERMINATED: &str = "unterminated quoted field";

pub(crate) fn sniff(text: &str) -> SourceFormat {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let Some(first) = lines.next() else {
        return SourceFormat::Csv;
    };
    let has = |c: char| first.contains(c);
    if has('#') && !has(',') && !has('\t') {
        return SourceFormat::Tabfact;
    }
    if has('\t') && !has(',') {
        return SourceFormat::Tsv;
    }
    if !has('#') {
        return SourceFormat::Csv;
    }
    // A header with both `#` and `,`: trust the separator whose count is the same on every line.
    let sample: Vec<&str> = std::iter::once(first)
        .chain(lines.take(SNIFF_LINES - 1))
        .collect();
    let consistent = |sep: char| {
        let n = first.matches(sep).count();
        n > 0 && sample.iter().all(|line| line.matches(sep).count() == n)
    };
    if consistent('#') && !consistent(',') {
        SourceFormat::Tabfact
    } else {
        SourceFormat::Csv
    }
}

/// Parses one table; the first line is the header. Rows may be ragged; blank lines are skipped.
pub(crate) fn parse(text: &str, format: SourceFormat) -> Result<Parsed, CorpusError> {
    let mut grid = Grid::default();
    scan(text, format, &mut grid)?;
    let mut rows = grid.rows;
    let header = if rows.is_empty() {
        Vec::new()
    } else {
        rows.remove(0)
    };
    Ok(Parsed::tables(vec![ParsedTable {
        header,
        rows,
        ..ParsedTable::default()
    }]))
}

/// A delimited file rewritten as canonical CSV (exactly what [`super::serialize`] makes of the parsed
/// table), without building the table itself.
#[derive(Debug, Default)]
pub(crate) struct CanonicalCsv {
    pub text: String,
    /// Whether a row below the header has a non-blank cell; tables without one are empty.
    pub has_data: bool,
}

/// The loader's fast path: the grep stage needs only the text, and a corpus of thousands of small
/// files spends most of its load time allocating one `String` per cell, so the cells are parsed again
/// from this text only when someone asks for the table.
pub(crate) fn canonical(text: &str, format: SourceFormat) -> Result<CanonicalCsv, CorpusError> {
    let delimiter = match format {
        SourceFormat::Tabfact => b'#',
        SourceFormat::Tsv => b'\t',
        _ => b',',
    };
    if let Some(plain) = canonical_plain(text, delimiter) {
        return Ok(plain);
    }
    let mut sink = Canonical {
        out: CanonicalCsv {
            text: String::with_capacity(text.len() + text.len() / 8),
            has_data: false,
        },
        records: 0,
        fields: 0,
        last_empty: false,
    };
    scan(text, format, &mut sink)?;
    Ok(sink.out)
}

/// Lines [`canonical_salvaging`] drops at most before it gives the file up: each drop rescans
/// the file, and a file this broken is likely not CSV at all.
const MAX_DROPPED_LINES: usize = 64;

/// [`canonical`], except that a line opening a quote that never closes costs that line, not the
/// file: the line is dropped and the text scanned again. Returns the table and the 1-based numbers
/// (in `text`) of the dropped lines, each with the scanner's reason.
pub(crate) fn canonical_salvaging(
    text: &str,
    format: SourceFormat,
) -> Result<(CanonicalCsv, Vec<(usize, String)>), CorpusError> {
    let first = match canonical(text, format) {
        Err(CorpusError::Malformed {
            at: Location::Line(line),
            reason,
        }) if reason.starts_with(UNTERMINATED) => (line, reason),
        other => return other.map(|csv| (csv, Vec::new())),
    };
    // Original line numbers of the lines still kept, in order.
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut kept: Vec<usize> = (1..=lines.len()).collect();
    let mut dropped = Vec::new();
    let mut broken = first;
    loop {
        let (line, reason) = broken;
        if dropped.len() == MAX_DROPPED_LINES || line == 0 || line > kept.len() {
            return Err(CorpusError::malformed(
                Location::Line(kept.get(line.wrapping_sub(1)).copied().unwrap_or(line)),
                reason,
            ));
        }
        // The scanner's byte offset is in the repaired text; the line number says enough.
        drop(reason);
        dropped.push((kept.remove(line - 1), UNTERMINATED.to_string()));
        let repaired: String = kept.iter().map(|&n| lines[n - 1]).collect();
        broken = match canonical(&repaired, format) {
            Err(CorpusError::Malformed {
                at: Location::Line(line),
                reason,
            }) if reason.starts_with(UNTERMINATED) => (line, reason),
            other => return other.map(|csv| (csv, dropped)),
        };
    }
}

/// The common case, a text in which no field needs quoting (no `"`, and no `,` unless it is the
/// delimiter): its canonical CSV is its non-empty lines with LF endings and the delimiter made a comma.
/// `None` when the full scanner is needed.
fn canonical_plain(text: &str, delimiter: u8) -> Option<CanonicalCsv> {
    let bytes = text.as_bytes();
    if memchr::memchr(b'"', bytes).is_some()
        || (delimiter != b',' && memchr::memchr(b',', bytes).is_some())
    {
        return None;
    }
    // A lone CR ends a record too; leave that rarity to the scanner.
    if memchr::memchr_iter(b'\r', bytes).any(|pos| bytes.get(pos + 1) != Some(&b'\n')) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 1);
    let mut has_data = false;
    let mut header = true;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if !header && !has_data {
            has_data = line
                .split(char::from(delimiter))
                .any(|cell| !cell.trim().is_empty());
        }
        header = false;
        if delimiter == b',' {
            out.push_str(line);
        } else {
            out.extend(
                line.chars()
                    .map(|c| if c == char::from(delimiter) { ',' } else { c }),
            );
        }
        out.push('\n');
    }
    Some(CanonicalCsv {
        text: out,
        has_data,
    })
}

/// Receives the fields of a delimited text in order.
trait Sink {
    fn field(&mut self, value: &str);
    fn end_record(&mut self);
}

#[derive(Default)]
struct Grid {
    rows: Vec<Vec<String>>,
    row: Vec<String>,
}

impl Sink for Grid {
    fn field(&mut self, value: &str) {
        if self.row.capacity() == 0 {
            // Rows are usually as wide as the one before.
            let width = self.rows.last().map_or(8, Vec::len);
            self.row.reserve(width);
        }
        self.row.push(value.to_owned());
    }

    fn end_record(&mut self) {
        self.rows.push(std::mem::take(&mut self.row));
    }
}

struct Canonical {
    out: CanonicalCsv,
    records: usize,
    fields: usize,
    last_empty: bool,
}

impl Sink for Canonical {
    fn field(&mut self, value: &str) {
        if self.fields > 0 {
            self.out.text.push(',');
        }
        push_csv_field(&mut self.out.text, value);
        self.fields += 1;
        self.last_empty = value.is_empty();
        if self.records > 0 && !value.trim().is_empty() {
            self.out.has_data = true;
        }
    }

    fn end_record(&mut self) {
        if self.fields == 1 && self.last_empty {
            self.out.text.push_str("\"\"");
        }
        self.out.text.push('\n');
        self.records += 1;
        self.fields = 0;
    }
}

/// One CSV field, quoted only when it has to be (a delimiter, quote or line break inside).
pub(crate) fn push_csv_field(out: &mut String, cell: &str) {
    if cell.contains([',', '"', '\n', '\r']) {
        out.push('"');
        for (i, part) in cell.split('"').enumerate() {
            if i > 0 {
                out.push_str("\"\"");
            }
            out.push_str(part);
        }
        out.push('"');
    } else {
        out.push_str(cell);
    }
}

fn scan(text: &str, format: SourceFormat, sink: &mut impl Sink) -> Result<(), CorpusError> {
    match format {
        SourceFormat::Tabfact => scan_delimited(text, b'#', false, sink),
        SourceFormat::Tsv => scan_delimited(text, b'\t', false, sink),
        _ => scan_delimited(text, b',', true, sink),
    }
}

/// RFC 4180 reading, lenient the way spreadsheet exports need: CRLF, LF or CR line ends, ragged rows,
/// blank lines skipped, text after a closing quote kept. Hand-written rather than the `csv` crate because
/// a corpus is thousands of small files and `csv` builds its parser tables anew for each reader, which
/// cost more than the parsing itself; and because an unterminated quote must be an error with its line,
/// not a cell that silently swallows the rest of the file.
fn scan_delimited(
    text: &str,
    delimiter: u8,
    quoting: bool,
    sink: &mut impl Sink,
) -> Result<(), CorpusError> {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut quoted = String::new();
    let mut in_record = false;
    let mut i = 0;
    while i < n {
        if !in_record && matches!(bytes[i], b'\n' | b'\r') {
            i += 1;
            continue;
        }
        in_record = true;
        if quoting && bytes[i] == b'"' {
            let open = i;
            quoted.clear();
            i += 1;
            loop {
                let Some(found) = memchr::memchr(b'"', &bytes[i..]) else {
                    let line = memchr::memchr_iter(b'\n', &bytes[..open]).count() + 1;
                    return Err(CorpusError::malformed(
                        Location::Line(line),
                        format!("{UNTERMINATED} (opened at byte {open})"),
                    ));
                };
                let close = i + found;
                quoted.push_str(&text[i..close]);
                if bytes.get(close + 1) == Some(&b'"') {
                    quoted.push('"');
                    i = close + 2;
                } else {
                    i = close + 1;
                    break;
                }
            }
            let end = field_end(bytes, i, delimiter);
            quoted.push_str(&text[i..end]);
            i = end;
            sink.field(&quoted);
        } else {
            let end = field_end(bytes, i, delimiter);
            sink.field(&text[i..end]);
            i = end;
        }
        if i < n && bytes[i] == delimiter {
            i += 1;
            if i == n {
                sink.field("");
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
        sink.end_record();
        in_record = false;
    }
    if in_record {
        sink.end_record();
    }
    Ok(())
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

    fn read_csv(text: &str, delimiter: u8, quoting: bool) -> Result<Vec<Vec<String>>, CorpusError> {
        let mut grid = Grid::default();
        scan_delimited(text, delimiter, quoting, &mut grid)?;
        Ok(grid.rows)
    }

    #[test]
    fn plain_fast_path_equals_the_scanner() {
        for (text, delimiter) in [
            ("a,b\r\n1, \r\n\r\n,\r\nx", b','),
            ("h#i\n1# 2\n\n", b'#'),
            ("h\ti\r\n \t\r\n", b'\t'),
        ] {
            let plain = canonical_plain(text, delimiter).expect("plain text");
            let mut sink = Canonical {
                out: CanonicalCsv::default(),
                records: 0,
                fields: 0,
                last_empty: false,
            };
            scan_delimited(text, delimiter, delimiter == b',', &mut sink).unwrap();
            assert_eq!(plain.text, sink.out.text, "{text:?}");
            assert_eq!(plain.has_data, sink.out.has_data, "{text:?}");
        }
        assert!(canonical_plain("a,\"b\"", b',').is_none());
        assert!(canonical_plain("a#b,c", b'#').is_none());
        assert!(canonical_plain("a\rb", b',').is_none());
    }

    #[test]
    fn canonical_text_is_the_serialization_of_the_parse() {
        for (text, format) in [
            (
                "a,\"b,\"\"c\"\r\n\r\n\"\",x\n\"\"\n1,\"two\nlines\"",
                SourceFormat::Csv,
            ),
            ("h#i\r\n1#a,b\r\n", SourceFormat::Tabfact),
            ("h\ti\n\"q\t\n", SourceFormat::Tsv),
        ] {
            let parsed = parse(text, format).unwrap().tables.remove(0);
            let table = super::super::Table {
                id: String::new(),
                source_format: format,
                header: parsed.header,
                rows: parsed.rows,
                meta: Default::default(),
            };
            let canonical = canonical(text, format).unwrap();
            assert_eq!(
                canonical.text,
                super::super::serialize(&table, super::super::TextFormat::Csv)
            );
            assert!(canonical.has_data);
        }
        assert!(!canonical("a,b\n , \n", SourceFormat::Csv).unwrap().has_data);
    }

    fn grid(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    #[test]
    fn quoting_rules() {
        let got = read_csv(
            "a,\"b \"\"x\"\" c\"\r\n1,b\"c\n\n\"q\"tail,\"\",\n",
            b',',
            true,
        )
        .unwrap();
        assert_eq!(
            got,
            grid(&[&["a", "b \"x\" c"], &["1", "b\"c"], &["qtail", "", ""]])
        );
        assert_eq!(
            read_csv("a\rb", b',', true).unwrap(),
            grid(&[&["a"], &["b"]])
        );
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
