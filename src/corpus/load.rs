//! Loading a directory tree of table files into a [`Corpus`].
//!
//! Files are listed in a deterministic order (names sorted per directory), then read and parsed in
//! parallel; results are collected in listing order, so the corpus is the same however the threads ran.
//! Every problem becomes a [`Skipped`] entry and the load goes on.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use super::encoding::{self, Decoded};
use super::{delimited, html, json, markdown};
use super::{Corpus, CorpusError, Pending, SourceFormat, Table, TableMeta};

/// A load shows a progress bar only once it has run this long, so quick loads stay silent.
const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Tables past 64 MiB of cells are skipped unless the caller raises the limit.
pub const DEFAULT_MAX_TABLE_BYTES: u64 = 64 << 20;

/// How [`Corpus::load`] reads a directory.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Show a progress bar on stderr (only when stderr is a terminal, and only after a second).
    pub progress: bool,
    /// Files larger than this are skipped rather than read into memory (default 256 MiB).
    pub max_file_bytes: u64,
    /// Follow symbolic links while walking.
    pub follow_links: bool,
    /// A table whose cells (header included) take more bytes than this is skipped and reported:
    /// no prompt could show it, and one such table would dominate the corpus's memory.
    pub max_table_bytes: u64,
    /// The table files together may take at most this many bytes, checked before any is read.
    /// `None`: half of the memory available when the load starts. The corpus is held in memory
    /// (grep scans every table for every query), so a corpus that does not fit is refused up
    /// front rather than swapped or killed halfway.
    pub max_corpus_bytes: Option<u64>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            progress: false,
            max_file_bytes: 256 << 20,
            follow_links: false,
            max_table_bytes: DEFAULT_MAX_TABLE_BYTES,
            max_corpus_bytes: None,
        }
    }
}

impl LoadOptions {
    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    pub fn max_file_bytes(mut self, max_file_bytes: u64) -> Self {
        self.max_file_bytes = max_file_bytes;
        self
    }

    pub fn follow_links(mut self, follow_links: bool) -> Self {
        self.follow_links = follow_links;
        self
    }

    pub fn max_table_bytes(mut self, max_table_bytes: u64) -> Self {
        self.max_table_bytes = max_table_bytes;
        self
    }

    pub fn max_corpus_bytes(mut self, max_corpus_bytes: Option<u64>) -> Self {
        self.max_corpus_bytes = max_corpus_bytes;
        self
    }

    /// The corpus cap in force: the explicit one, else half of `MemAvailable` (no cap where the
    /// kernel does not say).
    fn corpus_cap(&self) -> Option<u64> {
        self.max_corpus_bytes.or_else(|| {
            crate::engine::free_memory(&candle_core::Device::Cpu).map(|available| available / 2)
        })
    }
}

/// A file, or a part of one, that did not become a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    /// Starts with `line N: ` or `byte N: ` when the position is known.
    pub reason: String,
}

/// What happened during a load besides the tables themselves.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub skipped: Vec<Skipped>,
    /// Tables without a single non-blank data cell; counted, not kept.
    pub empty_tables: usize,
    /// Lossy decodes and similar: the data was kept but may differ from the file.
    pub warnings: Vec<String>,
    /// Files read as tables.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// Files with an extension that is not a table format (README, LICENSE, ...); not read.
    pub ignored: Vec<PathBuf>,
    /// Files that were not UTF-8, and the encoding they were transcoded from (a UTF-16 BOM, or
    /// legacy 8-bit text as detected: `corpus::encoding`).
    pub transcoded: Vec<(PathBuf, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// `.csv`: CSV, TSV or TabFact, decided by content.
    Delimited,
    Tsv,
    Markdown,
    Html,
    Json,
    Jsonl,
}

fn file_kind(path: &Path) -> Option<FileKind> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "csv" => FileKind::Delimited,
        "tsv" | "tab" => FileKind::Tsv,
        "md" | "markdown" => FileKind::Markdown,
        "html" | "htm" => FileKind::Html,
        "json" => FileKind::Json,
        "jsonl" | "ndjson" => FileKind::Jsonl,
        _ => return None,
    })
}

#[derive(Default)]
struct FileOutcome {
    tables: Vec<(Pending, Option<String>)>,
    skipped: Vec<Skipped>,
    warnings: Vec<String>,
    empty_tables: usize,
    bytes: u64,
    transcoded_from: Option<&'static str>,
}

