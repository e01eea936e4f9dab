//! The table model, loaders for every format we meet in the wild (CSV/TSV, Markdown pipe tables, HTML,
//! JSON/JSONL, TabFact's `#`-separated files), serializers (CSV, Markdown, HTML, `mixed`, transpose) and
//! the in-memory corpus store.
//!
//! Storage metadata (paths, captions, titles) lives in [`TableMeta`] for evaluation only; nothing that
//! builds a prompt may read it. The serialized text a [`Corpus`] keeps per table is built from the header
//! and rows alone, so previews cut from it cannot leak a file name or a caption.
//!
//! Loading never stops at one bad file: [`Corpus::load`] parses files in parallel, reports each malformed
//! file in [`LoadReport::skipped`] (with line or offset when known) and keeps everything else.

mod delimited;
mod html;
mod json;
mod load;
mod markdown;
mod serialize;
mod table;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

pub use load::{LoadOptions, LoadReport, Skipped};
pub use serialize::{mixed_format, parse_text, serialize, transpose, Serialization};
pub use table::{SourceFormat, Table, TableMeta, TextFormat};

pub(crate) use serialize::{write_head, write_row, write_tail};

/// Where in a file a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Unknown,
    /// 1-based line number.
    Line(usize),
    /// 0-based byte offset.
    Offset(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Unknown => Ok(()),
            Location::Line(line) => write!(f, "line {line}: "),
            Location::Offset(offset) => write!(f, "byte {offset}: "),
        }
    }
}

/// Errors of the corpus layer.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The text is not a table in the expected format.
    #[error("{at}{reason}")]
    Malformed { at: Location, reason: String },
}

impl CorpusError {
    pub(crate) fn malformed(at: Location, reason: impl Into<String>) -> Self {
        CorpusError::Malformed {
            at,
            reason: reason.into(),
        }
    }
}

/// A table as a parser sees it, before the loader gives it an id and a source format.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ParsedTable {
    /// An id the file itself gives the table (JSON `id`), if any.
    pub local_id: Option<String>,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub caption: Option<String>,
    pub title: Option<String>,
}

/// What one file parsed into: the tables that are sound, and the problems that cost a table or a line.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub tables: Vec<ParsedTable>,
    pub problems: Vec<(Location, String)>,
}

impl Parsed {
    pub(crate) fn tables(tables: Vec<ParsedTable>) -> Self {
        Parsed {
            tables,
            problems: Vec::new(),
        }
    }
}

/// Tables plus the serialized text that grep searches and previews are cut from.
///
/// The text of table `i` is built once, at construction, because every grep round scans all of it.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    tables: Vec<Table>,
    texts: Vec<String>,
    formats: Vec<TextFormat>,
    by_id: HashMap<String, usize>,
}

impl Corpus {
    /// A corpus whose texts are each table in its own format ([`SourceFormat::text_format`]).
    pub fn from_tables(tables: Vec<Table>) -> Corpus {
        Corpus::from_tables_as(tables, Serialization::Own)
    }

    /// A corpus whose texts follow `serialization`: the format robustness runs (CSV, Markdown, HTML,
    /// Mixed) search the same tables in different clothes.
    pub fn from_tables_as(tables: Vec<Table>, serialization: Serialization) -> Corpus {
        use rayon::prelude::*;
        let formats: Vec<TextFormat> = tables.iter().map(|t| serialization.format_for(t)).collect();
        let texts: Vec<String> = tables
            .par_iter()
            .zip(formats.par_iter())
            .map(|(table, &format)| serialize(table, format))
            .collect();
        // First occurrence wins so that a duplicate id cannot shadow the table listed first.
        let mut by_id = HashMap::with_capacity(tables.len());
        for (i, table) in tables.iter().enumerate() {
            by_id.entry(table.id.clone()).or_insert(i);
        }
        Corpus {
            tables,
            texts,
            formats,
            by_id,
        }
    }

    /// The same tables, serialized again.
    pub fn reserialized(&self, serialization: Serialization) -> Corpus {
        Corpus::from_tables_as(self.tables.clone(), serialization)
    }

    pub fn len(&self) -> usize {
        self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub fn table(&self, i: usize) -> &Table {
        &self.tables[i]
    }

    /// The serialization searched by grep and shown (cut) in previews.
    pub fn text(&self, i: usize) -> &str {
        &self.texts[i]
    }

    /// The format of [`Corpus::text`] for table `i`.
    pub fn text_format(&self, i: usize) -> TextFormat {
        self.formats[i]
    }

    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }
}
