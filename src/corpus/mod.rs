//! The table model, loaders for every format we meet in the wild (CSV/TSV, Markdown pipe tables, HTML,
//! JSON/JSONL, TabFact's `#`-separated files), serializers (CSV, Markdown, HTML, `mixed`, transpose) and
//! the in-memory corpus store.
//!
//! Storage metadata (paths, captions, titles) lives in [`TableMeta`] for evaluation only; nothing that
//! builds a prompt may read it.

mod table;

pub use table::{SourceFormat, Table, TableMeta, TextFormat};