impl Corpus {
    /// Loads every table file under `dir` (recursively; `dir` may also be a single file). Table ids are
    /// paths relative to `dir` with `/` separators, plus `#N` or `#id` when a file holds several tables.
    pub fn load(dir: &Path, opts: &LoadOptions) -> Result<(Corpus, LoadReport), CorpusError> {
        let mut report = LoadReport::default();
        let (root, files) = list_files(dir, opts, &mut report)?;
        report.files = files.len();

        let progress = progress_bar(opts, files.len() as u64);
        let started = Instant::now();
        let shown = AtomicBool::new(false);
        let outcomes: Vec<FileOutcome> = files
            .par_iter()
            .map(|path| {
                let outcome = load_file(&root, path, opts);
                if let Some(bar) = &progress {
                    if !shown.load(Ordering::Relaxed) && started.elapsed() >= PROGRESS_DELAY {
                        shown.store(true, Ordering::Relaxed);
                        bar.set_draw_target(ProgressDrawTarget::stderr());
                    }
                    bar.inc(1);
                }
                outcome
            })
            .collect();
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }

        let mut tables = Vec::new();
        for (path, mut outcome) in files.iter().zip(outcomes) {
            tables.append(&mut outcome.tables);
            report.skipped.append(&mut outcome.skipped);
            report.warnings.append(&mut outcome.warnings);
            report.empty_tables += outcome.empty_tables;
            report.bytes += outcome.bytes;
            if let Some(encoding) = outcome.transcoded_from {
                report.transcoded.push((path.clone(), encoding.to_string()));
            }
        }
        tracing::debug!(
            tables = tables.len(),
            skipped = report.skipped.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "corpus loaded"
        );
        Ok((Corpus::from_loaded(tables), report))
    }
}

fn progress_bar(opts: &LoadOptions, files: u64) -> Option<ProgressBar> {
    if !opts.progress {
        return None;
    }
    // Hidden until the load has taken a while; `stderr()` itself draws nothing when not a terminal.
    let bar = ProgressBar::with_draw_target(Some(files), ProgressDrawTarget::hidden());
    if let Ok(style) = ProgressStyle::with_template("loading {bar:40} {pos}/{len} files {elapsed}")
    {
        bar.set_style(style);
    }
    Some(bar)
}

/// The root that ids are relative to, and the table files in walk order.
fn list_files(
    dir: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<(PathBuf, Vec<PathBuf>), CorpusError> {
    let metadata = std::fs::metadata(dir).map_err(|source| CorpusError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    if metadata.is_file() {
        check_corpus_size(dir, metadata.len(), opts)?;
        let root = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        return Ok((root, vec![dir.to_path_buf()]));
    }
    if !metadata.is_dir() {
        return Err(CorpusError::NotADirectory(dir.to_path_buf()));
    }
    let mut files = Vec::new();
    let mut total_bytes = 0u64;
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(opts.follow_links)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            entry.depth() == 0 || !entry.file_name().to_string_lossy().starts_with('.')
        });
    for entry in walker {
        match entry {
            Ok(entry) if entry.file_type().is_file() => {
                if file_kind(entry.path()).is_some() {
                    // A file that cannot be stat'ed counts as empty here; reading it reports why.
                    total_bytes += entry.metadata().map_or(0, |m| m.len());
                    files.push(entry.into_path());
                } else {
                    report.ignored.push(entry.into_path());
                }
            }
            Ok(_) => {}
            Err(err) => report.skipped.push(Skipped {
                path: err.path().unwrap_or(dir).to_path_buf(),
                reason: err.to_string(),
            }),
        }
    }
    check_corpus_size(dir, total_bytes, opts)?;
    Ok((dir.to_path_buf(), files))
}

fn check_corpus_size(dir: &Path, bytes: u64, opts: &LoadOptions) -> Result<(), CorpusError> {
    match opts.corpus_cap() {
        Some(limit) if bytes > limit => Err(CorpusError::TooLarge {
            path: dir.to_path_buf(),
            bytes,
            limit,
        }),
        _ => Ok(()),
    }
}

fn load_file(root: &Path, path: &Path, opts: &LoadOptions) -> FileOutcome {
    let mut outcome = FileOutcome::default();
    let skip = |outcome: &mut FileOutcome, reason: String| {
        outcome.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason,
        });
    };
    let Some(kind) = file_kind(path) else {
        return outcome;
    };
    with_read_buffer(|buffer| {
        if let Err(reason) = read_limited(path, opts.max_file_bytes, buffer) {
            skip(&mut outcome, reason);
            return;
        }
        outcome.bytes = buffer.len() as u64;
        let (text, transcoded_from, replaced) = match encoding::decode(buffer) {
            Decoded::Binary { nul_at } => {
                skip(
                    &mut outcome,
                    format!("byte {nul_at}: a NUL byte; skipped as a binary file"),
                );
                return;
            }
            Decoded::Text {
                text,
                transcoded_from,
                replaced,
            } => (text, transcoded_from, replaced),
        };
        if replaced {
            outcome.warnings.push(format!(
                "{}: bytes that are not {} replaced by U+FFFD",
                path.display(),
                transcoded_from.unwrap_or("UTF-8")
            ));
        }
        outcome.transcoded_from = transcoded_from;
        parse_file(root, path, kind, &text, opts.max_table_bytes, &mut outcome);
    });
    outcome
}

