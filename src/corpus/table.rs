use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The format a table was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceFormat {
    Csv,
    Tsv,
    Markdown,
    Html,
    Json,
    /// TabFact's `#`-separated `.html.csv` files.
    Tabfact,
}

/// A text serialization of a table: what the grep stage searches and what previews show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextFormat {
    Csv,
    Markdown,
    Html,
}

impl SourceFormat {
    /// The serialization that represents a table "in its own format". JSON and TabFact files have no
    /// table-shaped text of their own, so they are searched as CSV.
    pub fn text_format(self) -> TextFormat {
        match self {
            SourceFormat::Markdown => TextFormat::Markdown,
            SourceFormat::Html => TextFormat::Html,
            SourceFormat::Csv | SourceFormat::Tsv | SourceFormat::Json | SourceFormat::Tabfact => {
                TextFormat::Csv
            }
        }
    }
}

/// Where a table came from. For evaluation and reports only: never rendered into a prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMeta {
    pub path: PathBuf,
    pub caption: Option<String>,
    pub title: Option<String>,
}

/// One table: a header and rectangular-or-ragged rows of cell strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    /// Stable id: the path relative to the corpus root (plus `#N` when one file holds several tables).
    pub id: String,
    pub source_format: SourceFormat,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub meta: TableMeta,
}
