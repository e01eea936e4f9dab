//! Text serializations of a table (CSV, Markdown, HTML), the seeded `mixed` assignment, the parse side
//! used for round trips, and `transpose`.
//!
//! Every serialization is `head`, one `row` per table row, then `tail`, and (CSV cells with line breaks
//! aside) each row is exactly one line. Previews rely on that: they can cut a serialization at a row
//! boundary and render a single matched row under the same header without re-parsing the text.

use super::{delimited, html, markdown, CorpusError, SourceFormat, Table, TableMeta, TextFormat};

/// How a [`super::Corpus`] turns each table into the text that grep searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serialization {
    /// Each table in the format it was read from (JSON and TabFact tables as CSV).
    Own,
    /// Every table in one format.
    Fixed(TextFormat),
    /// One of CSV, Markdown, HTML per table, chosen by [`mixed_format`] from the id and the seed.
    Mixed { seed: u64 },
}

impl Serialization {
    pub fn format_for(self, table: &Table) -> TextFormat {
        match self {
            Serialization::Own => table.source_format.text_format(),
            Serialization::Fixed(format) => format,
            Serialization::Mixed { seed } => mixed_format(&table.id, seed),
        }
    }
}

/// The whole table as text in `format`.
pub fn serialize(table: &Table, format: TextFormat) -> String {
    let cells: usize = table.header.iter().map(String::len).sum::<usize>()
        + table
            .rows
            .iter()
            .flat_map(|row| row.iter().map(String::len))
            .sum::<usize>();
    let count: usize = table.header.len() + table.rows.iter().map(Vec::len).sum::<usize>();
    // Room for a separator per cell plus the markup of the wordiest format (HTML: `<td></td>`).
    let markup = match format {
        TextFormat::Csv => 1,
        TextFormat::Markdown => 3,
        TextFormat::Html => 9,
    };
    let mut out = String::with_capacity(cells + markup * count + 16 * (table.rows.len() + 4));
    write_head(&mut out, &table.header, format);
    for row in &table.rows {
        write_row(&mut out, row, format);
    }
    write_tail(&mut out, format);
    out
}

/// Everything before the first row: the header (and for HTML the opening tags).
pub(crate) fn write_head(out: &mut String, header: &[String], format: TextFormat) {
    match format {
        TextFormat::Csv => csv_line(out, header),
        TextFormat::Markdown => {
            // A pipe table needs at least one column; an empty header becomes one empty cell.
            let width = header.len().max(1);
            if header.is_empty() {
                out.push_str("|  |\n");
            } else {
                markdown_line(out, header);
            }
            out.push('|');
            for _ in 0..width {
                out.push_str(" --- |");
            }
            out.push('\n');
        }
        TextFormat::Html => {
            out.push_str("<table>\n<thead>\n");
            html_line(out, header, "th");
            out.push_str("</thead>\n<tbody>\n");
        }
    }
}

/// One row; always ends with a newline.
pub(crate) fn write_row(out: &mut String, row: &[String], format: TextFormat) {
    match format {
        TextFormat::Csv => csv_line(out, row),
        TextFormat::Markdown => markdown_line(out, row),
        TextFormat::Html => html_line(out, row, "td"),
    }
}

pub(crate) fn write_tail(out: &mut String, format: TextFormat) {
    if format == TextFormat::Html {
        out.push_str("</tbody>\n</table>\n");
    }
}

fn csv_line(out: &mut String, cells: &[String]) {
    // A lone empty field would be an empty line, which CSV readers drop: quote it so the row survives.
    if let [only] = cells {
        if only.is_empty() {
            out.push_str("\"\"\n");
            return;
        }
    }
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        delimited::push_csv_field(out, cell);
    }
    out.push('\n');
}

fn markdown_line(out: &mut String, cells: &[String]) {
    out.push('|');
    for cell in cells {
        out.push(' ');
        for ch in cell.chars() {
            match ch {
                '|' => out.push_str("\\|"),
                // A pipe table row is one line; line breaks inside a cell become spaces.
                '\n' | '\r' => out.push(' '),
                _ => out.push(ch),
            }
        }
        out.push_str(" |");
    }
    out.push('\n');
}

fn html_line(out: &mut String, cells: &[String], tag: &str) {
    out.push_str("<tr>");
    for cell in cells {
        out.push('<');
        out.push_str(tag);
        out.push('>');
        for ch in cell.chars() {
            match ch {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '\n' | '\r' => out.push(' '),
                _ => out.push(ch),
            }
        }
        out.push_str("</");
        out.push_str(tag);
        out.push('>');
    }
    out.push_str("</tr>\n");
}

/// Parses text written in `format` back into tables (ids `"0"`, `"1"`, … in order of appearance).
/// CSV text holds exactly one table whose first line is the header.
pub fn parse_text(text: &str, format: TextFormat) -> Result<Vec<Table>, CorpusError> {
    let (source_format, parsed) = match format {
        TextFormat::Csv => (
            SourceFormat::Csv,
            delimited::parse(text, SourceFormat::Csv)?,
        ),
        TextFormat::Markdown => (SourceFormat::Markdown, markdown::parse(text)),
        TextFormat::Html => (SourceFormat::Html, html::parse(text)),
    };
    if let Some((at, reason)) = parsed.problems.into_iter().next() {
        return Err(CorpusError::Malformed { at, reason });
    }
    Ok(parsed
        .tables
        .into_iter()
        .enumerate()
        .map(|(i, t)| Table {
            id: i.to_string(),
            source_format,
            header: t.header,
            rows: t.rows,
            meta: TableMeta {
                caption: t.caption,
                title: t.title,
                ..TableMeta::default()
            },
        })
        .collect())
}

/// The format a table gets in a `mixed` corpus: a pure function of the id and the seed, so the same
/// corpus and seed always give the same assignment on every machine.
pub fn mixed_format(table_id: &str, seed: u64) -> TextFormat {
    // FNV-1a over the id, then a splitmix64 finaliser with the seed folded in: stable across Rust
    // versions, unlike `std`'s hashers.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in table_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = hash ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    match z % 3 {
        0 => TextFormat::Csv,
        1 => TextFormat::Markdown,
        _ => TextFormat::Html,
    }
}

/// Swaps rows and columns of the whole grid (header included), so the first column becomes the header.
/// Ragged rows are padded with empty cells. Id, format and metadata are kept.
pub fn transpose(table: &Table) -> Table {
    let grid_rows = 1 + table.rows.len();
    let width = table
        .rows
        .iter()
        .map(Vec::len)
        .chain(std::iter::once(table.header.len()))
        .max()
        .unwrap_or(0);
    let cell = |r: usize, c: usize| -> String {
        let row = if r == 0 {
            &table.header
        } else {
            &table.rows[r - 1]
        };
        row.get(c).cloned().unwrap_or_default()
    };
    let mut columns = (0..width).map(|c| (0..grid_rows).map(|r| cell(r, c)).collect::<Vec<_>>());
    let header = columns.next().unwrap_or_default();
    let rows = columns.collect();
    Table {
        id: table.id.clone(),
        source_format: table.source_format,
        header,
        rows,
        meta: table.meta.clone(),
    }
}