thread_local! {
    /// One read buffer per loader thread: a fresh allocation per file made the heap grow and shrink
    /// (a syscall each time) thousands of times per load.
    static READ_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A buffer that grew past this for one big file is not kept for the next.
const KEEP_BUFFER_BYTES: usize = 4 << 20;

fn with_read_buffer(f: impl FnOnce(&mut Vec<u8>)) {
    READ_BUFFER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffer) => {
            buffer.clear();
            f(&mut buffer);
            if buffer.capacity() > KEEP_BUFFER_BYTES {
                *buffer = Vec::new();
            }
        }
        Err(_) => f(&mut Vec::new()),
    });
}

fn parse_file(
    root: &Path,
    path: &Path,
    kind: FileKind,
    text: &str,
    max_table_bytes: u64,
    outcome: &mut FileOutcome,
) {
    let skip = |outcome: &mut FileOutcome, reason: String| {
        outcome.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason,
        });
    };
    let rel = relative_id(root, path);
    let meta = || TableMeta {
        path: path.to_path_buf(),
        ..TableMeta::default()
    };

    let (format, parsed) = match kind {
        FileKind::Delimited | FileKind::Tsv => {
            let format = if kind == FileKind::Tsv {
                SourceFormat::Tsv
            } else {
                delimited::sniff(text)
            };
            let salvaged = delimited::canonical_salvaging(text, format).map(|(csv, dropped)| {
                for (line, reason) in dropped {
                    skip(
                        outcome,
                        format!("line {line}: {reason}; the line was dropped"),
                    );
                }
                csv
            });
            match salvaged {
                Ok(canonical) if canonical.text.len() as u64 > max_table_bytes => skip(
                    outcome,
                    over_table_limit(&rel, canonical.text.len() as u64, max_table_bytes),
                ),
                Ok(canonical) if canonical.has_data => outcome.tables.push((
                    Pending::Csv {
                        id: rel,
                        source_format: format,
                        meta: meta(),
                    },
                    Some(canonical.text),
                )),
                Ok(_) => outcome.empty_tables += 1,
                Err(err) => skip(outcome, err.to_string()),
            }
            return;
        }
        FileKind::Markdown => (SourceFormat::Markdown, markdown::parse(text)),
        FileKind::Html => (SourceFormat::Html, html::parse(text)),
        FileKind::Json => (SourceFormat::Json, json::parse_json(text)),
        FileKind::Jsonl => (SourceFormat::Json, json::parse_jsonl(text)),
    };
    for (at, reason) in parsed.problems {
        skip(outcome, format!("{at}{reason}"));
    }

    let several = parsed.tables.len() > 1;
    let mut seen_ids = HashSet::new();
    for (i, table) in parsed.tables.into_iter().enumerate() {
        let id = match &table.local_id {
            Some(local) => format!("{rel}#{local}"),
            None if several => format!("{rel}#{i}"),
            None => rel.clone(),
        };
        if !seen_ids.insert(id.clone()) {
            skip(outcome, format!("table {i}: duplicate id {id:?}"));
            continue;
        }
        let has_data = table
            .rows
            .iter()
            .any(|row| row.iter().any(|cell| !cell.trim().is_empty()));
        if !has_data {
            tracing::debug!(id, "empty table skipped");
            outcome.empty_tables += 1;
            continue;
        }
        let bytes = table
            .header
            .iter()
            .chain(table.rows.iter().flatten())
            .map(|cell| cell.len() as u64)
            .sum::<u64>();
        if bytes > max_table_bytes {
            skip(outcome, over_table_limit(&id, bytes, max_table_bytes));
            continue;
        }
        let table = Table {
            id,
            source_format: format,
            header: table.header,
            rows: table.rows,
            meta: TableMeta {
                caption: table.caption,
                title: table.title,
                ..meta()
            },
        };
        outcome.tables.push((Pending::Table(table), None));
    }
}

fn over_table_limit(id: &str, bytes: u64, limit: u64) -> String {
    format!(
        "table {id}: {bytes} bytes of cells, over the {limit}-byte table limit (--max-table-bytes)"
    )
}

/// Reads the whole file into `buffer`, unless it is larger than `limit`.
fn read_limited(path: &Path, limit: u64, buffer: &mut Vec<u8>) -> Result<(), String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|err| err.to_string())?;
    // Reading at most one byte past the limit tells "too big" without a `stat` per file.
    file.take(limit.saturating_add(1))
        .read_to_end(buffer)
        .map_err(|err| err.to_string())?;
    if buffer.len() as u64 > limit {
        return Err(format!("file is over the {limit}-byte limit"));
    }
    Ok(())
}

fn relative_id(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}
