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
pub mod encoding;
pub mod export;
mod html;
mod json;
mod load;
mod markdown;
mod serialize;
mod table;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use rayon::prelude::*;

pub use load::{LoadOptions, LoadReport, Skipped, DEFAULT_MAX_TABLE_BYTES};
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
    /// The corpus would not fit the memory budget; nothing was read.
    #[error(
        "{}: the table files take {bytes} bytes, over the {limit}-byte corpus limit \
         (--max-corpus-bytes; by default half of the memory available): the corpus is held \
         in memory, so nothing was loaded",
        path.display()
    )]
    TooLarge {
        path: PathBuf,
        bytes: u64,
        limit: u64,
    },
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
/// A loaded corpus keeps CSV-like tables as text only and parses their cells on first use of
/// [`Corpus::table`] or [`Corpus::tables`]: a grep over thousands of files then costs what reading them
/// costs, not one allocation per cell.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    ids: Vec<String>,
    texts: Vec<String>,
    formats: Vec<TextFormat>,
    by_id: HashMap<String, usize>,
    tables: OnceLock<Vec<Table>>,
    /// What each table is built from until `tables` is; empty when it was built at construction.
    pending: Vec<Pending>,
}

/// A loaded table before [`Corpus::tables`] is needed.
#[derive(Debug, Clone)]
pub(crate) enum Pending {
    /// Formats whose text would not re-parse to exactly the same cells are kept parsed.
    Table(Table),
    /// Header and rows are parsed from the table's canonical CSV text when needed.
    Csv {
        id: String,
        source_format: SourceFormat,
        meta: TableMeta,
    },
}

impl Corpus {
    /// A corpus whose texts are each table in its own format ([`SourceFormat::text_format`]).
    pub fn from_tables(tables: Vec<Table>) -> Corpus {
        Corpus::from_tables_as(tables, Serialization::Own)
    }

    /// A corpus whose texts follow `serialization`: the format robustness runs (CSV, Markdown, HTML,
    /// Mixed) search the same tables in different clothes.
    pub fn from_tables_as(tables: Vec<Table>, serialization: Serialization) -> Corpus {
        let formats: Vec<TextFormat> = tables.iter().map(|t| serialization.format_for(t)).collect();
        let texts: Vec<String> = tables
            .par_iter()
            .zip(formats.par_iter())
            .map(|(table, &format)| serialize(table, format))
            .collect();
        let ids = tables.iter().map(|t| t.id.clone()).collect();
        Corpus::assemble(ids, texts, formats, OnceLock::from(tables), Vec::new())
    }

    /// A loaded corpus: CSV-like tables come with their canonical CSV text, the rest parsed.
    pub(crate) fn from_loaded(items: Vec<(Pending, Option<String>)>) -> Corpus {
        let (pending, texts): (Vec<Pending>, Vec<Option<String>>) = items.into_iter().unzip();
        let (texts, formats): (Vec<String>, Vec<TextFormat>) = pending
            .par_iter()
            .zip(texts)
            .map(|(pending, text)| match pending {
                Pending::Csv { .. } => (text.unwrap_or_default(), TextFormat::Csv),
                Pending::Table(table) => {
                    let format = table.source_format.text_format();
                    (serialize(table, format), format)
                }
            })
            .unzip();
        let ids = pending
            .iter()
            .map(|p| match p {
                Pending::Table(table) => table.id.clone(),
                Pending::Csv { id, .. } => id.clone(),
            })
            .collect();
        if pending.iter().all(|p| matches!(p, Pending::Table(_))) {
            let tables: Vec<Table> = pending
                .into_iter()
                .filter_map(|p| match p {
                    Pending::Table(table) => Some(table),
                    Pending::Csv { .. } => None,
                })
                .collect();
            return Corpus::assemble(ids, texts, formats, OnceLock::from(tables), Vec::new());
        }
        Corpus::assemble(ids, texts, formats, OnceLock::new(), pending)
    }

    fn assemble(
        ids: Vec<String>,
        texts: Vec<String>,
        formats: Vec<TextFormat>,
        tables: OnceLock<Vec<Table>>,
        pending: Vec<Pending>,
    ) -> Corpus {
        // First occurrence wins so that a duplicate id cannot shadow the table listed first.
        let mut by_id = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            by_id.entry(id.clone()).or_insert(i);
        }
        Corpus {
            ids,
            texts,
            formats,
            by_id,
            tables,
            pending,
        }
    }

    /// The same tables, serialized again.
    pub fn reserialized(&self, serialization: Serialization) -> Corpus {
        Corpus::from_tables_as(self.tables().to_vec(), serialization)
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    pub fn table(&self, i: usize) -> &Table {
        &self.tables()[i]
    }

    /// The id of table `i`, without parsing any table.
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The serialization searched by grep and shown (cut) in previews.
    pub fn text(&self, i: usize) -> &str {
        &self.texts[i]
    }

    /// The format of [`Corpus::text`] for table `i`.
    pub fn text_format(&self, i: usize) -> TextFormat {
        self.formats[i]
    }

    /// All tables; the first call on a loaded corpus parses the cells still kept as text.
    pub fn tables(&self) -> &[Table] {
        self.tables.get_or_init(|| {
            (0..self.pending.len())
                .into_par_iter()
                .map(|i| self.build(i))
                .collect()
        })
    }

    /// Table `i`, borrowed when it is already parsed, else parsed on the spot (and not kept): a preview
    /// of five candidates should not parse the whole corpus.
    pub(crate) fn table_view(&self, i: usize) -> Cow<'_, Table> {
        if let Some(tables) = self.tables.get() {
            return Cow::Borrowed(&tables[i]);
        }
        match &self.pending[i] {
            Pending::Table(table) => Cow::Borrowed(table),
            Pending::Csv { .. } => Cow::Owned(self.build(i)),
        }
    }

    fn build(&self, i: usize) -> Table {
        match &self.pending[i] {
            Pending::Table(table) => table.clone(),
            Pending::Csv {
                id,
                source_format,
                meta,
            } => {
                // The text is our own canonical CSV, so it parses; an error here is a bug, not input.
                let parsed = delimited::parse(&self.texts[i], SourceFormat::Csv)
                    .ok()
                    .and_then(|mut p| p.tables.pop())
                    .unwrap_or_else(|| {
                        tracing::error!(id, "canonical CSV text did not parse");
                        ParsedTable::default()
                    });
                Table {
                    id: id.clone(),
                    source_format: *source_format,
                    header: parsed.header,
                    rows: parsed.rows,
                    meta: meta.clone(),
                }
            }
        }
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }
}
