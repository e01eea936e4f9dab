//! What `tableseek corpus` reports and writes: a loaded corpus's statistics, and the corpus
//! written out again in one text format (or a seeded mix), each table in its own file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use super::{serialize, transpose, Corpus, CorpusError, LoadReport, Serialization, SourceFormat};
use super::{Table, TextFormat};

/// A corpus's size and what its loading lost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorpusStats {
    pub tables: usize,
    pub skipped: Vec<SkippedFile>,
    pub by_format: BTreeMap<SourceFormat, usize>,
    pub rows: usize,
    /// Header cells included.
    pub cells: usize,
    pub bytes: u64,
    pub files: usize,
    pub empty_tables: usize,
    pub ignored_files: usize,
    pub warnings: Vec<String>,
    /// Files read in another encoding than UTF-8, and which.
    pub transcoded: Vec<TranscodedFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedFile {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscodedFile {
    pub path: String,
    pub encoding: String,
}

/// The human-readable report of `tableseek corpus stats`, one fact per line.
impl std::fmt::Display for CorpusStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "tables        {}", self.tables)?;
        for (format, n) in &self.by_format {
            writeln!(f, "  {:<11} {n}", format!("{format:?}").to_lowercase())?;
        }
        writeln!(f, "rows          {}", self.rows)?;
        writeln!(f, "cells         {}", self.cells)?;
        writeln!(f, "files         {} ({} bytes)", self.files, self.bytes)?;
        writeln!(f, "empty tables  {}", self.empty_tables)?;
        writeln!(f, "ignored files {}", self.ignored_files)?;
        writeln!(f, "skipped       {}", self.skipped.len())?;
        for skipped in &self.skipped {
            writeln!(f, "  {}: {}", skipped.path, skipped.reason)?;
        }
        writeln!(f, "transcoded    {}", self.transcoded.len())?;
        for file in &self.transcoded {
            writeln!(f, "  {}: from {}", file.path, file.encoding)?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        Ok(())
    }
}

impl CorpusStats {
    pub fn of(corpus: &Corpus, report: &LoadReport) -> Self {
        let mut by_format = BTreeMap::new();
        let (mut rows, mut cells) = (0, 0);
        for table in corpus.tables() {
            *by_format.entry(table.source_format).or_insert(0) += 1;
            rows += table.rows.len();
            cells += table.header.len() + table.rows.iter().map(Vec::len).sum::<usize>();
        }
        CorpusStats {
            tables: corpus.len(),
            skipped: report
                .skipped
                .iter()
                .map(|s| SkippedFile {
                    path: s.path.display().to_string(),
                    reason: s.reason.clone(),
                })
                .collect(),
            by_format,
            rows,
            cells,
            bytes: report.bytes,
            files: report.files,
            empty_tables: report.empty_tables,
            ignored_files: report.ignored.len(),
            warnings: report.warnings.clone(),
            transcoded: report
                .transcoded
                .iter()
                .map(|(path, encoding)| TranscodedFile {
                    path: path.display().to_string(),
                    encoding: encoding.clone(),
                })
                .collect(),
        }
    }
}

/// Writes every table of `corpus` under `out` in the format `serialization` picks for it
/// (transposed first if asked), named by [`output_name`]; returns how many files were written.
pub fn export(
    corpus: &Corpus,
    serialization: Serialization,
    transposed: bool,
    out: &Path,
) -> Result<usize, CorpusError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CorpusError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut written = BTreeSet::new();
    for table in corpus.tables() {
        let table: Table = if transposed {
            transpose(table)
        } else {
            table.clone()
        };
        let format = serialization.format_for(&table);
        let mut name = output_name(&table.id, format);
        if !written.insert(name.clone()) {
            // Two inputs with the same stem (`a.csv`, `a.md`): keep the full id for the later one.
            name = format!("{}.{}", table.id.replace('#', "__"), extension(format));
            written.insert(name.clone());
        }
        let path = out.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, serialize(&table, format)).map_err(io(&path))?;
    }
    Ok(written.len())
}

fn extension(format: TextFormat) -> &'static str {
    match format {
        TextFormat::Csv => "csv",
        TextFormat::Markdown => "md",
        TextFormat::Html => "html",
    }
}

/// `dir/t.csv` → `dir/t.md`; `t.jsonl#7` → `t__7.md`. The last extension goes only when it is a table
/// format's, so `x.html.csv` keeps its stem `x.html`.
pub fn output_name(id: &str, format: TextFormat) -> String {
    let (path, fragment) = match id.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (id, None),
    };
    let stem = match path.rsplit_once('.') {
        Some((stem, ext))
            if !stem.is_empty()
                && !ext.contains('/')
                && [
                    "csv", "tsv", "tab", "md", "markdown", "html", "htm", "json", "jsonl", "ndjson",
                ]
                .contains(&ext.to_ascii_lowercase().as_str()) =>
        {
            stem
        }
        _ => path,
    };
    let fragment = fragment
        .map(|f| format!("__{}", f.replace(['/', '\\'], "_")))
        .unwrap_or_default();
    format!("{stem}{fragment}.{}", extension(format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_keep_non_table_extensions_and_fragments() {
        assert_eq!(output_name("dir/t.csv", TextFormat::Markdown), "dir/t.md");
        assert_eq!(output_name("t.jsonl#7", TextFormat::Markdown), "t__7.md");
        assert_eq!(output_name("x.html.csv", TextFormat::Html), "x.html.html");
        assert_eq!(output_name("README", TextFormat::Csv), "README.csv");
    }
}
