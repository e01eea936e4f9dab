//! Tables cut into row-aligned Markdown chunks for chunk retrieval (TableRAG's text knowledge
//! base): every chunk repeats the header, holds whole rows, and overlaps the previous chunk by
//! about a fifth of its rows, so a row near a border is found with its neighbours.
//!
//! Why rows and characters, not the paper's 1,000-token windows: our default encoder (MiniLM)
//! reads 256 tokens, and a chunk cut mid-row loses the header-to-cell pairing that makes a table
//! row findable. Chunks carry no table id, file name or caption: retrieval must work from content.

use crate::corpus::Table;

/// One chunk of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The table's index in the corpus.
    pub table: usize,
    /// The first row it holds (0-based, data rows).
    pub first_row: usize,
    pub text: String,
}

/// How tables are cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkOptions {
    /// Most characters of a chunk; a single row longer than this is cut (with its header).
    pub max_chars: usize,
    /// Share of a chunk's rows repeated at the start of the next one.
    pub overlap: f64,
}

impl Default for ChunkOptions {
    /// At most MiniLM's 256 word pieces for nearly every chunk of table text (names, numbers and
    /// Markdown pipes split into ~2 characters a piece; at 700 characters a quarter of the
    /// Spider TCR chunks were cut), 20 % row overlap.
    fn default() -> Self {
        Self {
            max_chars: 500,
            overlap: 0.2,
        }
    }
}

fn markdown_row(cells: &[String]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| c.replace('|', "\\|").replace('\n', " "))
        .collect();
    format!("| {} |", cells.join(" | "))
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// The chunks of `table` (corpus index `index`), in row order. A table without rows is one
/// chunk of its header.
pub fn chunk_table(index: usize, table: &Table, options: &ChunkOptions) -> Vec<Chunk> {
    let header = format!(
        "{}\n|{}",
        markdown_row(&table.header),
        "---|".repeat(table.header.len().max(1))
    );
    let header = cut(&header, options.max_chars / 2);
    let rows: Vec<String> = table.rows.iter().map(|r| markdown_row(r)).collect();
    if rows.is_empty() {
        return vec![Chunk {
            table: index,
            first_row: 0,
            text: header,
        }];
    }
    let budget = options.max_chars.saturating_sub(header.len() + 1).max(1);
    let mut chunks = Vec::new();
    let mut start = 0;
    loop {
        let mut end = start;
        let mut used = 0;
        while end < rows.len() && (end == start || used + rows[end].len() < budget) {
            used += rows[end].len() + 1;
            end += 1;
        }
        let body: Vec<String> = rows[start..end].iter().map(|r| cut(r, budget)).collect();
        chunks.push(Chunk {
            table: index,
            first_row: start,
            text: format!("{header}\n{}", body.join("\n")),
        });
        if end >= rows.len() {
            break;
        }
        let overlap = ((end - start) as f64 * options.overlap).floor() as usize;
        // At least one new row per chunk, so the loop always ends.
        start = (end - overlap.min(end - start - 1)).max(start + 1);
    }
    chunks
}

/// The chunks of every table, table by table.
pub fn chunk_tables<'t>(
    tables: impl IntoIterator<Item = &'t Table>,
    options: &ChunkOptions,
) -> Vec<Chunk> {
    tables
        .into_iter()
        .enumerate()
        .flat_map(|(i, table)| chunk_table(i, table, options))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{SourceFormat, TableMeta};

    fn table(rows: usize) -> Table {
        Table {
            id: "secret/file_name.csv".into(),
            source_format: SourceFormat::Csv,
            header: vec!["Name".into(), "Age".into()],
            rows: (0..rows)
                .map(|i| vec![format!("person number {i}"), format!("{}", 20 + i)])
                .collect(),
            meta: TableMeta::default(),
        }
    }

    #[test]
    fn chunks_hold_whole_rows_under_the_header_and_overlap() {
        let options = ChunkOptions {
            max_chars: 120,
            overlap: 0.5,
        };
        let chunks = chunk_table(7, &table(10), &options);
        assert!(chunks.len() > 2, "{chunks:?}");
        for chunk in &chunks {
            assert_eq!(chunk.table, 7);
            assert!(chunk.text.starts_with("| Name | Age |\n|---|---|\n"));
            assert!(chunk.text.chars().count() <= 120, "{}", chunk.text);
            assert!(!chunk.text.contains("secret"));
            // Whole rows only: every line is a complete Markdown row.
            assert!(chunk
                .text
                .lines()
                .all(|l| l.starts_with('|') && l.ends_with('|')));
        }
        // Every row is in some chunk; consecutive chunks share rows.
        for i in 0..10 {
            assert!(chunks
                .iter()
                .any(|c| c.text.contains(&format!("person number {i} |"))));
        }
        for pair in chunks.windows(2) {
            assert!(pair[1].first_row > pair[0].first_row);
            let last_of_first = pair[0].text.lines().last().unwrap();
            assert!(pair[1].text.contains(last_of_first), "{pair:?}");
        }
    }

    #[test]
    fn an_oversized_row_and_an_empty_table_still_give_chunks() {
        let mut wide = table(1);
        wide.rows[0][0] = "x".repeat(5000);
        let chunks = chunk_table(0, &wide, &ChunkOptions::default());
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].text.chars().count() <= ChunkOptions::default().max_chars + 1);
        let chunks = chunk_table(3, &table(0), &ChunkOptions::default());
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "| Name | Age |\n|---|---|");
    }
}
